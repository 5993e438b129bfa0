//go:build unix

package guardian_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, all threads: with the step journal, part
// of a step's work happens on the storage writer's goroutine, after its answer.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
