//go:build no_ui

package ui

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNoUI(t *testing.T) {
	require.Nil(t, FS())
}
