package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// pgSrv is one throwaway PostgreSQL for the tests of package main that need one.
var pgSrv *pgtest.Server

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &pgSrv)) }

func TestOpenStorePicksTheBackend(t *testing.T) {
	ctx := context.Background()
	db, err := openStore(ctx, filepath.Join(t.TempDir(), "vigil.db"), nil)
	require.NoError(t, err)
	require.IsType(t, &sqlite.DB{}, db)
	require.NoError(t, db.Close())

	dsn := pgtest.Need(t, pgSrv)
	for _, u := range []string{dsn, strings.Replace(dsn, "postgres://", "postgresql://", 1)} {
		db, err = openStore(ctx, u, nil)
		require.NoError(t, err)
		require.IsType(t, &postgres.DB{}, db)
		require.True(t, strings.HasPrefix(db.Describe(), "postgres://postgres@127.0.0.1:"), db.Describe())
		require.NoError(t, db.Close())
	}

	// A failure is a nil Backend, not a typed nil.
	db, err = openStore(ctx, "postgres://u:s3cret@127.0.0.1:1/nope?connect_timeout=5", nil)
	require.Error(t, err)
	require.Nil(t, db)
	require.NotContains(t, err.Error(), "s3cret")
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/vigil/vigil.db":                    "/var/lib/vigil/vigil.db",
		"postgres://vigil:s3cret@db:5432/guard":      "postgres://vigil:xxxxx@db:5432/guard",
		"postgresql://vigil@db/guard?password=s3cr":  "postgresql://vigil@db/guard?password=xxxxx",
		"postgres://db/guard?sslmode=require":        "postgres://db/guard?sslmode=require",
		"postgres://vigil@db/guard?sslpassword=s3cr": "postgres://vigil@db/guard?sslpassword=xxxxx",
		// A password typed into another parameter is masked there too.
		"postgres://vigil:s3cret@db/guard?connect_timeout=s3cret": "postgres://vigil:xxxxx@db/guard?connect_timeout=xxxxx",
		"postgres://vigil:vigil@db/vigil":                         "postgres://vigil:xxxxx@db/vigil",
	} {
		require.Equal(t, want, redactDSN(in), in)
	}
}

func TestBackupCommandOnPostgresPointsToPgDump(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runBackup([]string{"--db", "postgres://vigil:s3cret@db/guard", "copy.db"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "pg_dump")
	require.Contains(t, stderr.String(), "pg_restore")
	require.NotContains(t, stderr.String(), "s3cret")
	require.NoFileExists(t, "copy.db")
}

func TestExportAndAuthCommandsOnPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Need(t, pgSrv)
	db, err := postgres.Open(ctx, dsn, postgres.Options{})
	require.NoError(t, err)
	require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message", Decision: "allow"}))
	_, err = db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runExport([]string{"--db", dsn}, &stdout, &stderr), stderr.String())
	lines := jsonLines(t, stdout.Bytes())
	require.Len(t, lines, 2)
	require.JSONEq(t, `"step"`, string(lines[0]["record"]))
	require.JSONEq(t, `"audit"`, string(lines[1]["record"]))

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 0, runKeys([]string{"create", "--name", "ci", "--db", dsn}, &stdout, &stderr), stderr.String())
	stdout.Reset()
	require.Equal(t, 0, runKeys([]string{"list", "--db", dsn}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "ci")
	stdout.Reset()
	require.Equal(t, 0, runUsers([]string{"list", "--db", dsn}, &stdout, &stderr), stderr.String())
}

