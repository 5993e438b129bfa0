package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exportLine is one decoded line of an export.
type exportLine struct {
	record string
	json   json.RawMessage // the line without its "record" field
}

func readExport(t *testing.T, out []byte) []exportLine {
	t.Helper()
	var lines []exportLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &fields), "line %q", sc.Text())
		require.True(t, strings.HasPrefix(sc.Text(), `{"record":`), "record comes first: %s", sc.Text())
		var rec string
		require.NoError(t, json.Unmarshal(fields["record"], &rec))
		delete(fields, "record")
		rest, err := json.Marshal(fields)
		require.NoError(t, err)
		lines = append(lines, exportLine{record: rec, json: rest})
	}
	require.NoError(t, sc.Err())
	return lines
}

// exportFixture stores steps in two sessions and audit entries, and returns the steps.
func exportFixture(t *testing.T, db *DB) []*record.StepRecord {
	t.Helper()
	ctx := context.Background()
	var steps []*record.StepRecord
	for i := range 6 {
		sid := "a"
		if i%2 == 1 {
			sid = "b"
		}
		rec := step(sid, "allow", time.Duration(i)*time.Minute)
		rec.Request = json.RawMessage("{\n  \"jsonrpc\": \"2.0\", \"note\": \"<tag> & \\u2028\"\n}")
		rec.MatchedRules = []record.RuleMatch{{RuleID: "r1", Action: "allow", Mode: "monitor"}}
		steps = append(steps, save(t, db, rec))
	}
	for i, sid := range []string{"a", "b", "a"} {
		_, err := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionPause, Operator: "ann",
			SessionID: sid, Note: fmt.Sprint("note ", i), At: t0.Add(time.Duration(i) * 2 * time.Minute),
			Diff: json.RawMessage(`[{"op":"replace","path":"/x","value":1}]`)})
		require.NoError(t, err)
	}
	return steps
}

// Every line is the API's JSON for the record (as Step and ListAudit return it) plus the
// record kind; steps come first in seq order, then audit entries in id order.
func TestExportMatchesAPIRecords(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	steps := exportFixture(t, db)

	var out bytes.Buffer
	res, err := db.Export(ctx, &out, record.ExportOptions{Steps: true, Audit: true})
	require.NoError(t, err)
	require.Equal(t, record.ExportResult{Steps: 6, Audit: 3}, res)
	lines := readExport(t, out.Bytes())
	require.Len(t, lines, 9)
	require.Equal(t, 9, strings.Count(out.String(), "\n"), "one object per line")

	for i, rec := range steps {
		stored, err := db.Step(ctx, rec.Seq)
		require.NoError(t, err)
		want, err := json.Marshal(stored)
		require.NoError(t, err)
		require.Equal(t, record.RecordStep, lines[i].record)
		require.JSONEq(t, string(want), string(lines[i].json))
	}
	audit, err := db.ListAudit(ctx, record.AuditQuery{})
	require.NoError(t, err)
	for i := range 3 {
		want, err := json.Marshal(audit[len(audit)-1-i]) // ListAudit is newest first
		require.NoError(t, err)
		require.Equal(t, record.RecordAudit, lines[6+i].record)
		require.JSONEq(t, string(want), string(lines[6+i].json))
	}
}

