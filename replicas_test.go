package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/bus"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// The bus listens where the backend notifies; guardian packages may not import a backend,
// so the name is written twice and checked here.
func TestBusListensOnTheBackendsChannel(t *testing.T) {
	require.Equal(t, postgres.NotifyChannel, bus.Channel)
}
