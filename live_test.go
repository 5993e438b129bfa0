package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/guardian/auth"
)

// The live stream's connection caps come from the flags: one address beyond
// --max-live-per-client is refused with 429 and the API's error body.
func TestLiveConnectionCapFlags(t *testing.T) {
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "vigil.db"),
		"--max-live-per-client", "2"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 256, cfg.MaxLiveClients)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/live"
	for range 2 {
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		defer conn.Close()
	}
	_, resp, err := websocket.DefaultDialer.Dial(url, nil)
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	defer resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	var body struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "too_many_live_connections", body.Error.Code)
}

func TestLiveCapFlagsValidated(t *testing.T) {
	t.Setenv("VIGIL_MAX_LIVE_CLIENTS", "7")
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 7, cfg.MaxLiveClients)
	require.Equal(t, 16, cfg.MaxLivePerClient)
	_, err = parseConfig("serve", []string{"--max-live-per-client", "0"}, io.Discard)
	require.ErrorContains(t, err, "max-live-per-client")
}

func TestLiveIdentityWithoutAccountsIsTheAddress(t *testing.T) {
	require.Equal(t, "addr:192.0.2.7", liveIdentity(&http.Request{RemoteAddr: "192.0.2.7:4242"}))
	require.Equal(t, "addr:::1", liveIdentity(&http.Request{RemoteAddr: "[::1]:4242"}))
	require.Equal(t, "addr:pipe", liveIdentity(&http.Request{RemoteAddr: "pipe"}))
}

// An account removed or its password changed with `vigil users` beside the running guardian
// ends that account's open live streams before their next event, as a removal in the console
// does: the guardian learns of it from the audit entry the command leaves.
func TestLiveStreamEndsWhenTheCommandEndsTheSignIn(t *testing.T) {
	for _, change := range [][]string{{"remove", "bob"}, {"passwd", "bob"}} {
		t.Run(change[0], func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "vigil.db")
			users := func(stdin string, args ...string) {
				t.Helper()
				var out, errOut strings.Builder
				cli := &auth.CLI{DefaultDB: db, Open: openAuthStore, Stdin: strings.NewReader(stdin),
					Stdout: &out, Stderr: &errOut, Operator: "cli:test"}
				require.Equal(t, 0, cli.Users(context.Background(), append(args, "--db", db)), errOut.String())
			}
			// Two accounts: without any the console is open, to anyone on the machine.
			users("alicepass12\n", "add", "alice", "--role", "admin")
			users("bobpass1234\n", "add", "bob", "--role", "viewer")
			srv, err := startServer(context.Background(), testConfig(t, db), slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

			resp, err := http.Post(srv.URL+"/api/auth/login", "application/json",
				strings.NewReader(`{"name":"bob","password":"bobpass1234"}`))
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			hdr := http.Header{}
			for _, c := range resp.Cookies() {
				hdr.Add("Cookie", c.Name+"="+c.Value)
			}
			hdr.Set("Origin", srv.URL)
			conn, wsResp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/live", hdr)
			require.NoError(t, err)
			_ = wsResp.Body.Close()
			defer conn.Close()

			users("newpass5678\n", change...)
			// The guardian stores the command's audit entry within a second; the next event
			// after it makes the hub read it.
			deadline := time.Now().Add(10 * time.Second)
			closed := make(chan error, 1)
			go func() {
				for {
					_, data, err := conn.ReadMessage()
					if err != nil {
						closed <- err
						return
					}
					if strings.Contains(string(data), `"user.`) {
						closed <- errors.New("the stream sent the audit entry of its own sign-in's end: " + string(data))
						return
					}
				}
			}()
			for {
				postStep(t, srv.URL, toolStep)
				select {
				case err := <-closed:
					var ce *websocket.CloseError
					require.ErrorAs(t, err, &ce)
					require.Equal(t, websocket.ClosePolicyViolation, ce.Code)
					return
				case <-time.After(200 * time.Millisecond): // the outbox is stored once a second
				}
				require.True(t, time.Now().Before(deadline), "the stream outlived the sign-in")
			}
		})
	}
}
