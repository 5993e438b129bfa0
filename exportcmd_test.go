package main

import (
	"bufio"
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

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// startTestServer runs the whole guardian on a loopback port over a database in dir.
func startTestServer(t *testing.T, dbPath string) *server {
	t.Helper()
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", dbPath}, io.Discard)
	require.NoError(t, err)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Shutdown(5*time.Second)) })
	return srv
}

// postTestStep sends one tool call step of session sid and requires a decision.
func postTestStep(t *testing.T, url, sid string, i int) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"steps/toolCallRequest","params":{"context":{"agent":{"id":"a1","name":"Agent","instructions":"x","version":"1","provider":{"name":"p","url":"https://p.example"}},"session":{"id":%q},"turnId":"t1","stepId":"s%d","timestamp":"2026-11-22T08:00:00Z"},"toolCallRequest":{"executionId":"e%d","toolId":"search_web","inputs":[{"name":"query","value":"q"}]}}}`, i, sid, i, i)
	resp, err := http.Post(url+"/aos", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Result struct{ Decision string } `json:"result"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.NotEmpty(t, out.Result.Decision)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// jsonLines decodes each line of out into a map.
func jsonLines(t *testing.T, out []byte) []map[string]json.RawMessage {
	t.Helper()
	var lines []map[string]json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		lines = append(lines, m)
	}
	require.NoError(t, sc.Err())
	return lines
}

// Exporting from the database of a running guardian gives the API's own JSON, line by line.
func TestExportCommandWhileServing(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "vigil.db")
	srv := startTestServer(t, dbPath)
	for i := range 3 {
		postTestStep(t, srv.URL, "exp-a", i)
	}
	postTestStep(t, srv.URL, "exp-b", 3)

	var stdout, stderr bytes.Buffer
	code := runExport([]string{"--db", dbPath, "--what", "steps"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stderr.String(), "4 steps, 0 audit entries to standard output")
	lines := jsonLines(t, stdout.Bytes())
	require.Len(t, lines, 4)

	var page struct{ Steps []json.RawMessage }
	getJSON(t, srv.URL+"/api/sessions/exp-a/steps", &page)
	require.Len(t, page.Steps, 3)
	for i, api := range page.Steps {
		line := lines[i]
		require.JSONEq(t, `"step"`, string(line["record"]))
		delete(line, "record")
		got, err := json.Marshal(line)
		require.NoError(t, err)
		require.JSONEq(t, string(api), string(got))
	}

	out := filepath.Join(t.TempDir(), "b.jsonl")
	stdout.Reset()
	stderr.Reset()
	code = runExport([]string{"--db", dbPath, "--session", "exp-b", "--since", "1h", "--out", out}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Empty(t, stdout.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	lines = jsonLines(t, data)
	require.Len(t, lines, 1)
	require.JSONEq(t, `"exp-b"`, string(lines[0]["sessionId"]))
	st, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "exports carry agents' data")
}

func TestExportCommandAudit(t *testing.T) {
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "vigil.db")
	db, err := sqlite.Open(ctx, dbPath, sqlite.Options{})
	require.NoError(t, err)
	_, err = db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
	require.NoError(t, err)
	require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message", Decision: "allow"}))
	require.NoError(t, db.Close())

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runExport([]string{"--db", dbPath}, &stdout, &stderr), stderr.String())
	lines := jsonLines(t, stdout.Bytes())
	require.Len(t, lines, 2)
	require.JSONEq(t, `"step"`, string(lines[0]["record"]))
	require.JSONEq(t, `"audit"`, string(lines[1]["record"]))
	require.JSONEq(t, `"ann"`, string(lines[1]["operator"]))

	stdout.Reset()
	t.Setenv("VIGIL_DB", dbPath)
	require.Equal(t, 0, runExport([]string{"--what", "audit"}, &stdout, &stderr), stderr.String())
	require.Len(t, jsonLines(t, stdout.Bytes()), 1)
}

func TestExportCommandErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"bad what", []string{"--what", "rules"}, 2, "must be steps, audit or all"},
		{"bad since", []string{"--since", "yesterday"}, 2, "neither an RFC 3339 time"},
		{"extra argument", []string{"file.jsonl"}, 2, "unexpected argument"},
		{"missing database", []string{"--db", filepath.Join(dir, "none.db"), "--out", out}, 1, "none.db"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, runExport(tc.args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.msg)
			require.Empty(t, stdout.String())
		})
	}
	require.NoFileExists(t, out, "a failed export leaves no file")
	require.NoFileExists(t, filepath.Join(dir, "none.db"), "export never creates a database")
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"2026-11-20T10:00:00Z", time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC), false},
		{"2026-11-20T10:00:00.5+01:00", time.Date(2026, 11, 20, 9, 0, 0, 5e8, time.UTC), false},
		{"2026-11-20", time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), false},
		{"24h", now.Add(-24 * time.Hour), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"-1h", time.Time{}, true},
		{"last week", time.Time{}, true},
	}
	for _, tc := range tests {
		got, err := parseSince(tc.in, now)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.True(t, tc.want.Equal(got), "%s: got %s", tc.in, got)
	}
}

// exportTestDB makes a database holding one step and one audit entry, closed.
func exportTestDB(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "vigil.db")
	db, err := sqlite.Open(ctx, dbPath, sqlite.Options{})
	require.NoError(t, err)
	_, err = db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
	require.NoError(t, err)
	require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message", Decision: "allow"}))
	require.NoError(t, db.Close())
	return dbPath
}

