package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-guardian/vigil/internal/syncbuf"

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

// readJournal keeps every record that verifies: a torn tail is dropped quietly, anything
// else that does not verify is counted as damage, and the records after it are kept.
func TestReadJournal(t *testing.T) {
	rec := func(s string) []byte { return append(appendRecordHeader(nil, []byte(s)), s...) }
	good := append(rec(`{"a":1}`), rec(`{"b":2}`)...)
	flipped := rec(`{"c":3}`)
	flipped[len(flipped)-2] ^= 0xff
	later := rec(`{"d":4}`)
	garbage := []byte("\x00garbage\xff")
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		data []byte
		want int
		// end is where the next record goes; damaged the bytes counted as damage.
		end, damaged int
	}{
		{"empty", nil, 0, 0, 0},
		{"whole", good, 2, len(good), 0},
		{"short header", cat(good, []byte{1, 2, 3}), 2, len(good), 0},
		{"short payload", cat(good, rec(`{"c":3}`)[:10]), 2, len(good), 0},
		{"huge length", cat(good, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}), 2, len(good), 0},
		{"bad checksum at the end", cat(good, flipped), 2, len(good), len(flipped)},
		{"zeros at the end", cat(good, make([]byte, 16)), 2, len(good), 16},
		{"bad checksum in the middle", cat(good, flipped, later), 3, len(good) + len(flipped) + len(later), len(flipped)},
		{"garbage in the middle", cat(good, garbage, later), 3, len(good) + len(garbage) + len(later), len(garbage)},
		{"damage then a torn tail", cat(good, flipped, later[:5]), 2, len(good), len(flipped) + 5},
		{"damaged first record", cat(flipped, good), 2, len(flipped) + len(good), len(flipped)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scan := readJournal(tc.data)
			require.Len(t, scan.recs, tc.want)
			require.EqualValues(t, tc.end, scan.end)
			require.EqualValues(t, tc.damaged, scan.damagedBytes)
			require.Equal(t, tc.damaged > 0, scan.damagedRecords > 0)
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

// journalFrames returns the offset of each record of a journal and the offset after it.
func journalFrames(t *testing.T, data []byte) [][2]int {
	t.Helper()
	var frames [][2]int
	for off := 0; off < len(data); {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		frames = append(frames, [2]int{off, off + journalHeader + n})
		off += journalHeader + n
	}
	return frames
}

// logRecords decodes the JSON log lines a slog.JSONHandler wrote.
func logRecords(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// A damaged record in the middle of the step journal (a flipped byte after a crash) costs
// that record only: every intact record after it, each an answered step, is stored. Losing
// anything but a torn tail is logged at ERROR and the journal as it was is kept beside the
// database before it is emptied. A record cut short at the end (a write the crash
// interrupted: its step was never answered) is normal and says nothing.
func TestJournalDamageDropsOnlyTheDamagedRecord(t *testing.T) {
	const total, damaged = 380, 99 // the 100th record
	// The journal as the real writer writes it: steps journaled by SaveStep, read from the
	// file before any was copied into SQLite.
	src := filepath.Join(t.TempDir(), "vigil.db")
	db := openJournaling(t, src)
	var recs []*record.StepRecord
	for i := range total {
		rec := step(fmt.Sprint("s", i%3), "allow", time.Duration(i))
		rec.Request = json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"params":{"pad":%q}}`, i, strings.Repeat("p", i)))
		recs = append(recs, save(t, db, rec))
	}
	require.Zero(t, rawCount(t, db, "steps"), "the steps are in the journal only")
	journal, err := os.ReadFile(JournalPaths(src)[0])
	require.NoError(t, err)
	require.NoError(t, db.Close())
	frames := journalFrames(t, journal)
	require.Len(t, frames, total)
	dmg := frames[damaged]

	for _, tc := range []struct {
		name    string
		damage  func([]byte) []byte
		missing []int // indexes of recs not recovered
		// dropped is the ERROR's count of records and bytes; zero for a torn tail.
		droppedRecords, droppedBytes int
	}{
		{"flipped payload byte", func(b []byte) []byte {
			b[(dmg[0]+journalHeader+dmg[1])/2] ^= 0x04
			return b
		}, []int{damaged}, 1, dmg[1] - dmg[0]},
		{"flipped checksum byte", func(b []byte) []byte {
			b[dmg[0]+5] ^= 0x80
			return b
		}, []int{damaged}, 1, dmg[1] - dmg[0]},
		{"damaged length", func(b []byte) []byte {
			b[dmg[0]] ^= 0x03 // the record no longer ends where the next begins
			return b
		}, []int{damaged}, 1, dmg[1] - dmg[0]},
		{"zeroed records", func(b []byte) []byte {
			clear(b[dmg[0]:frames[damaged+2][1]])
			return b
		}, []int{damaged, damaged + 1, damaged + 2}, 1, frames[damaged+2][1] - dmg[0]},
		{"bad checksum in the last record", func(b []byte) []byte {
			b[len(b)-2] ^= 0x01
			return b
		}, []int{total - 1}, 1, frames[total-1][1] - frames[total-1][0]},
		{"torn tail", func(b []byte) []byte {
			return b[:len(b)-7]
		}, []int{total - 1}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "vigil.db")
			db, err := Open(ctx, path, Options{})
			require.NoError(t, err)
			require.NoError(t, db.Close())
			bad := tc.damage(bytes.Clone(journal))
			require.NoError(t, os.WriteFile(JournalPaths(path)[0], bad, 0o600))

			logs := &syncbuf.Buffer{}
			db, err = Open(ctx, path, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()

			var want []record.StepRecord
			for i, rec := range recs {
				if !slices.Contains(tc.missing, i) {
					want = append(want, *rec)
				}
			}
			var got []record.StepRecord
			for s := range 3 {
				page, err := db.Steps(ctx, record.StepQuery{SessionID: fmt.Sprint("s", s), Limit: 1000})
				require.NoError(t, err)
				got = append(got, page...)
			}
			slices.SortFunc(got, func(a, b record.StepRecord) int { return cmp.Compare(a.Seq, b.Seq) })
			seqs := func(steps []record.StepRecord) (s []int64) {
				for _, st := range steps {
					s = append(s, st.Seq)
				}
				return s
			}
			require.Equal(t, seqs(want), seqs(got), "every intact record is recovered")
			require.Equal(t, want, got)
			st, err := os.Stat(JournalPaths(path)[0])
			require.NoError(t, err)
			require.Zero(t, st.Size(), "replayed and emptied")

			copies, err := filepath.Glob(JournalPaths(path)[0] + ".damaged-*")
			require.NoError(t, err)
			var errs []map[string]any
			for _, r := range logRecords(t, logs.String()) {
				if r["level"] == "ERROR" {
					errs = append(errs, r)
				}
			}
			if tc.droppedRecords == 0 {
				require.Empty(t, copies, "a torn tail is no damage")
				require.Empty(t, errs)
				return
			}
			require.Len(t, copies, 1)
			st, err = os.Stat(copies[0])
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o600), st.Mode().Perm())
			kept, err := os.ReadFile(copies[0])
			require.NoError(t, err)
			require.Equal(t, bad, kept, "the journal is kept as it was")

			require.Len(t, errs, 1, logs.String())
			require.Equal(t, JournalPaths(path)[0], errs[0]["journal"])
			require.Equal(t, copies[0], errs[0]["copy"])
			require.EqualValues(t, tc.droppedRecords, errs[0]["droppedRecords"])
			require.EqualValues(t, tc.droppedBytes, errs[0]["droppedBytes"])
			require.EqualValues(t, total-len(tc.missing), errs[0]["intactRecords"])

			// Seqs go on after the newest recovered one.
			next := save(t, db, step("s0", "allow", time.Hour))
			require.Equal(t, want[len(want)-1].Seq+1, next.Seq)
		})
	}
}
