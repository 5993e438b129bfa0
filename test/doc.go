// Package systest holds system tests that run the built vigil binary as a separate process:
// a crash test (SIGKILL under load, restart, nothing answered is lost) and a bounded soak
// test (high rate with slow websocket clients: flat memory, no leaked connection or
// goroutine, no failed request), and a replicas test (three `vigil serve` on one
// PostgreSQL database: holds decided across replicas, rule changes and blocks reaching all,
// one live stream of every replica's steps, SIGKILL of a replica under load). They observe the server only from outside: its HTTP API,
// /proc, its database file, and a goroutine dump (SIGQUIT) at the end of the soak.
//
// They are skipped unless VIGIL_BIN names the binary:
//
//	go build -o bin/vigil . && VIGIL_BIN=$PWD/bin/vigil go test -v -count=1 ./test/
//
// VIGIL_MEMTEST=1 (make memtest) adds the memory tests: 1000 held steps of 1 MiB, and 200
// stalled websocket clients replaying a log of big steps (about 30 s, a few hundred MB).
// VIGIL_SOAK sets the soak test's load duration (default 60s), e.g. VIGIL_SOAK=10m.
// VIGIL_SYSTEST_ARGS adds flags to every `vigil serve` the tests start.
// The replicas test starts its own throwaway PostgreSQL (internal/pgtest); without the
// server binaries it skips, unless VIGIL_REQUIRE_POSTGRES=1 (make systest sets it).
package systest