// dirState is the names, sizes and contents of the files in dir (links as their targets).
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	state := make(map[string]string, len(entries))
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			state[e.Name()] = "-> " + target
		case e.Type().IsRegular():
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			state[e.Name()] = string(data)
		default:
			state[e.Name()] = e.Type().String()
		}
	}
	return state
}

// --out never names the database or a file beside it, however spelled: the export would
// replace it. It is refused as bad usage before anything is read.
func TestExportCommandRefusesDatabaseFiles(t *testing.T) {
	dbPath := exportTestDB(t)
	dir := filepath.Dir(dbPath)
	require.NoError(t, os.Symlink("vigil.db", filepath.Join(dir, "link.db")))
	require.NoError(t, os.Link(dbPath, filepath.Join(dir, "hard.db")))
	linkdir := filepath.Join(t.TempDir(), "linkdir")
	require.NoError(t, os.Symlink(dir, linkdir))
	before := dirState(t, dir)

	tests := []struct {
		name, out, msg string
	}{
		{"itself", dbPath, "is the database"},
		{"another spelling", filepath.Join(dir, "..", filepath.Base(dir), ".", "vigil.db"), "is the database"},
		{"relative", "vigil.db", "is the database"},
		{"symbolic link", filepath.Join(dir, "link.db"), "is the database"},
		{"hard link", filepath.Join(dir, "hard.db"), "is the database"},
		{"through another directory name", filepath.Join(linkdir, "vigil.db-wal"), "belongs to the database"},
		{"WAL", dbPath + "-wal", "belongs to the database"},
		{"WAL index", dbPath + "-shm", "belongs to the database"},
		{"rollback journal", dbPath + "-journal", "belongs to the database"},
		{"step journal", dbPath + "-steplog-0", "belongs to the database"},
		{"step journal 1", dbPath + "-steplog-1", "belongs to the database"},
		{"lock file", dbPath + "-lock", "belongs to the database"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := dbPath
			if tc.name == "relative" {
				t.Chdir(dir)
				db = "./vigil.db"
			}
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, runExport([]string{"--db", db, "--out", tc.out}, &stdout, &stderr))
			require.Contains(t, stderr.String(), fmt.Sprintf("--out %q: ", tc.out))
			require.Contains(t, stderr.String(), tc.msg)
			require.Empty(t, stdout.String())
		})
	}
	require.Equal(t, before, dirState(t, dir), "the database and its files are untouched")
}

// A bad --out or --db is bad usage (exit 2) found before the export runs, and the message
// names the flag and the path as given. The database here does not exist: an export that
// ran first would fail on it instead.
func TestExportCommandBadPaths(t *testing.T) {
	dir := t.TempDir()
	missingDB := filepath.Join(dir, "none.db")
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	tests := []struct {
		name string
		args []string
		msg  []string
	}{
		{"empty out", []string{"--out", ""}, []string{`--out "": empty path`}},
		{"directory", []string{"--out", dir}, []string{fmt.Sprintf("--out %q: is a directory", dir)}},
		{"missing directory", []string{"--out", filepath.Join(dir, "none", "x.jsonl")},
			[]string{fmt.Sprintf("--out %q: directory %s does not exist", filepath.Join(dir, "none", "x.jsonl"), filepath.Join(dir, "none"))}},
		{"a file as a directory", []string{"--out", filepath.Join(file, "x.jsonl")}, []string{"--out", "not a directory"}},
		{"empty db", []string{"--db", ""}, []string{"--db: empty path"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"--db", missingDB}, tc.args...)
			require.Equal(t, 2, runExport(args, &stdout, &stderr), stderr.String())
			for _, m := range tc.msg {
				require.Contains(t, stderr.String(), m)
			}
			require.NotContains(t, stderr.String(), ".tmp", "the message names the user's path")
			require.Empty(t, stdout.String())
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing was created")
}

// A symbolic link is followed: the file it leads to is replaced as a whole (or created),
// the link stays as it was.
func TestExportCommandFollowsSymbolicLinks(t *testing.T) {
	dbPath := exportTestDB(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.jsonl"), []byte("old\n"), 0o644))
	require.NoError(t, os.Symlink("old.jsonl", filepath.Join(dir, "to-old")))
	require.NoError(t, os.Symlink("new.jsonl", filepath.Join(dir, "to-new")))

	for _, link := range []string{"to-old", "to-new"} {
		var stdout, stderr bytes.Buffer
		out := filepath.Join(dir, link)
		require.Equal(t, 0, runExport([]string{"--db", dbPath, "--out", out}, &stdout, &stderr), stderr.String())
		require.Contains(t, stderr.String(), "1 steps, 1 audit entries to "+out)
		st, err := os.Lstat(out)
		require.NoError(t, err)
		require.Equal(t, os.ModeSymlink, st.Mode().Type(), "the link stays")
		data, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Len(t, jsonLines(t, data), 2)
	}
	st, err := os.Stat(filepath.Join(dir, "old.jsonl"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the replaced file is private like any export")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 4, "no temporary file left")
}

func TestExportDestination(t *testing.T) {
	for _, out := range []string{"-", "/dev/stdout"} {
		dest, err := exportDestination(out, "vigil.db")
		require.NoError(t, err)
		require.Equal(t, exportDest{}, dest, "%s is standard output", out)
	}
	dir := t.TempDir()
	dest, err := exportDestination(filepath.Join(dir, "x.jsonl"), "postgres://vigil@localhost/vigil")
	require.NoError(t, err)
	require.Equal(t, exportDest{path: filepath.Join(dir, "x.jsonl")}, dest)
}
