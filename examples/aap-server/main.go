// Command aap-server is a scripted AAP v3 agent server to put Vigil in front of: no model,
// one agent ("guarded-agent") with a server tool to trust (read_file), one that needs
// permission (delete_file), and room for a client tool (get_time). What the agent does
// follows from the user's message:
//
//	hello                  a plain answer, no tools
//	read and delete PATH   read_file, then delete_file, then a report of both results
//	what time is it?       calls the client's get_time tool, then reports its result
//	leak                   an answer with an API key in it (for redaction rules)
//	echo TEXT              repeats TEXT (shows what reached the agent)
//
// Usage:
//
//	go run ./examples/aap-server -addr 127.0.0.1:3000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/gateway/aap/aaptest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "listen address")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "aap-server:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: aaptest.New(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("AAP agent server listening", "url", "http://"+ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
