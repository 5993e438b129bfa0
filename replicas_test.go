package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/bus"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// The bus listens where the backend notifies; guardian packages may not import a backend,
// so the name is written twice and checked here.
func TestBusListensOnTheBackendsChannel(t *testing.T) {
	require.Equal(t, postgres.NotifyChannel, bus.Channel)
}

func TestReplicaFlags(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, time.Second, cfg.ReplicaHeartbeat)
	require.Equal(t, 10*time.Second, cfg.ReplicaDeadAfter)

	t.Setenv("VIGIL_REPLICA_DEAD_AFTER", "30s")
	cfg, err = parseConfig("serve", []string{"--replica-heartbeat", "250ms"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, cfg.ReplicaHeartbeat)
	require.Equal(t, 30*time.Second, cfg.ReplicaDeadAfter)
}
