package app

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWailsLogger(t *testing.T) {
	var buf bytes.Buffer
	l := newWailsLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4})))
	exitCode := -1
	l.exit = func(code int) { exitCode = code }

	tests := []struct {
		log   func(string)
		level string
	}{
		{l.Trace, "DEBUG-4"},
		{l.Debug, "DEBUG"},
		{l.Info, "INFO"},
		{l.Print, "INFO"},
		{l.Warning, "WARN"},
		{l.Error, "ERROR"},
	}
	for _, tt := range tests {
		buf.Reset()
		tt.log("hello\n")
		require.Contains(t, buf.String(), "level="+tt.level+" msg=hello component=wails")
	}
	require.Equal(t, -1, exitCode)

	buf.Reset()
	l.Fatal("cannot go on")
	require.Contains(t, buf.String(), "level=ERROR")
	require.Equal(t, 1, exitCode, "Fatal ends the process as Wails expects")
}
