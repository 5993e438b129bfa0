package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/app"
)

// runDesktop starts the guardian and opens the console in a desktop window. Without a
// display, or in a build without the desktop tags, it serves headless and says so.
func runDesktop(args []string, stdout, stderr io.Writer) int {
	switch {
	case !app.Available():
		fmt.Fprintln(stderr, "vigil: this build has no desktop window (build with 'make desktop'); running the headless server instead")
		return runServe(args, stdout, stderr)
	case !app.DisplayAvailable():
		fmt.Fprintln(stderr, "vigil: no display found (DISPLAY/WAYLAND_DISPLAY unset); running the headless server instead")
		return runServe(args, stdout, stderr)
	}
	cfg, err := parseConfig("vigil", args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "vigil: %v\n", err)
		return 2
	}
	log := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := startServer(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "vigil: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "Vigil guardian listening on %s (AOS endpoint /aos); opening the console window\n", srv.URL)
	winErr := app.Run(ctx, app.Options{URL: loopbackURL(srv.URL) + "/", Title: "Vigil", Logger: log, HoldNotifications: true})
	log.Info("window closed; shutting down")
	code := 0
	if winErr != nil {
		log.Error("desktop window", "err", winErr)
		code = 1
	}
	if err := srv.Shutdown(10 * time.Second); err != nil {
		log.Error("shutdown", "err", err)
		code = 1
	}
	return code
}

// loopbackURL is the URL the window loads: the guardian's own port on 127.0.0.1, even when
// it listens on every interface.
func loopbackURL(u string) string {
	for _, any := range []string{"http://0.0.0.0:", "http://[::]:", "https://0.0.0.0:", "https://[::]:"} {
		if strings.HasPrefix(u, any) {
			scheme := u[:strings.Index(u, ":")]
			return scheme + "://127.0.0.1:" + strings.TrimPrefix(u, any)
		}
	}
	return u
}
