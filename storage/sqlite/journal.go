package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync/atomic"
)

// The step journal is how a step is stored before its answer goes out without waiting for
// a SQLite commit. SaveStep appends concurrent steps to it with one shared write call (in
// the page cache once write returns, so it survives the process being killed, as a commit
// to the WAL with synchronous=NORMAL does) and returns; the writer copies them into SQLite
// later in large transactions, after which their journal file is emptied. Open replays
// what a crash left in it. Large transactions matter because every step touches a page of
// the per-session index: committing 500 steps at once writes each such page once, not once
// per step.
//
// A record is a 4-byte little-endian length, the CRC-32C of the payload, then the payload:
// the step as JSON, exactly as it is published live. Replay stops at the first record that
// is short or fails its checksum: the end of a write the process did not finish, whose step
// was therefore never answered.

const journalHeader = 8

// maxJournalRecord bounds a record's length on replay, so a damaged length cannot make
// Open allocate gigabytes. A step is at most the request body limit plus its answer.
const maxJournalRecord = 256 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type journal struct {
	f    *os.File
	path string
	size int64 // bytes of whole records in the file
	// total, when set, is the size of every journal file together (DB.IngestStats reads
	// it without the locks the writers hold).
	total *atomic.Int64
}

// openJournal opens (creating if needed) the journal at path and returns the payloads of
// the whole records it holds. A torn tail is cut off so new records follow the last good one.
func openJournal(path string) (*journal, [][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("storage: open step journal: %w", err)
	}
	j := &journal{f: f, path: path}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("storage: read step journal %s: %w", path, err)
	}
	recs, good := readJournal(data)
	if st, err := f.Stat(); err == nil && st.Size() > good {
		if err := f.Truncate(good); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("storage: cut torn tail of step journal: %w", err)
		}
	}
	j.size = good
	return j, recs, nil
}

// readJournal returns the payloads of the whole, intact records from the start of data and
// the offset where they end.
func readJournal(data []byte) ([][]byte, int64) {
	var recs [][]byte
	off := 0
	for len(data)-off >= journalHeader {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n > maxJournalRecord || len(data)-off-journalHeader < n {
			break
		}
		p := data[off+journalHeader : off+journalHeader+n]
		if crc32.Checksum(p, crcTable) != sum {
			break
		}
		recs = append(recs, p)
		off += journalHeader + n
	}
	return recs, int64(off)
}

// decodeJournaled decodes one journal record into the record SaveStep was given.
func decodeJournaled(payload []byte) (record.StepRecord, error) {
	var rec record.StepRecord
	if err := json.Unmarshal(payload, &rec); err != nil {
		return record.StepRecord{}, fmt.Errorf("storage: decode journaled step: %w", err)
	}
	for _, raw := range []*json.RawMessage{&rec.Request, &rec.Response} {
		if string(*raw) == "null" {
			*raw = nil // absent, stored as NULL, as SaveStep stores it
		}
	}
	return rec, nil
}

// journaledSteps reads, without changing it, the journal of the database at dbPath: the
// steps another process (the running guardian) has answered but not yet copied into the
// tables, for readers in this process that must include them.
func journaledSteps(dbPath string) ([]record.StepRecord, error) {
	var steps []record.StepRecord
	for _, path := range JournalPaths(dbPath) {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("storage: read step journal: %w", err)
		}
		payloads, _ := readJournal(data)
		for _, p := range payloads {
			rec, err := decodeJournaled(p)
			if err != nil {
				return nil, err
			}
			steps = append(steps, rec)
		}
	}
	slices.SortFunc(steps, func(a, b record.StepRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	return steps, nil
}

// appendRecordHeader appends the header of a record holding payload to b.
func appendRecordHeader(b []byte, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(payload, crcTable))
}

// write appends framed records with one write call. On failure it cuts the file back, so
// a partial write never sits in front of later records.
func (j *journal) write(framed []byte) error {
	n, err := j.f.Write(framed)
	if err != nil {
		if n > 0 {
			if terr := j.f.Truncate(j.size); terr != nil {
				err = errors.Join(err, fmt.Errorf("cut back: %w", terr))
			}
		}
		return fmt.Errorf("storage: write step journal: %w", err)
	}
	j.size += int64(n)
	if j.total != nil {
		j.total.Add(int64(n))
	}
	return nil
}

// writeFrames appends the records' frames with one write call.
func (j *journal) writeFrames(recs []*jrec) error {
	if len(recs) == 1 {
		return j.write(recs[0].frame)
	}
	n := 0
	for _, r := range recs {
		n += len(r.frame)
	}
	buf := make([]byte, 0, n)
	for _, r := range recs {
		buf = append(buf, r.frame...)
	}
	return j.write(buf)
}

// reset empties the journal once everything in it is in SQLite.
func (j *journal) reset() error {
	if j.size == 0 {
		return nil
	}
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("storage: empty step journal: %w", err)
	}
	if j.total != nil {
		j.total.Add(-j.size)
	}
	j.size = 0
	return nil
}

func (j *journal) close() error {
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("storage: close step journal: %w", err)
	}
	return nil
}
