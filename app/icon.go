package app

//go:generate go run ./internal/genicon -size 1024 -o ../build/appicon.png

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
)

// Icon draws Vigil's icon, an eye on a shield, as a size x size PNG. build/appicon.png is
// Icon(1024) (see the go:generate line); the window uses a smaller one.
func Icon(size int) ([]byte, error) {
	if size < 16 || size > 4096 {
		return nil, fmt.Errorf("app: icon size %d outside 16..4096", size)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, iconImage(size)); err != nil {
		return nil, fmt.Errorf("app: encode icon: %w", err)
	}
	return b.Bytes(), nil
}

// Icon colours.
var (
	iconBgTop      = color.NRGBA{0x1e, 0x29, 0x3b, 0xff}
	iconBgBottom   = color.NRGBA{0x0f, 0x17, 0x2a, 0xff}
	iconShieldTop  = color.NRGBA{0x2d, 0xd4, 0xbf, 0xff}
	iconShieldBase = color.NRGBA{0x0d, 0x94, 0x88, 0xff}
	iconEye        = color.NRGBA{0xf8, 0xfa, 0xfc, 0xff}
	iconIris       = color.NRGBA{0x0f, 0x17, 0x2a, 0xff}
)

// Geometry in units of the icon's side.
const (
	iconMargin   = 0.03
	iconRadius   = 0.2
	shieldTop    = 0.15
	shieldCorner = 0.05
	shieldWaist  = 0.50
	shieldTip    = 0.89
	shieldHalf   = 0.31
	eyeY         = 0.46
	eyeHalfW     = 0.21
	eyeHalfH     = 0.115
	irisR        = 0.088
	glintR       = 0.026
)

// iconImage renders the icon.
func iconImage(size int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for py := 0; py < size; py++ {
		for px := 0; px < size; px++ {
			img.SetNRGBA(px, py, iconPixel(size, px, py))
		}
	}
	return img
}

// iconPixel is pixel (px, py) of the size x size icon, supersampled for smooth edges.
func iconPixel(size, px, py int) color.NRGBA {
	ss := 4
	if size >= 1024 {
		ss = 3
	}
	var r, g, b, a float64
	for sy := 0; sy < ss; sy++ {
		for sx := 0; sx < ss; sx++ {
			x := (float64(px) + (float64(sx)+0.5)/float64(ss)) / float64(size)
			y := (float64(py) + (float64(sy)+0.5)/float64(ss)) / float64(size)
			c, ok := iconSample(x, y)
			if !ok {
				continue
			}
			al := float64(c.A) / 255
			r += float64(c.R) * al
			g += float64(c.G) * al
			b += float64(c.B) * al
			a += al
		}
	}
	if a == 0 {
		return color.NRGBA{}
	}
	return color.NRGBA{
		R: uint8(math.Round(r / a)),
		G: uint8(math.Round(g / a)),
		B: uint8(math.Round(b / a)),
		A: uint8(math.Round(a / float64(ss*ss) * 255)),
	}
}

// iconSample is the colour at (x, y) in [0,1]², or false outside the icon.
func iconSample(x, y float64) (color.NRGBA, bool) {
	if !inRoundedSquare(x, y) {
		return color.NRGBA{}, false
	}
	c := lerp(iconBgTop, iconBgBottom, y)
	if inShield(x, y) {
		c = lerp(iconShieldTop, iconShieldBase, (y-shieldTop)/(shieldTip-shieldTop))
	}
	if inEye(x, y) {
		c = iconEye
		if math.Hypot(x-0.5, y-eyeY) <= irisR {
			c = iconIris
		}
		if math.Hypot(x-0.5-0.032, y-eyeY+0.032) <= glintR {
			c = iconEye
		}
	}
	return c, true
}

func inRoundedSquare(x, y float64) bool {
	lo, hi := iconMargin, 1-iconMargin
	if x < lo || x > hi || y < lo || y > hi {
		return false
	}
	cx := math.Max(lo+iconRadius, math.Min(x, hi-iconRadius))
	cy := math.Max(lo+iconRadius, math.Min(y, hi-iconRadius))
	return math.Hypot(x-cx, y-cy) <= iconRadius
}

// inShield: straight sides with rounded top corners down to the waist, then sides that
// bow outwards (a cosine) and meet in a point at the tip.
func inShield(x, y float64) bool {
	dx := math.Abs(x - 0.5)
	if y < shieldTop || y > shieldTip {
		return false
	}
	if y <= shieldWaist {
		if dx > shieldHalf {
			return false
		}
		if y < shieldTop+shieldCorner && dx > shieldHalf-shieldCorner {
			return math.Hypot(dx-(shieldHalf-shieldCorner), y-(shieldTop+shieldCorner)) <= shieldCorner
		}
		return true
	}
	t := (y - shieldWaist) / (shieldTip - shieldWaist)
	return dx <= shieldHalf*math.Cos(t*math.Pi/2)
}

// inEye: the almond where two circles overlap, eyeHalfW wide and eyeHalfH tall each way.
func inEye(x, y float64) bool {
	r := (eyeHalfW*eyeHalfW + eyeHalfH*eyeHalfH) / (2 * eyeHalfH)
	d := r - eyeHalfH
	return math.Hypot(x-0.5, y-(eyeY-d)) <= r && math.Hypot(x-0.5, y-(eyeY+d)) <= r
}

func lerp(a, b color.NRGBA, t float64) color.NRGBA {
	t = math.Max(0, math.Min(1, t))
	mix := func(p, q uint8) uint8 { return uint8(math.Round(float64(p) + (float64(q)-float64(p))*t)) }
	return color.NRGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), mix(a.A, b.A)}
}
