package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

// openJournaling opens a store whose steps stay in the journal until something needs them.
func openJournaling(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(context.Background(), path, Options{IngestDelay: time.Hour})
	require.NoError(t, err)
	return db
}

// rawCount counts rows without waiting for the journal, as another process would.
func rawCount(t *testing.T, db *DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Reader().QueryRow("SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func TestJournaledStepsAreVisibleToQueries(t *testing.T) {
	ctx := context.Background()
	db := openJournaling(t, filepath.Join(t.TempDir(), "vigil.db"))
	defer func() { require.NoError(t, db.Close()) }()

	rec := save(t, db, step("s", "deny", 0))
	require.Zero(t, rawCount(t, db, "steps"), "the step waits in the journal")

	got, err := db.Step(ctx, rec.Seq)
	require.NoError(t, err, "a query waits for the journal")
	require.Equal(t, *rec, got)
	require.Equal(t, 1, rawCount(t, db, "steps"))

	// A session read waits only for that session's steps.
	save(t, db, step("other", "allow", 0))
	_, err = db.Session(ctx, "new")
	require.ErrorIs(t, err, record.ErrNotFound)
	require.Equal(t, 1, rawCount(t, db, "steps"), "an unrelated session read did not flush")
	s, err := db.Session(ctx, "other")
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Steps)
	require.Equal(t, 2, rawCount(t, db, "steps"))
}

// A crash leaves answered steps in the journal only; the next Open stores them, skips the
// ones already stored, and stops at a torn record.
func TestJournalReplay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	stored := save(t, db, step("s", "allow", 0))
	require.NoError(t, db.Close())

	// The journal as a SIGKILL leaves it: the stored step (not emptied yet), three answered
	// steps, then a write cut short.
	var journal []byte
	appendRec := func(payload []byte) {
		journal = appendRecordHeader(journal, payload)
		journal = append(journal, payload...)
	}
	appendRec(stored.AppendJSON(nil))
	var recs []*record.StepRecord
	for i := range 3 {
		rec := step("s", "deny", time.Duration(i+1))
		rec.Seq, rec.MatchedRules = stored.Seq+1+int64(i), []record.RuleMatch{{RuleID: "r", Action: "deny", Mode: "enforce"}}
		if i == 1 {
			rec.Response = nil // a notification
		}
		rec.KeyID = "key_replayed"
		recs = append(recs, rec)
		appendRec(rec.AppendJSON(nil))
	}
	journal = append(journal, appendRecordHeader(nil, []byte(`{"seq":99}`))...)
	journal = append(journal, `{"seq":`...)
	require.NoError(t, os.WriteFile(JournalPaths(path)[0], journal, 0o600))

	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	st, err := os.Stat(JournalPaths(path)[0])
	require.NoError(t, err)
	require.Zero(t, st.Size(), "replayed and emptied")
	steps, err := db.Steps(ctx, record.StepQuery{SessionID: "s"})
	require.NoError(t, err)
	require.Len(t, steps, 4)
	require.Equal(t, *stored, steps[0])
	for i, rec := range recs {
		require.Equal(t, *rec, steps[i+1])
	}
	s, err := db.Session(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(4), s.Steps)
	require.Equal(t, map[string]int64{"allow": 1, "deny": 3}, s.Decisions)
	require.Equal(t, "key_replayed", s.KeyID, "the replayed steps' key owns the session")

	// Seqs go on after the replayed ones.
	next := save(t, db, step("s", "allow", time.Minute))
	require.Equal(t, recs[2].Seq+1, next.Seq)
}

func TestReadJournalStopsAtDamage(t *testing.T) {
	rec := func(s string) []byte { return append(appendRecordHeader(nil, []byte(s)), s...) }
	good := append(rec(`{"a":1}`), rec(`{"b":2}`)...)
	flipped := rec(`{"c":3}`)
	flipped[len(flipped)-2] ^= 0xff
	for _, tc := range []struct {
		name string
		data []byte
		want int
	}{
		{"empty", nil, 0},
		{"whole", good, 2},
		{"short header", append(bytes.Clone(good), 1, 2, 3), 2},
		{"short payload", append(bytes.Clone(good), rec(`{"c":3}`)[:10]...), 2},
		{"bad checksum", append(bytes.Clone(good), flipped...), 2},
		{"huge length", append(bytes.Clone(good), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, end := readJournal(tc.data)
			require.Len(t, recs, tc.want)
			if tc.want > 0 {
				require.Equal(t, int64(len(good)), end)
			}
		})
	}
}

