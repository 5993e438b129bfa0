// Command replicas measures what replicas on PostgreSQL cost and give: the load generator
// (bench/loadgen) against one guardian on SQLite, one on PostgreSQL, and two and three
// replicas on one PostgreSQL database, the agents spread round-robin over the replicas as
// behind a load balancer. PostgreSQL is a throwaway server (internal/pgtest: Debian's
// postgresql package, fsync off like every test server; the numbers show the guardian's
// overhead, not a disk's).
//
//	go build -o bin/vigil . && go build -o bin/loadgen ./bench/loadgen
//	go run ./bench/replicas -vigil ./bin/vigil -loadgen ./bin/loadgen
//
// On a machine with few cores every replica, PostgreSQL and the load generator share them:
// more replicas then show their overhead, not a speedup.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/internal/pgtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
}

func run() error {
	vigil := flag.String("vigil", "./bin/vigil", "vigil binary")
	loadgen := flag.String("loadgen", "./bin/loadgen", "loadgen binary (go build -o bin/loadgen ./bench/loadgen)")
	rules := flag.String("rules", "bench/rules100.yaml", "rules file every replica loads")
	conc := flag.String("concurrency", "8,32", "loadgen -concurrency")
	dur := flag.String("duration", "3s", "loadgen -duration")
	rounds := flag.String("rounds", "3", "loadgen -rounds")
	only := flag.String("only", "", "comma-separated configurations to run (sqlite, pg1, pg2, pg3; default all)")
	flag.Parse()
	want := func(key string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), key) }
	ctx := context.Background()

	pg, err := pgtest.Start(ctx, "")
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer func() { _ = pg.Stop() }()

	for _, cfg := range []struct {
		key, name string
		replicas  int
		postgres  bool
	}{
		{"sqlite", "1 guardian on SQLite", 1, false},
		{"pg1", "1 replica on PostgreSQL", 1, true},
		{"pg2", "2 replicas on PostgreSQL", 2, true},
		{"pg3", "3 replicas on PostgreSQL", 3, true},
	} {
		if !want(cfg.key) {
			continue
		}
		dir, err := os.MkdirTemp("", "vigil-replicas-")
		if err != nil {
			return err
		}
		db := filepath.Join(dir, "vigil.db")
		if cfg.postgres {
			if db, err = pg.CreateDB(ctx, "bench"); err != nil {
				return err
			}
		}
		var urls []string
		var stops []func()
		for range cfg.replicas {
			url, stop, err := startVigil(ctx, *vigil, db, *rules)
			if err != nil {
				for _, s := range stops {
					s()
				}
				return err
			}
			urls, stops = append(urls, url), append(stops, stop)
		}
		fmt.Printf("### %s\n\n", cfg.name)
		cmd := exec.Command(*loadgen, "-target", strings.Join(urls, ","), "-concurrency", *conc,
			"-duration", *dur, "-rounds", *rounds)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		err = cmd.Run()
		for _, s := range stops {
			s()
		}
		_ = os.RemoveAll(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.name, err)
		}
		fmt.Println()
	}
	return nil
}

func startVigil(ctx context.Context, bin, db, rules string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve", "--addr", addr, "--db", db, "--log-level", "warn"}
	if rules != "" {
		args = append(args, "--rules", rules)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/api/info")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return "http://" + addr + "/aos", stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("vigil did not become ready within 30s")
		}
		time.Sleep(50 * time.Millisecond) // polling a server that is starting
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
