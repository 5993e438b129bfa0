package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name             string
		live, held, want int64
	}{
		{"nothing held: GOGC alone", 100 * mb, 0, math.MaxInt64},
		{"held steps get half their size", 1020 * mb, 1000 * mb, memoryHeadroom + 1500*mb},
		{"a large live heap keeps its headroom", 3000 * mb, 1000 * mb, memoryHeadroom + 3000*mb},
		{"a small hold", 100 * mb, 1 * mb, memoryHeadroom + 100*mb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := memoryLimit(tc.live, tc.held)
			require.Equal(t, tc.want, got)
			require.Greater(t, got, tc.live, "the limit stays above the live heap")
		})
	}
}
