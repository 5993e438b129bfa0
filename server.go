package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/storage"
)

// server is a running guardian: its listener, HTTP server and everything it owns.
type server struct {
	URL     string
	http    *http.Server
	db      *storage.DB
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	closers []func()
}

// startServer opens the database, loads rules, and starts serving on cfg.Addr. The URL it
// reports carries the real port when cfg.Addr asks for port 0.
func startServer(ctx context.Context, cfg Config, log *slog.Logger) (*server, error) {
	db, err := storage.Open(ctx, cfg.DB, storage.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", cfg.DB, err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	url := "http://" + ln.Addr().String()

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &server{URL: url, db: db, log: log, cancel: cancel, done: make(chan struct{})}

	g, err := guardian.New(guardian.Config{
		Version:      version,
		MaxBodyBytes: cfg.MaxBodyBytes,
		PublicURL:    url,
		DBPath:       db.Path(),
		RulesFile:    cfg.RulesFile,
	}, guardian.Options{
		Store:  db,
		Logger: log,
		UI:     uiFS(),
	})
	if err != nil {
		cancel()
		_ = ln.Close()
		_ = db.Close()
		return nil, fmt.Errorf("start guardian: %w", err)
	}
	_ = runCtx
	s.http = &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	log.Info("guardian started", "url", url, "db", db.Path(), "version", version)
	return s, nil
}

// Shutdown stops accepting requests, lets in-flight ones finish (held steps included, up to
// the grace period), then flushes and closes the database so no answered step is lost.
func (s *server) Shutdown(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	errHTTP := s.http.Shutdown(ctx)
	if errHTTP != nil {
		// Grace ran out: close what is left; their steps were already stored or never answered.
		_ = s.http.Close()
	}
	<-s.done
	s.cancel()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	errDB := s.db.Close()
	return errors.Join(errHTTP, errDB)
}