// TestMigrateSQLiteToPostgres fills a SQLite file through its backend with every kind of
// record, migrates it, and reads it back through storage.Backend on PostgreSQL.
func TestMigrateSQLiteToPostgres(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	src, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	t0 := time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)
	for i := range 25 {
		rec := &record.StepRecord{SessionID: []string{"s1", "s2", "s3"}[i%3], Method: "steps/toolCallRequest",
			Kind: "toolCall", Decision: []string{"allow", "deny"}[i%2], ReceivedAt: t0.Add(time.Duration(i) * time.Second),
			AgentID: "agent-1", KeyID: "k1", Tool: "send_email", Text: "quarterly payroll report",
			Request:      json.RawMessage(`{"jsonrpc":"2.0","id":1}`),
			MatchedRules: []record.RuleMatch{{RuleID: "r1", Action: "deny", Mode: "enforce", ReasonCode: "RC"}}}
		// MCP steps name their client and server: s1's all of them, s3's its first only.
		if rec.SessionID == "s1" || i == 2 {
			rec.Client = &record.Peer{Name: "inspector", Version: fmt.Sprint("0.", i)}
			rec.Server = &record.Peer{Name: "everything"}
		}
		require.NoError(t, src.SaveStep(ctx, rec))
	}
	_, err = src.SetSessionControl(ctx, record.SessionControl{SessionID: "s2", Control: record.ControlBlock, Operator: "ann"},
		&record.AuditEntry{Type: record.AuditSessionBlock})
	require.NoError(t, err)
	_, err = src.SetSessionControl(ctx, record.SessionControl{SessionID: "fresh", Control: record.ControlPause}, nil)
	require.NoError(t, err)
	for i, id := range []string{"h1", "h2"} {
		_, err = src.CreateHold(ctx, &record.Hold{ID: id, SessionID: "s1", Method: "m", OnTimeout: "deny",
			CreatedAt: t0.Add(time.Duration(i) * time.Minute), Request: json.RawMessage(`{"a":1}`)},
			&record.AuditEntry{Type: record.AuditHoldCreated})
		require.NoError(t, err)
	}
	_, _, err = src.ResolveHold(ctx, "h1", record.HoldResolution{Status: record.HoldApproved, Decision: "allow", DecidedBy: "ann"},
		&record.AuditEntry{Type: record.AuditHoldApproved, Operator: "ann"})
	require.NoError(t, err)
	require.NoError(t, src.SetHoldSeq(ctx, "h1", 3))
	rule := rules.Rule{ID: "r1", Name: "no mail", When: "true", Action: rules.ActionDeny, Mode: rules.ModeEnforce, Enabled: true}
	_, _, err = src.ApplyRules(ctx, record.RuleBatch{Operator: "ann", Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: rule}}})
	require.NoError(t, err)
	rule.When = "false"
	_, _, err = src.ApplyRules(ctx, record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpUpdate, Rule: rule},
		{Op: record.RuleOpCreate, Rule: rules.Rule{ID: "gone", When: "true", Action: rules.ActionDeny, Enabled: true}}}})
	require.NoError(t, err)
	_, _, err = src.ApplyRules(ctx, record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "gone"}}}})
	require.NoError(t, err)
	_, err = src.CreateAPIKey(ctx, &record.APIKey{ID: "k1", Name: "ci", Hash: []byte{1, 2, 3}, Prefix: "vk_1", CreatedAt: t0},
		&record.AuditEntry{Type: record.AuditKeyCreated})
	require.NoError(t, err)
	_, _, err = src.RevokeAPIKey(ctx, "k1", t0.Add(time.Hour), nil)
	require.NoError(t, err)
	_, err = src.CreateUser(ctx, &record.User{Name: "Ann", Role: "admin", PasswordHash: []byte("$2a$x"), CreatedAt: t0}, nil)
	require.NoError(t, err)
	_, err = src.CreateAuthSession(ctx, &record.AuthSession{TokenHash: []byte("tok"), UserName: "Ann", CSRFToken: "c",
		ExpiresAt: time.Now().Add(time.Hour)}, nil)
	require.NoError(t, err)
	// Retention: the oldest steps are gone, their seqs with them.
	_, err = src.Prune(ctx, t0.Add(time.Hour), record.Retention{MaxAge: time.Hour - 3*time.Second})
	require.NoError(t, err)
	require.NoError(t, src.Close())

	want := snapshotSQLite(t, path)
	peers := map[string][2]*record.Peer{}
	for _, ws := range want.sessions {
		peers[ws.ID] = [2]*record.Peer{ws.Client, ws.Server}
	}
	require.Equal(t, map[string][2]*record.Peer{
		"s1":    {{Name: "inspector", Version: "0.24"}, {Name: "everything"}},
		"s2":    {nil, nil},
		"s3":    {{Name: "inspector", Version: "0.2"}, {Name: "everything"}},
		"fresh": {nil, nil},
	}, peers, "the source names the peers the copy must keep")
	require.NotNil(t, want.steps[len(want.steps)-1].Client)
	dsn := pgtest.Need(t, pgSrv)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runMigrate([]string{"--from", path, "--to", dsn}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "22 steps")
	require.Contains(t, stdout.String(), "counts verified")

	dst, err := postgres.Open(ctx, dsn, postgres.Options{})
	require.NoError(t, err)
	defer dst.Close()
	got := snapshot(t, dst)
	require.Equal(t, want, got)
	_, err = dst.AuthSession(ctx, []byte("tok"))
	require.ErrorIs(t, err, record.ErrNotFound, "sign-in sessions are not copied")

	// The copy goes on where the source stopped: new seqs and audit ids after the old.
	rec := &record.StepRecord{SessionID: "s1", Method: "m", Decision: "allow"}
	require.NoError(t, dst.SaveStep(ctx, rec))
	require.Greater(t, rec.Seq, want.lastSeq)
	e := &record.AuditEntry{Type: "x.y"}
	_, err = dst.AppendAudit(ctx, e)
	require.NoError(t, err)
	require.Greater(t, e.ID, want.audit[0].ID)

	// A database that holds data is refused, and left as it was.
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 1, runMigrate([]string{"--from", path, "--to", dsn}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "not empty")
	before, err := dst.Session(ctx, "s2")
	require.NoError(t, err)
	for _, ws := range want.sessions {
		if ws.ID == "s2" {
			require.Equal(t, ws, before)
		}
	}
}

func TestMigrateCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--from", "x.db", "--to", "x.db"}, 2, "--to must be"},
		{[]string{"--from", "postgres://h/db", "--to", "postgres://h/db2"}, 2, "--from must be"},
		{[]string{"--from", filepath.Join(t.TempDir(), "missing.db"), "--to", "postgres://127.0.0.1:1/db"}, 1, "no such file"},
		{[]string{"extra"}, 2, "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, tc.code, runMigrate(tc.args, &stdout, &stderr), stderr.String())
		require.Contains(t, stderr.String(), tc.msg)
	}
}

// snapshotSQLite reads the installation in the SQLite file at path, and closes it again:
// migrate refuses a database another process (or Open) holds.
func snapshotSQLite(t *testing.T, path string) installation {
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{ManualIndex: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	return snapshot(t, db)
}

// installation is what a migration must carry over, read through storage.Backend.
type installation struct {
	steps    []record.StepRecord
	events   []record.Event
	sessions []record.Session
	controls map[string]string
	holds    []record.Hold
	audit    []record.AuditEntry
	rules    []rules.Rule
	versions map[string][]record.RuleVersion
	keys     []record.APIKey
	users    []record.User
	lastSeq  int64
}

func snapshot(t *testing.T, db storage.Backend) installation {
	ctx := context.Background()
	var in installation
	var err error
	for after := int64(0); ; {
		steps, err := db.StepsIn(ctx, record.StepRange{After: after, Limit: 1000})
		require.NoError(t, err)
		if len(steps) == 0 {
			break
		}
		in.steps = append(in.steps, steps...)
		after = steps[len(steps)-1].Seq
	}
	for after := int64(0); ; {
		evs, err := db.EventsAfter(ctx, after, 1000)
		require.NoError(t, err)
		if len(evs) == 0 {
			break
		}
		in.events = append(in.events, evs...)
		after = evs[len(evs)-1].Seq
	}
	in.lastSeq = in.events[len(in.events)-1].Seq
	page, err := db.Sessions(ctx, record.SessionQuery{Limit: 500})
	require.NoError(t, err)
	in.sessions = page.Sessions
	in.controls, err = db.SessionControls(ctx)
	require.NoError(t, err)
	in.holds, err = db.ListHolds(ctx, "all", 1000)
	require.NoError(t, err)
	in.audit, err = db.ListAudit(ctx, record.AuditQuery{Limit: 1000})
	require.NoError(t, err)
	in.rules, err = db.ListRules(ctx)
	require.NoError(t, err)
	in.versions = map[string][]record.RuleVersion{}
	for _, id := range []string{"r1", "gone"} {
		in.versions[id], err = db.RuleVersions(ctx, id)
		require.NoError(t, err)
	}
	in.keys, err = db.APIKeys(ctx)
	require.NoError(t, err)
	in.users, err = db.Users(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, in.steps)
	require.NotEmpty(t, in.holds)
	require.NotEmpty(t, in.audit)
	return in
}

// TestServeOnPostgres: the guardian runs on a postgres:// --db, and a second start finds
// what the first stored.
func TestServeOnPostgres(t *testing.T) {
	dsn := pgtest.Need(t, pgSrv)
	log := slog.New(slog.DiscardHandler)
	srv, err := startServer(context.Background(), testConfig(t, dsn), log)
	require.NoError(t, err)
	out := postStep(t, srv.URL, toolStep)
	require.Equal(t, "allow", out["result"].(map[string]any)["decision"])
	require.NoError(t, srv.Shutdown(5*time.Second))

	srv, err = startServer(context.Background(), testConfig(t, dsn), log)
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	resp, err := http.Get(srv.URL + "/api/sessions/cli-session")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s struct{ Steps int }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	require.Equal(t, 1, s.Steps)

	resp2, err := http.Get(srv.URL + "/api/info")
	require.NoError(t, err)
	defer resp2.Body.Close()
	body, err := io.ReadAll(resp2.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "postgres://postgres@127.0.0.1:")
}

// A SQLite installation may hold bytes PostgreSQL text refuses (an agent that sent a NUL
// byte or invalid UTF-8); the copy stores them as the PostgreSQL backend stores new ones, as
// U+FFFD, instead of failing the whole migration.
func TestMigrateCleansTextPostgresRefuses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	src, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	bad := "a\x00b\xffc"
	rec := &record.StepRecord{SessionID: "s1", Method: "steps/message", Kind: "message", Decision: "allow",
		ReceivedAt: time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC), AgentID: "agent", AgentName: bad, Text: bad,
		Client: &record.Peer{Name: bad, Version: "1"}}
	require.NoError(t, src.SaveStep(ctx, rec))
	_, err = src.CreateHold(ctx, &record.Hold{ID: "h1", SessionID: "s1", Method: "m", OnTimeout: "deny", Message: bad,
		CreatedAt: rec.ReceivedAt}, &record.AuditEntry{Type: record.AuditHoldCreated, Note: bad})
	require.NoError(t, err)
	require.NoError(t, src.Close())

	dsn := pgtest.Need(t, pgSrv)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runMigrate([]string{"--from", path, "--to", dsn}, &stdout, &stderr), stderr.String())

	dst, err := postgres.Open(ctx, dsn, postgres.Options{})
	require.NoError(t, err)
	defer dst.Close()
	const clean = "a\uFFFDb\uFFFDc"
	steps, err := dst.Steps(ctx, record.StepQuery{SessionID: "s1"})
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.Equal(t, clean, steps[0].Text)
	require.Equal(t, clean, steps[0].AgentName)
	require.Equal(t, clean, steps[0].Client.Name)
	s, err := dst.Session(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, clean, s.AgentName)
	require.Equal(t, clean, s.Client.Name)
	h, err := dst.GetHold(ctx, "h1")
	require.NoError(t, err)
	require.Equal(t, clean, h.Message)
	audit, err := dst.ListAudit(ctx, record.AuditQuery{})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, clean, audit[0].Note)
}

