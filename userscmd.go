package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// runUsers implements `vigil users add|list|remove|passwd`: the operators' console accounts.
// Passwords come from standard input, prompted without echo on a terminal.
func runUsers(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return authCLI(stdout, stderr).Users(ctx, args)
}
