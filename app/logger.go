package app

import (
	"context"
	"log/slog"
	"os"
	"strings"
)

// wailsLogger routes Wails' log lines into slog under component=wails.
type wailsLogger struct {
	log  *slog.Logger
	exit func(code int) // os.Exit; Wails expects Fatal not to return
}

func newWailsLogger(l *slog.Logger) *wailsLogger {
	return &wailsLogger{log: l.With("component", "wails"), exit: os.Exit}
}

func (w *wailsLogger) emit(level slog.Level, msg string) {
	w.log.Log(context.Background(), level, strings.TrimRight(msg, "\n"))
}

func (w *wailsLogger) Print(msg string)   { w.emit(slog.LevelInfo, msg) }
func (w *wailsLogger) Trace(msg string)   { w.emit(slog.LevelDebug-4, msg) }
func (w *wailsLogger) Debug(msg string)   { w.emit(slog.LevelDebug, msg) }
func (w *wailsLogger) Info(msg string)    { w.emit(slog.LevelInfo, msg) }
func (w *wailsLogger) Warning(msg string) { w.emit(slog.LevelWarn, msg) }
func (w *wailsLogger) Error(msg string)   { w.emit(slog.LevelError, msg) }
func (w *wailsLogger) Fatal(msg string) {
	w.emit(slog.LevelError, msg)
	w.exit(1)
}