// A second guardian on a database in use is refused before it touches the step journal;
// the keys and users commands work beside the guardian, which stores their audit entries
// after its own steps.
func TestCommandsBesideARunningGuardian(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	holder, err := sqlite.Open(ctx, path, sqlite.Options{ManualIndex: true, IngestDelay: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, holder.Close()) })
	rec := &record.StepRecord{SessionID: "s1", Method: "steps/message", Kind: "message", Decision: "allow",
		ReceivedAt: time.Now(), Request: json.RawMessage(`{}`), Response: json.RawMessage(`{}`)}
	require.NoError(t, holder.SaveStep(ctx, rec))

	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, run([]string{"serve", "--addr", "127.0.0.1:0", "--db", path}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "is open in process")

	for _, args := range [][]string{
		{"keys", "create", "--agent", "bot", "--db", path},
		{"keys", "list", "--db", path},
	} {
		stdout.Reset()
		stderr.Reset()
		require.Equal(t, 0, run(args, &stdout, &stderr), "%v: %s", args, stderr.String())
	}
	require.Contains(t, stdout.String(), "bot")
	// migrate reads the source whole: it is refused while a guardian holds it.
	require.Equal(t, 1, runMigrate([]string{"--from", path, "--to", "postgres://127.0.0.1:1/none"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "is open in process")

	n, err := holder.StoreOutbox(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	entries, err := holder.ListAudit(ctx, record.AuditQuery{Type: record.AuditKeyCreated})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Greater(t, entries[0].Seq, rec.Seq)
}

// TestExportOnPostgresNeverCreatesOrMigrates: export only reads. A database without Vigil's
// schema, or with one older or newer than this binary's, is refused with a message that
// says which and what to do, and left exactly as it was; a current one is exported, also
// by a role that may only SELECT.
func TestExportOnPostgresNeverCreatesOrMigrates(t *testing.T) {
	ctx := context.Background()
	current := postgres.SchemaVersion()
	migrated := func(t *testing.T, dsn string) {
		db, err := postgres.Open(ctx, dsn, postgres.Options{})
		require.NoError(t, err)
		require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message", Decision: "allow"}))
		_, err = db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
		require.NoError(t, err)
		require.NoError(t, db.Close())
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dsn string)
		code  int
		want  []string // in the message; none on success
	}{
		{"empty database", func(*testing.T, string) {}, 1,
			[]string{"has no Vigil schema", "vigil serve --db", "vigil migrate"}},
		{"migrations table without a migration", func(t *testing.T, dsn string) {
			pgtest.Exec(t, dsn, `CREATE TABLE vigil_migrations (version integer PRIMARY KEY, name text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`)
		}, 1, []string{"has no Vigil schema"}},
		{"older schema", func(t *testing.T, dsn string) {
			migrated(t, dsn)
			pgtest.Exec(t, dsn, fmt.Sprintf(`DELETE FROM vigil_migrations WHERE version = %d`, current))
		}, 1, []string{fmt.Sprintf("schema version %d is older than this Vigil's (%d)", current-1, current), "vigil serve"}},
		{"newer schema", func(t *testing.T, dsn string) {
			migrated(t, dsn)
			pgtest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO vigil_migrations (version, name) VALUES (%d, 'from the future')`, current+1))
		}, 1, []string{fmt.Sprintf("schema version %d is newer than this Vigil's (%d)", current+1, current), "newer Vigil"}},
		{"current schema", migrated, 0, nil},
	}
	for _, tc := range tests {
		for _, role := range []string{"owner", "select-only role"} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				dsn := pgtest.Need(t, pgSrv)
				tc.setup(t, dsn)
				exportDSN := dsn
				if role != "owner" {
					exportDSN = pgtest.SelectOnlyRole(t, dsn)
				}
				before := pgtest.State(t, dsn)
				var stdout, stderr bytes.Buffer
				code := runExport([]string{"--db", exportDSN}, &stdout, &stderr)
				require.Equal(t, tc.code, code, stderr.String())
				require.Equal(t, before, pgtest.State(t, dsn), "export changed the database")
				for _, w := range tc.want {
					require.Contains(t, stderr.String(), w)
				}
				if tc.code != 0 {
					require.Empty(t, stdout.String())
					return
				}
				lines := jsonLines(t, stdout.Bytes())
				require.Len(t, lines, 2)
				require.JSONEq(t, `"step"`, string(lines[0]["record"]))
				require.JSONEq(t, `"audit"`, string(lines[1]["record"]))
			})
		}
	}
}

// TestBadPostgresURLIsNamed: a URL PostgreSQL's driver cannot parse is reported with its
// reason (the parameter it names), by every command that takes one, and never with the
// password.
func TestBadPostgresURLIsNamed(t *testing.T) {
	const pw = "s3cretPW"
	urls := []struct{ query, want string }{
		{"sslmode=bogus", "sslmode is invalid"},
		{"pool_max_conns=0", "pool_max_conns too small"},
		{"connect_timeout=" + pw, "invalid connect_timeout"}, // the driver quotes the bad value
	}
	commands := []struct {
		name string
		args func(url string) []string
	}{
		{"serve", func(u string) []string { return []string{"serve", "--addr", "127.0.0.1:0", "--db", u} }},
		{"export", func(u string) []string { return []string{"export", "--db", u} }},
		{"keys list", func(u string) []string { return []string{"keys", "list", "--db", u} }},
		{"users list", func(u string) []string { return []string{"users", "list", "--db", u} }},
	}
	for _, c := range commands {
		for _, u := range urls {
			for _, dsn := range []string{
				"postgres://vigil:" + pw + "@127.0.0.1:42999/vigil?" + u.query,
				"postgresql://vigil@127.0.0.1:42999/vigil?password=" + pw + "&" + u.query,
			} {
				t.Run(c.name+"/"+u.query, func(t *testing.T) {
					var stdout, stderr bytes.Buffer
					require.Equal(t, 1, run(c.args(dsn), &stdout, &stderr), stderr.String())
					require.Contains(t, stderr.String(), "invalid PostgreSQL URL")
					require.Contains(t, stderr.String(), u.want)
					require.NotContains(t, stderr.String()+stdout.String(), pw)
				})
			}
		}
	}
}
