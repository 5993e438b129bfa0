//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing where the kernel cannot tie a child's life to its parent's.
func dieWithParent(*exec.Cmd) {}
