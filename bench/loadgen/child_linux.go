package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process when the load generator exits, however
// it exits: a guardian or floor left running would load the machine of the next run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
