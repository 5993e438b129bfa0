//go:build !((desktop && production) || dev) && !bindings

package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStubBuild(t *testing.T) {
	require.False(t, Available())
	err := Run(context.Background(), Options{URL: "http://127.0.0.1:7878/"})
	require.ErrorIs(t, err, ErrUnavailable)
	err = Run(context.Background(), Options{URL: "javascript:alert(1)"})
	require.ErrorContains(t, err, "scheme", "options are checked even without a window")
}