func TestExportFilters(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	steps := exportFixture(t, db)

	tests := []struct {
		name       string
		opts       record.ExportOptions
		wantSteps  []int // indexes into steps
		wantAudits int
	}{
		{"steps only", record.ExportOptions{Steps: true}, []int{0, 1, 2, 3, 4, 5}, 0},
		{"audit only", record.ExportOptions{Audit: true}, nil, 3},
		{"nothing", record.ExportOptions{}, nil, 0},
		{"session", record.ExportOptions{Steps: true, Audit: true, SessionID: "b"}, []int{1, 3, 5}, 1},
		{"since", record.ExportOptions{Steps: true, Audit: true, Since: t0.Add(3 * time.Minute)}, []int{3, 4, 5}, 1},
		{"since is inclusive", record.ExportOptions{Steps: true, Since: t0.Add(5 * time.Minute)}, []int{5}, 0},
		{"session and since", record.ExportOptions{Steps: true, Audit: true, SessionID: "a", Since: t0.Add(time.Minute)}, []int{2, 4}, 1},
		{"unknown session", record.ExportOptions{Steps: true, Audit: true, SessionID: "zzz"}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := db.Export(ctx, &out, tc.opts)
			require.NoError(t, err)
			lines := readExport(t, out.Bytes())
			require.EqualValues(t, len(tc.wantSteps), res.Steps)
			require.EqualValues(t, tc.wantAudits, res.Audit)
			require.Len(t, lines, len(tc.wantSteps)+tc.wantAudits)
			for i, k := range tc.wantSteps {
				var got record.StepRecord
				require.NoError(t, json.Unmarshal(lines[i].json, &got))
				require.Equal(t, steps[k].Seq, got.Seq)
			}
			for _, l := range lines[len(tc.wantSteps):] {
				require.Equal(t, record.RecordAudit, l.record)
			}
		})
	}
}

// An export spans many pages, reads a database a live DB is writing, and stops at the
// newest records that existed when it started.
func TestExportReadOnlyBesideWriter(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	bulkSteps(t, db, "s", "search", 3*exportPage+7)

	ro, err := OpenReadOnly(ctx, db.Path())
	require.NoError(t, err)
	defer func() { require.NoError(t, ro.Close()) }()

	// A writer that keeps storing while the export runs, and a writer that blocks new
	// writes (the guardian's writer mid-batch) must not stop the reader either.
	pr := &pausingWriter{pause: exportPage * 300, hook: func() {
		save(t, db, step("s", "allow", time.Hour))
	}}
	res, err := ro.Export(ctx, pr, record.ExportOptions{Steps: true, Audit: true})
	require.NoError(t, err)
	require.True(t, pr.hooked, "the hook ran mid-export")
	require.EqualValues(t, 3*exportPage+7, res.Steps, "steps stored after the start are not included")
	lines := readExport(t, pr.buf.Bytes())
	require.Len(t, lines, 3*exportPage+7)
	for i, l := range lines {
		var rec record.StepRecord
		require.NoError(t, json.Unmarshal(l.json, &rec))
		require.EqualValues(t, i+1, rec.Seq)
	}

	release := blockWriter(t, db)
	var out bytes.Buffer
	res, err = ro.Export(ctx, &out, record.ExportOptions{Steps: true})
	release()
	require.NoError(t, err)
	require.EqualValues(t, 3*exportPage+8, res.Steps)

	rec, err := ro.Step(ctx, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, rec.Seq)
	_, err = ro.Step(ctx, 1<<40)
	require.ErrorIs(t, err, record.ErrNotFound)
}

// pausingWriter buffers output and calls hook once, after pause bytes.
type pausingWriter struct {
	buf    bytes.Buffer
	pause  int
	hook   func()
	hooked bool
}

