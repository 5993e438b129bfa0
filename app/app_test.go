package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDisplayAvailable(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	tests := []struct {
		name string
		goos string
		env  map[string]string
		want bool
	}{
		{"linux without display", "linux", nil, false},
		{"linux with X11", "linux", map[string]string{"DISPLAY": ":0"}, true},
		{"linux with Wayland", "linux", map[string]string{"WAYLAND_DISPLAY": "wayland-0"}, true},
		{"freebsd without display", "freebsd", nil, false},
		{"macOS always has a session", "darwin", nil, true},
		{"windows always has a session", "windows", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, displayAvailable(tt.goos, env(tt.env)))
		})
	}
}

func TestOptionsConfig(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		wantURL string
		wantErr string
	}{
		{"loopback with path", "http://127.0.0.1:7878/", "http://127.0.0.1:7878/", ""},
		{"adds the root path", "http://127.0.0.1:7878", "http://127.0.0.1:7878/", ""},
		{"https", "https://vigil.example:8443/console/", "https://vigil.example:8443/console/", ""},
		{"drops the fragment", "http://[::1]:7878/#live", "http://[::1]:7878/", ""},
		{"empty", "", "", "empty"},
		{"javascript", "javascript:alert(1)", "", "scheme"},
		{"file", "file:///etc/passwd", "", "scheme"},
		{"relative", "/console", "", "scheme"},
		{"no host", "http:///x", "", "host"},
		{"port only", "http://:7878/", "", "host"},
		{"credentials", "http://u:p@127.0.0.1:7878/", "", "credentials"},
		{"unparseable", "http://127.0.0.1:port/", "", "console URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Options{URL: tt.url}.config()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantURL, cfg.url.String())
		})
	}

	t.Run("defaults", func(t *testing.T) {
		cfg, err := Options{URL: "http://127.0.0.1:7878/"}.config()
		require.NoError(t, err)
		require.Equal(t, "Vigil", cfg.title)
		require.Equal(t, DefaultWidth, cfg.width)
		require.Equal(t, DefaultHeight, cfg.height)
		require.NotNil(t, cfg.logger)
	})
	t.Run("explicit values kept", func(t *testing.T) {
		cfg, err := Options{URL: "http://127.0.0.1:7878/", Title: "Vigil (test)", Width: 900, Height: 600}.config()
		require.NoError(t, err)
		require.Equal(t, "Vigil (test)", cfg.title)
		require.Equal(t, 900, cfg.width)
		require.Equal(t, 600, cfg.height)
	})
}

// fakeWindow stands in for a Wails window: it records what the shell asks of it and
// stays "open" until Quit is called or the test closes it as a user would.
type fakeWindow struct {
	mu        sync.Mutex
	calls     []string
	edits     []EditCommand
	opened    []string
	notes     []Notification
	notifyErr error

	quit     chan struct{}
	quitOnce sync.Once
	userDone chan struct{}
	noted    chan struct{}
}

func newFakeWindow() *fakeWindow {
	return &fakeWindow{quit: make(chan struct{}), userDone: make(chan struct{}), noted: make(chan struct{}, 100)}
}

func (f *fakeWindow) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeWindow) Quit() {
	f.record("quit")
	f.quitOnce.Do(func() { close(f.quit) })
}
func (f *fakeWindow) Reload() { f.record("reload") }
func (f *fakeWindow) Show()   { f.record("show") }
func (f *fakeWindow) OpenInBrowser(u string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened = append(f.opened, u)
}
func (f *fakeWindow) Edit(cmd EditCommand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.edits = append(f.edits, cmd)
}
func (f *fakeWindow) Notify(_ context.Context, n Notification) error {
	f.mu.Lock()
	err := f.notifyErr
	if err == nil {
		f.notes = append(f.notes, n)
	}
	f.mu.Unlock()
	f.noted <- struct{}{}
	return err
}

func (f *fakeWindow) snapshot() (calls []string, edits []EditCommand, opened []string, notes []Notification) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]EditCommand(nil), f.edits...),
		append([]string(nil), f.opened...), append([]Notification(nil), f.notes...)
}

