//go:build (desktop && production) || dev

package app

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/wailsapp/wails/v2"
	"github.com/wailsapp/wails/v2/pkg/logger"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
	"github.com/wailsapp/wails/v2/pkg/options/linux"
	wailsruntime "github.com/wailsapp/wails/v2/pkg/runtime"
)

// Available reports whether this build can open the desktop window.
func Available() bool { return true }

// Run opens the desktop window on opts.URL and blocks until the window has closed,
// either by the user or because ctx is done. It must be called from the main goroutine
// (GTK and Cocoa own the process's main thread).
func Run(ctx context.Context, opts Options) error {
	return run(ctx, opts, wailsToolkit)
}

// windowIconSize is the size of the icon handed to the window manager.
const windowIconSize = 256

// background matches the start page so the window does not flash white while loading.
func background() *options.RGBA { return &options.RGBA{R: 15, G: 23, B: 42, A: 255} }

func wailsToolkit(spec windowSpec) error {
	handler, err := startPageHandler(spec.cfg.title, spec.cfg.url)
	if err != nil {
		return err
	}
	icon, err := Icon(windowIconSize)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex // OnStartup runs on a Wails goroutine
		ctrl *wailsControl
	)
	err = wails.Run(&options.App{
		Title:                    spec.cfg.title,
		Width:                    spec.cfg.width,
		Height:                   spec.cfg.height,
		MinWidth:                 MinWidth,
		MinHeight:                MinHeight,
		BackgroundColour:         background(),
		AssetServer:              &assetserver.Options{Handler: handler},
		Menu:                     spec.menu,
		Logger:                   newWailsLogger(spec.cfg.logger),
		LogLevel:                 logger.INFO,
		LogLevelProduction:       logger.WARNING,
		EnableDefaultContextMenu: true, // the webview's own Copy/Paste/Select All on right click
		OnStartup: func(ctx context.Context) {
			hookWebview()
			c := &wailsControl{ctx: ctx, calls: newSerial()}
			mu.Lock()
			ctrl = c
			mu.Unlock()
			spec.started(c)
		},
		Linux: &linux.Options{
			Icon:        icon,
			ProgramName: "vigil",
			// Software rendering: the console needs no GPU, and accelerated compositing
			// shows blank windows on some drivers and under Xvfb.
			WebviewGpuPolicy: linux.WebviewGpuPolicyNever,
		},
	})
	mu.Lock()
	defer mu.Unlock()
	if ctrl != nil {
		ctrl.release()
	}
	return err
}

// wailsControl is the control of a running Wails window. ctx is the one Wails handed to
// OnStartup: the runtime functions accept no other.
type wailsControl struct {
	ctx context.Context

	// Wails keeps the notification connection in unguarded package state, so every
	// notification call takes its turn in calls, which also bounds how long a caller (or
	// the shutdown) waits for a daemon that never answers. notifyOK and notifyAt are only
	// touched in turn.
	calls    *serial
	notifyOK bool
	notifyAt bool // initialisation attempted
}

// notifyTimeout bounds a notification call; a desktop's daemon answers in milliseconds.
const notifyTimeout = 5 * time.Second

// releaseTimeout bounds how long closing the window waits for a notification call to
// end before leaving the connection to the process's exit.
const releaseTimeout = 2 * time.Second

func (c *wailsControl) Quit() { quitWindow(c.ctx) }

func (c *wailsControl) Reload() {
	// location.reload(), not runtime.WindowReload: the console page carries no Wails
	// runtime, having been loaded from the guardian's origin.
	wailsruntime.WindowExecJS(c.ctx, "window.location.reload()")
}

func (c *wailsControl) Show() {
	wailsruntime.WindowUnminimise(c.ctx)
	wailsruntime.WindowShow(c.ctx)
}

func (c *wailsControl) OpenInBrowser(url string) { wailsruntime.BrowserOpenURL(c.ctx, url) }

func (c *wailsControl) Edit(cmd EditCommand) { editWebview(c.ctx, cmd) }

func (c *wailsControl) Notify(ctx context.Context, n Notification) error {
	return c.calls.do(ctx, notifyTimeout, func() error {
		if !c.notifyAt {
			c.notifyAt = true
			if err := wailsruntime.InitializeNotifications(c.ctx); err != nil {
				return fmt.Errorf("%w: %w", errNotificationsUnavailable, err)
			}
			c.notifyOK = true
			// Clicking a notification brings the console forward.
			wailsruntime.OnNotificationResponse(c.ctx, func(wailsruntime.NotificationResult) { c.Show() })
		}
		if !c.notifyOK {
			return errNotificationsUnavailable
		}
		if err := wailsruntime.SendNotification(c.ctx, wailsruntime.NotificationOptions{
			ID: n.ID, Title: n.Title, Body: n.Body,
		}); err != nil {
			return fmt.Errorf("send notification %s: %w", strconv.Quote(n.ID), err)
		}
		return nil
	})
}

// release frees the notification service once nothing can notify any more; a call the
// daemon never answered makes it give up after releaseTimeout (the process exits next).
func (c *wailsControl) release() {
	c.calls.last(releaseTimeout, func() {
		if c.notifyOK {
			wailsruntime.CleanupNotifications(c.ctx)
			c.notifyOK = false
		}
	})
}
