package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReplicaFlags(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, time.Second, cfg.ReplicaHeartbeat)
	require.Equal(t, 10*time.Second, cfg.ReplicaDeadAfter)

	t.Setenv("VIGIL_REPLICA_DEAD_AFTER", "30s")
	cfg, err = parseConfig("serve", []string{"--db", pgURL, "--replica-heartbeat", "250ms"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, cfg.ReplicaHeartbeat)
	require.Equal(t, 30*time.Second, cfg.ReplicaDeadAfter)
}