// Another process (vigil backup, vigil export) reads the file while the guardian keeps
// answered steps in its journal: the steps are in what it produces.
func TestBackupAndExportIncludeJournaledSteps(t *testing.T) {
	ctx := context.Background()
	db := openJournaling(t, filepath.Join(t.TempDir(), "vigil.db"))
	defer func() { require.NoError(t, db.Close()) }()
	first := save(t, db, step("s", "allow", 0))
	require.NoError(t, db.Flush(ctx))
	second := save(t, db, step("s", "deny", time.Second))
	require.Equal(t, 1, rawCount(t, db, "steps"))

	dest := filepath.Join(t.TempDir(), "copy.db")
	_, err := Backup(ctx, db.Path(), dest, false)
	require.NoError(t, err)
	require.NoError(t, IntegrityCheck(ctx, dest))
	cp, err := Open(ctx, dest, Options{})
	require.NoError(t, err)
	got, err := cp.Steps(ctx, record.StepQuery{SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, []record.StepRecord{*first, *second}, got)
	s, err := cp.Session(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(2), s.Steps)
	require.NoError(t, cp.Close())

	ro, err := OpenReadOnly(ctx, db.Path())
	require.NoError(t, err)
	defer func() { require.NoError(t, ro.Close()) }()
	var out bytes.Buffer
	res, err := ro.Export(ctx, &out, record.ExportOptions{Steps: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Steps)
	lines := readExport(t, out.Bytes())
	var last record.StepRecord
	require.NoError(t, json.Unmarshal(lines[1].json, &last))
	require.Equal(t, second.Seq, last.Seq)
	rec, err := ro.Step(ctx, second.Seq)
	require.NoError(t, err)
	require.Equal(t, *second, rec)
	require.Equal(t, 1, rawCount(t, db, "steps"), "nothing above made the guardian flush")
}

// AppendJSON is what the live stream and the journal carry; it must be what encoding/json
// makes of the record.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	full := step("s-1", "modify", 0)
	full.TurnID, full.StepID, full.AgentID, full.AgentName = "t", "st", "a", "Agent <x> & co"
	full.UserID, full.Tool, full.Text, full.Held, full.LatencyMicros = "u", "send_email", "hi\n\"there\"", true, 42
	full.KeyID = "key_1"
	full.Client, full.Server = &record.Peer{Name: "c \"1\"", Version: "1.0"}, &record.Peer{Name: "s"}
	full.MatchedRules = []record.RuleMatch{{RuleID: "r1", Action: "deny", Mode: "enforce", ReasonCode: "X"},
		{RuleID: "r2", Action: "allow", Mode: "monitor", Error: "boom\t\u2028"}}
	for _, tc := range []struct {
		name string
		rec  *record.StepRecord
	}{
		{"minimal", step("s", "allow", 0)},
		{"full", full},
		{"nil rules and bodies", &record.StepRecord{Seq: 7, SessionID: "s", Method: "m", Decision: "allow", ReceivedAt: t0}},
		{"control and invalid utf-8", &record.StepRecord{SessionID: "a\x00b\x1f\x7f\xff\u2029é😀\b\f\r", Method: "m",
			Decision: "allow", ReceivedAt: t0, MatchedRules: []record.RuleMatch{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.rec.Seq = 12345
			want, err := json.Marshal(tc.rec)
			require.NoError(t, err)
			require.Equal(t, string(want), string(tc.rec.AppendJSON(nil)))
		})
	}
	for i := range 2000 {
		s := string([]byte{byte(i), byte(i >> 3), byte(i * 7)})
		rec := &record.StepRecord{SessionID: s, Method: fmt.Sprint(i), Decision: "allow", ReceivedAt: t0}
		want, err := json.Marshal(rec)
		require.NoError(t, err)
		require.Equal(t, string(want), string(rec.AppendJSON(nil)), "%q", s)
	}
}
