// Package pgtest starts a throwaway PostgreSQL server for tests: Debian's postgresql
// package, initdb'd into a temporary directory and run by an unprivileged user (the server
// refuses to run as root), listening on a free loopback port with trust authentication.
// One server per test binary (TestMain) keeps the cost of initdb to once; each test then
// gets a database of its own.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequireEnv makes a missing PostgreSQL a test failure instead of a skip; `make test` sets
// it, so CI cannot pass without the backend being tested.
const RequireEnv = "VIGIL_REQUIRE_POSTGRES"

// ErrNoPostgres is returned by Start when no PostgreSQL server binaries are installed.
var ErrNoPostgres = errors.New("PostgreSQL server binaries not found (Debian: apt-get install postgresql)")

// Server is a running PostgreSQL server.
type Server struct {
	dir   string
	bin   string
	port  int
	owner *user.User // who runs the server when the tests run as root; nil otherwise
	n     atomic.Int64
	log   string
}

// BinDir finds the newest /usr/lib/postgresql/N/bin, or the directory of pg_ctl on PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoPostgres
}

// Start initialises and starts a server in a new directory under dir (os.TempDir when
// empty). Stop it with Stop.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		dir = os.TempDir()
	}
	reapOrphans(ctx, dir, bin)
	base, err := os.MkdirTemp(dir, "vigil-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	// Whose server this is: a test binary killed before Stop (a timeout, ^C) leaves its
	// server running, and the next Start stops it (reapOrphans).
	if id := processID(os.Getpid()); id != "" {
		if err := os.WriteFile(filepath.Join(base, ownerFile), []byte(id), 0o644); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	s := &Server{dir: base, bin: bin, log: filepath.Join(base, "server.log")}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root needs the postgres user the package creates: %w", err)
		}
		s.owner = u
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// The parent must be traversable by the server's user.
		if err := os.Chmod(base, 0o755); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		if err := os.Chown(base, uid, gid); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(base, "data")
	if out, err := s.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	// The port is free when picked but may be taken before the server binds it (test
	// binaries run side by side, each starting a server): a start that could not bind
	// tries another port.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.port = port
		// fsync off and a small WAL keep tests fast; durability across a machine crash is
		// not what these tests check (replica kills are process kills, which fsync=off
		// survives).
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c synchronous_commit=off "+
			"-c full_page_writes=off -c max_connections=300 -c shared_buffers=64MB", port, base)
		out, err := s.run(ctx, "pg_ctl", "-D", data, "-l", s.log, "-o", opts, "-w", "-t", "60", "start")
		if err == nil {
			return s, nil
		}
		logText, _ := os.ReadFile(s.log)
		if attempt < 3 && bytes.Contains(logText, []byte("could not bind")) {
			_ = os.Remove(s.log)
			continue
		}
		return nil, fmt.Errorf("pgtest: pg_ctl start: %w: %s\n%s", err, out, logText)
	}
}

// ownerFile, in a server's directory, names the test process that started it.
const ownerFile = "owner"

// processID names process pid as "pid starttime" (the start time in clock ticks since boot,
// from /proc), so a pid reused by another process does not pass for it; "" without /proc.
func processID(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return fmt.Sprintf("%d %s", pid, f[19])
}

// reapOrphans stops the servers under dir whose test process is gone and removes their
// directories. A server whose owner is unknown (no owner file, no /proc) is left alone.
func reapOrphans(ctx context.Context, dir, bin string) {
	dirs, _ := filepath.Glob(filepath.Join(dir, "vigil-pg-*"))
	for _, d := range dirs {
		owner, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(string(owner), "%d", &pid); err != nil || processID(pid) == string(owner) {
			continue // still running its tests
		}
		orphan := &Server{dir: d, bin: bin}
		if fi, err := os.Stat(filepath.Join(d, "data")); err == nil && os.Geteuid() == 0 {
			if u, err := user.LookupId(strconv.Itoa(int(fileUID(fi)))); err == nil && u.Uid != "0" {
				orphan.owner = u
			}
		}
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		// Stopped already (or never started): pg_ctl says so, and the directory goes anyway.
		_, _ = orphan.run(stopCtx, "pg_ctl", "-D", filepath.Join(d, "data"), "-m", "immediate", "-w", "stop")
		cancel()
		_ = os.RemoveAll(d)
	}
}

