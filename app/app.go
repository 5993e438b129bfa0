// Package app is Vigil's desktop shell: one native window (Wails v2) that shows the
// console served by the guardian's own HTTP listener on loopback.
//
// The window loads the guardian's URL directly rather than going through Wails' asset
// server, because that server carries no websockets and the console lives on /api/live.
// A plain build (no build tags) compiles a stand-in whose Available reports false, so
// `go build` and `go test ./...` never need WebKit headers; the real window needs
// `-tags desktop,production,webkit2_41` (or the Wails CLI, which adds its own tags).
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"sync"

	"github.com/wailsapp/wails/v2/pkg/menu"
)

// ErrUnavailable is returned by Run in a build without the desktop tags.
var ErrUnavailable = errors.New("desktop window not compiled in (build with -tags desktop,production,webkit2_41)")

// Default window geometry; the console is laid out for at least MinWidth x MinHeight.
const (
	DefaultWidth  = 1280
	DefaultHeight = 820
	MinWidth      = 720
	MinHeight     = 480
)

// Options configures the desktop window.
type Options struct {
	// URL is the console served by the guardian, e.g. http://127.0.0.1:7878/. It must be
	// http or https with a host; the guardian must already be listening (Run waits for it
	// from inside the window, so a slow start shows a waiting page rather than an error).
	URL string
	// Title of the window; "Vigil" when empty.
	Title string
	// Width and Height of the window at start; defaults when zero.
	Width, Height int
	// Logger receives the shell's and Wails' messages; slog.Default() when nil.
	Logger *slog.Logger
	// OnShutdown is called once, after the window has closed and before Run returns.
	OnShutdown func()
	// Holds, when set, makes the shell raise a native desktop notification for every
	// held step it carries (the page's own Notification API is not granted inside the
	// webview). The caller subscribes it to the guardian's event bus.
	Holds *HoldFeed
}

// DisplayAvailable reports whether a window can be shown: on Linux and the BSDs that
// needs an X11 or Wayland display; elsewhere a desktop session is assumed.
func DisplayAvailable() bool {
	return displayAvailable(runtime.GOOS, os.Getenv)
}

func displayAvailable(goos string, getenv func(string) string) bool {
	switch goos {
	case "linux", "freebsd", "openbsd", "netbsd", "dragonfly":
		return getenv("DISPLAY") != "" || getenv("WAYLAND_DISPLAY") != ""
	default:
		return true
	}
}

// config is Options checked and filled with defaults.
type config struct {
	url           *url.URL
	title         string
	width, height int
	logger        *slog.Logger
	onShutdown    func()
	holds         *HoldFeed
}

func (o Options) config() (config, error) {
	u, err := consoleURL(o.URL)
	if err != nil {
		return config{}, err
	}
	c := config{
		url:        u,
		title:      o.Title,
		width:      o.Width,
		height:     o.Height,
		logger:     o.Logger,
		onShutdown: o.OnShutdown,
		holds:      o.Holds,
	}
	if c.title == "" {
		c.title = "Vigil"
	}
	if c.width <= 0 {
		c.width = DefaultWidth
	}
	if c.height <= 0 {
		c.height = DefaultHeight
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// consoleURL accepts only an absolute http(s) URL: the window navigates to it and the
// start page embeds it, so anything else (javascript:, file:, relative) is refused.
func consoleURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("app: console URL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("app: console URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("app: console URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("app: console URL %q: host is missing", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("app: console URL %q: credentials are not allowed", raw)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	u.Fragment = ""
	return u, nil
}

// control is what the shell needs from a running window. The desktop build implements
// it with Wails' runtime package, whose functions log.Fatalf when given a context Wails
// did not create; keeping them behind this interface keeps tests away from them.
type control interface {
	Quit()
	Reload()
	Show()
	OpenInBrowser(url string)
	Edit(cmd EditCommand)
	Notify(ctx context.Context, n Notification) error
}

// windowSpec is everything the toolkit needs to open the window, independent of Wails'
// option types so the lifecycle can be tested without a toolkit.
type windowSpec struct {
	cfg     config
	menu    *menu.Menu
	started func(c control) // called once, when the window exists
}

// toolkit opens the window described by spec and blocks until it has closed.
type toolkit func(spec windowSpec) error

// run owns the window's lifecycle: it opens the window with tk, closes it when ctx is
// done, and calls OnShutdown once after it has closed.
func run(ctx context.Context, opts Options, tk toolkit) error {
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("app: not started: %w", err)
	}

	var (
		mu     sync.Mutex // guards ctrl and gone; started runs on a toolkit goroutine
		ctrl   control
		gone   bool // the window has closed: start no more watchers
		closed = make(chan struct{})
	)
	current := func() control {
		mu.Lock()
		defer mu.Unlock()
		return ctrl
	}
	// life ends when the window is gone and stops the watchers.
	life, endLife := context.WithCancel(ctx)
	defer endLife()
	var watchers sync.WaitGroup

	spec := windowSpec{
		cfg: cfg,
		menu: buildMenu(runtime.GOOS, menuActions{
			quit:          func() { withControl(current, control.Quit) },
			reload:        func() { withControl(current, control.Reload) },
			openInBrowser: func() { withControl(current, func(c control) { c.OpenInBrowser(cfg.url.String()) }) },
			edit:          func(cmd EditCommand) { withControl(current, func(c control) { c.Edit(cmd) }) },
		}),
		started: func(c control) {
			mu.Lock()
			defer mu.Unlock()
			if gone {
				return
			}
			ctrl = c
			cfg.logger.Info("desktop window open", "url", cfg.url.String())

			watchers.Add(1)
			go func() {
				defer watchers.Done()
				select {
				case <-ctx.Done():
					cfg.logger.Info("closing desktop window", "reason", context.Cause(ctx))
					c.Quit()
				case <-closed:
				}
			}()
			if cfg.holds != nil {
				watchers.Add(1)
				go func() {
					defer watchers.Done()
					cfg.holds.Watch(life, c.Notify, cfg.logger)
				}()
			}
		},
	}

	runErr := tk(spec)
	mu.Lock()
	gone = true
	mu.Unlock()
	close(closed)
	endLife()
	watchers.Wait()
	if cfg.onShutdown != nil {
		cfg.onShutdown()
	}
	if runErr != nil {
		return fmt.Errorf("app: desktop window: %w", runErr)
	}
	cfg.logger.Info("desktop window closed")
	return nil
}

// withControl runs f on the window's control once the window exists; menu actions that
// arrive earlier (they cannot, in practice) are dropped rather than reaching Wails early.
func withControl(current func() control, f func(control)) {
	if c := current(); c != nil {
		f(c)
	}
}
