package auth

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckBind(t *testing.T) {
	tests := []struct {
		addr                 string
		configured, insecure bool
		ok                   bool
	}{
		{"127.0.0.1:7878", false, false, true},
		{"127.8.9.10:7878", false, false, true},
		{"localhost:7878", false, false, true},
		{"[::1]:7878", false, false, true},
		{"0.0.0.0:7878", false, false, false},
		{":7878", false, false, false},
		{"[::]:7878", false, false, false},
		{"192.168.1.20:7878", false, false, false},
		{"vigil.example:443", false, false, false},
		{"0.0.0.0:7878", true, false, true},
		{"0.0.0.0:7878", false, true, true},
	}
	for _, tt := range tests {
		err := CheckBind(tt.addr, tt.configured, tt.insecure)
		if tt.ok {
			require.NoError(t, err, tt.addr)
			continue
		}
		require.Error(t, err, tt.addr)
		require.Contains(t, err.Error(), tt.addr)
		require.Contains(t, err.Error(), "vigil users add")
		require.Contains(t, err.Error(), "vigil keys create")
		require.Contains(t, err.Error(), "--insecure")
	}
}

func TestConfigured(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ok, err := e.a.Configured(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	e.addUser(t, "adam", RoleAdmin)
	ok, err = e.a.Configured(ctx)
	require.NoError(t, err)
	require.False(t, ok, "accounts alone leave /aos open")
	e.createKey(t, "a", 0)
	ok, err = e.a.Configured(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}