// toolkit opens the fake window: it reports the spec, calls started from another
// goroutine as Wails does, and blocks until the window is quit or closed by the user.
func (f *fakeWindow) toolkit(specs chan<- windowSpec, err error) toolkit {
	return func(spec windowSpec) error {
		startedDone := make(chan struct{})
		go func() {
			defer close(startedDone)
			spec.started(f)
		}()
		<-startedDone
		specs <- spec
		select {
		case <-f.quit:
		case <-f.userDone:
		}
		return err
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runAsync starts run in a goroutine and returns the spec it opened and its result.
func runAsync(t *testing.T, ctx context.Context, opts Options, w *fakeWindow, tkErr error) (windowSpec, <-chan error) {
	t.Helper()
	specs := make(chan windowSpec, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, opts, w.toolkit(specs, tkErr)) }()
	select {
	case spec := <-specs:
		return spec, done
	case err := <-done:
		t.Fatalf("run returned before the window opened: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("window did not open")
	}
	return windowSpec{}, nil
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return")
		return nil
	}
}

func TestRunUserClosesWindow(t *testing.T) {
	w := newFakeWindow()
	shutdowns := 0
	spec, done := runAsync(t, context.Background(), Options{
		URL: "http://127.0.0.1:7878/", Logger: quietLogger(), OnShutdown: func() { shutdowns++ },
	}, w, nil)
	require.Equal(t, "http://127.0.0.1:7878/", spec.cfg.url.String())
	require.NotNil(t, spec.menu)

	close(w.userDone)
	require.NoError(t, waitErr(t, done))
	require.Equal(t, 1, shutdowns)
	calls, _, _, _ := w.snapshot()
	require.NotContains(t, calls, "quit", "a window the user closed must not be asked to quit again")
}

func TestRunContextCancelClosesWindow(t *testing.T) {
	w := newFakeWindow()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shutdown := make(chan struct{})
	_, done := runAsync(t, ctx, Options{
		URL: "http://127.0.0.1:7878/", Logger: quietLogger(), OnShutdown: func() { close(shutdown) },
	}, w, nil)

	cancel()
	require.NoError(t, waitErr(t, done))
	calls, _, _, _ := w.snapshot()
	require.Equal(t, []string{"quit"}, calls)
	select {
	case <-shutdown:
	default:
		t.Fatal("OnShutdown was not called before Run returned")
	}
}

func TestRunToolkitError(t *testing.T) {
	w := newFakeWindow()
	boom := errors.New("no webview")
	shutdowns := 0
	_, done := runAsync(t, context.Background(), Options{
		URL: "http://127.0.0.1:7878/", Logger: quietLogger(), OnShutdown: func() { shutdowns++ },
	}, w, boom)
	close(w.userDone)
	err := waitErr(t, done)
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, shutdowns, "OnShutdown runs even when the window failed")
}

func TestRunRefusesBeforeOpening(t *testing.T) {
	opened := false
	tk := func(windowSpec) error { opened = true; return nil }

	err := run(context.Background(), Options{URL: "ftp://127.0.0.1/"}, tk)
	require.ErrorContains(t, err, "scheme")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = run(ctx, Options{URL: "http://127.0.0.1:7878/"}, tk)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, opened)
}

func TestRunMenuReachesWindow(t *testing.T) {
	w := newFakeWindow()
	spec, done := runAsync(t, context.Background(), Options{URL: "http://127.0.0.1:7878/", Logger: quietLogger()}, w, nil)

	click := func(path ...string) {
		t.Helper()
		item := findItem(t, spec.menu.Items, path...)
		item.Click(nil)
	}
	if findItemOK(spec.menu.Items, "View", "Reload") {
		click("View", "Reload")
		click("View", "Open in Browser")
	}
	if findItemOK(spec.menu.Items, "Edit", "Paste") { // not on macOS, whose Edit menu is the system's
		click("Edit", "Copy")
		click("Edit", "Paste")
		click("Edit", "Select All")
		click("File", "Quit")
	} else {
		w.Quit()
	}
	require.NoError(t, waitErr(t, done))

	calls, edits, opened, _ := w.snapshot()
	require.Contains(t, calls, "reload")
	require.Contains(t, calls, "quit")
	require.Equal(t, []string{"http://127.0.0.1:7878/"}, opened)
	if len(edits) > 0 {
		require.Equal(t, []EditCommand{EditCopy, EditPaste, EditSelectAll}, edits)
	}
}
