package app

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func decodePNG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	return img
}

func nrgbaAt(img image.Image, x, y int) color.NRGBA {
	return color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
}

func TestIconSizes(t *testing.T) {
	for _, size := range []int{16, 64, 256} {
		b, err := Icon(size)
		require.NoError(t, err)
		img := decodePNG(t, b)
		require.Equal(t, image.Rect(0, 0, size, size), img.Bounds())
		require.Zero(t, nrgbaAt(img, 0, 0).A, "corners are transparent (rounded square)")
	}
	for _, size := range []int{0, 15, 4097} {
		_, err := Icon(size)
		require.Error(t, err, "size %d", size)
	}
}

func TestIconGlyph(t *testing.T) {
	b, err := Icon(256)
	require.NoError(t, err)
	img := decodePNG(t, b)
	at := func(fx, fy float64) color.NRGBA { return nrgbaAt(img, int(fx*256), int(fy*256)) }

	require.Equal(t, iconIris, at(0.5, eyeY), "pupil at the centre")
	require.Equal(t, iconEye, at(0.5-eyeHalfW+0.05, eyeY), "white of the eye beside the iris")
	shield := at(0.5, 0.8)
	require.Greater(t, shield.G, shield.R, "shield below the eye is teal")
	bg := at(0.1, 0.5)
	require.Equal(t, uint8(0xff), bg.A)
	require.Less(t, bg.G, uint8(0x40), "background is dark")
}

// build/appicon.png is generated from Icon; `go generate ./app` refreshes it.
func TestAppIconFileIsCurrent(t *testing.T) {
	onDisk, err := os.ReadFile(filepath.Join("..", "build", "appicon.png"))
	require.NoError(t, err)
	got := decodePNG(t, onDisk)
	require.Equal(t, image.Rect(0, 0, 1024, 1024), got.Bounds())
	// Every 5th pixel each way (odd step, so edges at any offset get sampled) keeps the
	// check fast under -race while still catching any change to the design.
	for y := 0; y < 1024; y += 5 {
		for x := 0; x < 1024; x += 5 {
			if w, g := iconPixel(1024, x, y), nrgbaAt(got, x, y); w != g {
				t.Fatalf("build/appicon.png differs from Icon(1024) at %d,%d (%v vs %v): run go generate ./app", x, y, g, w)
			}
		}
	}
}
