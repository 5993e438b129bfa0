package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
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