// run runs one of the server's programs as the server's user.
func (s *Server) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, prog)
	var cmd *exec.Cmd
	if s.owner != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.owner.Username, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DSN is the URL of database name on the server.
func (s *Server) DSN(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, name)
}

// CreateDB creates a new, empty database and returns its URL.
func (s *Server) CreateDB(ctx context.Context, prefix string) (string, error) {
	name := fmt.Sprintf("%s_%d_%d", sanitize(prefix), os.Getpid(), s.n.Add(1))
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 30 {
			break
		}
	}
	if b.Len() == 0 {
		return "db"
	}
	return b.String()
}

// Stop stops the server immediately and removes its directory.
func (s *Server) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.run(ctx, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	rmErr := os.RemoveAll(s.dir)
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %w: %s", err, out)
	}
	return rmErr
}

// Main runs a test binary's tests with one server, which *srv points to while they run.
// Without PostgreSQL installed, *srv stays nil and tests that need it skip (Need), unless
// VIGIL_REQUIRE_POSTGRES is set, in which case the binary fails at once.
func Main(m *testing.M, srv **Server) int {
	s, err := Start(context.Background(), "")
	if err != nil {
		if os.Getenv(RequireEnv) != "" || !errors.Is(err, ErrNoPostgres) {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "pgtest:", err, "- PostgreSQL tests skip")
		return m.Run()
	}
	*srv = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}

// Need returns a fresh database on srv, or skips the test when srv is nil (no PostgreSQL).
func Need(t testing.TB, srv *Server) string {
	t.Helper()
	if srv == nil {
		t.Skip("PostgreSQL is not installed (Debian: apt-get install postgresql); " + RequireEnv + " makes this a failure")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err := srv.CreateDB(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// connect opens one connection to the database dsn names, with 30 s for all the caller
// does on it; done ends both.
func connect(t testing.TB, dsn string) (ctx context.Context, conn *pgx.Conn, done func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		cancel()
		t.Fatalf("pgtest: connect: %v", err)
	}
	return ctx, conn, func() { conn.Close(ctx); cancel() }
}

// Exec runs statements on the database dsn names, as the role the URL names, on one
// connection, failing the test at the first that fails.
func Exec(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	ctx, conn, done := connect(t, dsn)
	defer done()
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("pgtest: %s: %v", s, err)
		}
	}
}

// SelectOnlyRole creates a role that may read the tables dsn's database holds now and
// create nothing in its schema, and returns dsn as that role. Roles are the server's, not
// one database's: the name is random, so tests running side by side never share one.
func SelectOnlyRole(t testing.TB, dsn string) string {
	t.Helper()
	role := fmt.Sprintf("reader_%d_%s", os.Getpid(), rand.Text()[:10])
	role = strings.ToLower(role)
	Exec(t, dsn, "CREATE ROLE "+role+" LOGIN",
		"GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+role,
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC")
	return AsRole(dsn, role)
}

// AsRole is dsn, a database of the test server as its superuser, as role instead (the
// server trusts every role on loopback: no password).
func AsRole(dsn, role string) string {
	return strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
}

// State is what a read-only command or open must leave as it found it: the tables of the
// database's current schema with their row counts, and the migrations recorded.
func State(t testing.TB, dsn string) string {
	t.Helper()
	ctx, conn, done := connect(t, dsn)
	defer done()
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)
	if err != nil {
		t.Fatalf("pgtest: list tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("pgtest: list tables: %v", err)
	}
	var b strings.Builder
	for _, tb := range tables {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{tb}.Sanitize()).Scan(&n); err != nil {
			t.Fatalf("pgtest: count %s: %v", tb, err)
		}
		fmt.Fprintf(&b, "%s:%d ", tb, n)
	}
	if slices.Contains(tables, "vigil_migrations") {
		rows, err := conn.Query(ctx, `SELECT version FROM vigil_migrations ORDER BY 1`)
		if err != nil {
			t.Fatalf("pgtest: list migrations: %v", err)
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatalf("pgtest: list migrations: %v", err)
		}
		fmt.Fprint(&b, "migrations ", versions)
	}
	return b.String()
}
