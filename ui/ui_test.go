//go:build !no_ui

package ui

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// assetRef matches the files index.html loads (Vite writes them as ./assets/NAME-HASH.ext).
var assetRef = regexp.MustCompile(`(?:src|href)="\./(assets/[^"]+)"`)

// TestConsoleEmbedded checks that a default build carries the real console: index.html and
// every asset it loads, byte for byte the committed ui/dist.
func TestConsoleEmbedded(t *testing.T) {
	ui := FS()
	require.NotNil(t, ui)
	index, err := fs.ReadFile(ui, "index.html")
	require.NoError(t, err)
	refs := assetRef.FindAllStringSubmatch(string(index), -1)
	require.NotEmpty(t, refs, "index.html loads no ./assets/ files:\n%s", index)
	var js bool
	for _, m := range refs {
		got, err := fs.ReadFile(ui, m[1])
		require.NoError(t, err, "index.html loads %s", m[1])
		want, err := os.ReadFile("dist/" + m[1])
		require.NoError(t, err)
		require.Equal(t, want, got, m[1])
		js = js || strings.HasSuffix(m[1], ".js")
	}
	require.True(t, js, "index.html loads no script")
}
