package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		vals []int64
		p    int
		want int64
	}{
		{nil, 50, 0},
		{[]int64{7}, 50, 7},
		{[]int64{7}, 99, 7},
		{[]int64{1, 2}, 50, 1},
		{[]int64{1, 2, 3, 4}, 99, 4},
		{[]int64{1, 2, 3, 4}, 50, 2},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Percentile(tc.vals, tc.p), "%v p%d", tc.vals, tc.p)
	}
}
