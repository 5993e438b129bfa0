package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/app"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/guardian/holds"
)

// In team mode (an operator account exists) the desktop window's notifications still see
// every held step: they come from the guardian's event bus in process, where the live
// websocket would refuse a watcher that has not signed in.
func TestDesktopHoldNotificationsInTeamMode(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "vigil.db")
	var out, errOut strings.Builder
	cli := &auth.CLI{DefaultDB: db, Open: openAuthStore, Stdin: strings.NewReader("alicepass1\n"),
		Stdout: &out, Stderr: &errOut, Operator: "cli:test"}
	require.Equal(t, 0, cli.Users(context.Background(), []string{"add", "alice", "--role", "admin", "--db", db}), errOut.String())
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(`rules:
  - id: review-transfers
    when: tool == "transfer_funds"
    action: hold
    message: a person checks transfers
`), 0o600))
	cfg, err := parseConfig("vigil", []string{"--addr", "127.0.0.1:0", "--db", db, "--rules", rulesFile}, &errOut)
	require.NoError(t, err, errOut.String())
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	opts := desktopOptions(srv, slog.New(slog.DiscardHandler))
	require.Equal(t, loopbackURL(srv.URL)+"/", opts.URL)
	require.NotNil(t, opts.Holds)
	notes := make(chan app.Notification, 1)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		opts.Holds.Watch(ctx, func(_ context.Context, n app.Notification) error {
			notes <- n
			return nil
		}, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-watched }()

	answered := make(chan map[string]any, 1)
	go func() { answered <- postStep(t, srv.URL, toolStep) }()
	var n app.Notification
	select {
	case n = <-notes:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification for the held step")
	}
	require.Equal(t, "Vigil: step held", n.Title)
	require.Equal(t, "transfer_funds in session cli-session waits for review (rule review-transfers): a person checks transfers", n.Body)

	id := strings.TrimPrefix(n.ID, "vigil-hold-")
	_, err = srv.holds.Deny(context.Background(), id, holds.Decision{Operator: "alice"})
	require.NoError(t, err, "the notification names the pending hold")
	select {
	case res := <-answered:
		require.Equal(t, "deny", res["result"].(map[string]any)["decision"])
	case <-time.After(10 * time.Second):
		t.Fatal("the held step was not answered")
	}
}
