//go:build !linux

package rules

import "testing"

func cpuPerOp(b *testing.B, f func()) {
	for b.Loop() {
		f()
	}
}
