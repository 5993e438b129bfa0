package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

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
	return launch("vigil", args, stdout, stderr, "; opening the console window",
		func(ctx context.Context, srv *server, log *slog.Logger) error {
			err := app.Run(ctx, desktopOptions(srv, log))
			log.Info("window closed")
			return err
		})
}

// desktopOptions are the window's options for the running guardian srv. The window's
// notifications take held steps from the guardian's event bus: this process is the
// guardian, so it needs no operator sign-in to see them, as the live websocket would in
// team mode.
func desktopOptions(srv *server, log *slog.Logger) app.Options {
	holds := app.NewHoldFeed()
	srv.repl.bus.Subscribe(holds)
	return app.Options{URL: loopbackURL(srv.URL) + "/", Title: "Vigil", Logger: log, Holds: holds}
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