func (p *pausingWriter) Write(b []byte) (int, error) {
	n, err := p.buf.Write(b)
	if !p.hooked && p.buf.Len() >= p.pause {
		p.hooked = true
		p.hook()
	}
	return n, err
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestExportReportsWriteErrors(t *testing.T) {
	db := openTest(t)
	exportFixture(t, db)
	boom := errors.New("disk full")
	_, err := db.Export(context.Background(), failingWriter{boom}, record.ExportOptions{Steps: true, Audit: true})
	require.ErrorIs(t, err, boom)
}

func TestOpenReadOnlyRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	missing := filepath.Join(dir, "missing.db")
	_, err := OpenReadOnly(ctx, missing)
	require.Error(t, err)
	require.NoFileExists(t, missing, "opening read-only never creates the file")

	empty := filepath.Join(dir, "empty.db")
	raw, err := sql.Open("sqlite", "file:"+empty)
	require.NoError(t, err)
	_, err = raw.Exec(`CREATE TABLE other (x)`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	_, err = OpenReadOnly(ctx, empty)
	require.ErrorContains(t, err, "not a Vigil database")

	newer := filepath.Join(dir, "newer.db")
	db, err := Open(ctx, newer, Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	raw, err = sql.Open("sqlite", "file:"+newer)
	require.NoError(t, err)
	_, err = raw.Exec(`PRAGMA user_version = 999`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	_, err = OpenReadOnly(ctx, newer)
	require.ErrorIs(t, err, ErrSchemaTooNew)
}

// The read-only handle cannot change the database, even through its own connection.
func TestReadOnlyCannotWrite(t *testing.T) {
	db := openTest(t)
	save(t, db, step("s", "allow", 0))
	ro, err := OpenReadOnly(context.Background(), db.Path())
	require.NoError(t, err)
	defer func() { require.NoError(t, ro.Close()) }()
	_, err = ro.db.Exec(`DELETE FROM steps`)
	require.Error(t, err)
	require.Equal(t, 1, countRows(t, db, "steps"))
}

// Since keeps exactly the steps received at or after it, also when receive times and seqs
// are not in the same order.
func TestExportSinceOutOfOrder(t *testing.T) {
	db := openTest(t)
	a := save(t, db, step("s", "allow", 10*time.Minute))
	save(t, db, step("s", "allow", time.Minute))
	c := save(t, db, step("s", "allow", 6*time.Minute))
	save(t, db, step("s", "allow", 2*time.Minute))

	var out bytes.Buffer
	res, err := db.Export(context.Background(), &out, record.ExportOptions{Steps: true, Since: t0.Add(5 * time.Minute)})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Steps)
	lines := readExport(t, out.Bytes())
	var got []int64
	for _, l := range lines {
		var rec record.StepRecord
		require.NoError(t, json.Unmarshal(l.json, &rec))
		got = append(got, rec.Seq)
	}
	require.Equal(t, []int64{a.Seq, c.Seq}, got)

	out.Reset()
	res, err = db.Export(context.Background(), &out, record.ExportOptions{Steps: true, Since: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.Zero(t, res.Steps)
	require.Empty(t, out.String())
}

// heapSampler discards what is written and records the largest live heap seen at a write.
type heapSampler struct{ peak uint64 }

func (h *heapSampler) Write(b []byte) (int, error) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.peak = max(h.peak, m.HeapAlloc)
	return len(b), nil
}

// An export reads a page of rows at a time, and a page is bounded by its steps' bytes as
// well as by rows: steps of a few MiB each do not make it hold a whole 500-row page of them.
func TestExportPagesAreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	const steps, half = 48, 1 << 20 // request and response 1 MiB each: 96 MiB of steps
	body := json.RawMessage(`{"pad":"` + strings.Repeat("x", half-10) + `"}`)
	for i := range steps {
		rec := step("s", "allow", time.Duration(i))
		rec.Request, rec.Response = body, body
		save(t, db, rec)
	}
	require.NoError(t, db.Flush(ctx))

	// The collector runs often, so that the heap sampled at each write is close to what the
	// export holds.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	w := &heapSampler{}
	res, err := db.Export(ctx, w, record.ExportOptions{Steps: true})
	require.NoError(t, err)
	require.EqualValues(t, steps, res.Steps)
	held := int64(w.peak) - int64(base.HeapAlloc)
	t.Logf("%d steps of %d MiB: export held at most %.1f MiB more than before it", steps, 2*half>>20, float64(held)/(1<<20))
	// One page (exportPageBytes and the row that passes it), a copy of each value from
	// the driver, the encoding of one step, the collector's slack.
	require.Less(t, held, int64(2*(exportPageBytes+2*2*half)), "a page is bounded by bytes")
}
