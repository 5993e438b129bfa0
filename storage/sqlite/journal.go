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
	"time"
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
// the step as JSON, exactly as it is published live. A record cut short at the end of the
// file is a write the process did not finish, whose step was therefore never answered: it
// is dropped quietly. Anything else that fails its checksum is damage (a flipped byte on the
// disk or in the page cache): replay drops only the damaged bytes, finds the next record
// that verifies and carries on, since every record after it is an answered step; it keeps
// a copy of the file as it was (journalDamage) for the operator.

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
	// damage, when set, is what openJournal found damaged and dropped; replayJournal logs it.
	damage *journalDamage
}

// journalDamage describes records of a journal that failed their checksum with intact
// records after them, or a last record that is whole but fails its checksum: bytes no
// crash of Vigil leaves behind, so they are reported, never dropped quietly.
type journalDamage struct {
	// records and bytes are what was dropped (records as stretchRecords counts them).
	records int
	bytes   int64
	// intact is how many records of the file verified and were kept.
	intact int
	// copy is the file the journal was copied to, as it was, before anything was cut.
	copy string
}

// openJournal opens (creating if needed) the journal at path and returns the payloads of
// the intact records it holds. A torn tail is cut off so new records follow the last good
// one. When records were damaged, the file is first copied beside it, as it is, and
// j.damage says what was dropped.
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
	scan := readJournal(data)
	if scan.damagedBytes > 0 {
		// Evidence first: the journal is cut here and emptied once replayed, so the copy
		// must exist before either. Without it Open fails rather than lose the bytes.
		cp, err := keepDamaged(path, data)
		if err != nil {
			_ = f.Close()
			return nil, nil, err
		}
		j.damage = &journalDamage{records: scan.damagedRecords, bytes: scan.damagedBytes,
			intact: len(scan.recs), copy: cp}
	}
	if int64(len(data)) > scan.end {
		if err := f.Truncate(scan.end); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("storage: cut torn tail of step journal: %w", err)
		}
	}
	j.size = scan.end
	return j, scan.recs, nil
}

// keepDamaged writes data, a damaged journal's content, to a new file beside it named
// after the journal and the time (mode 0600, synced: the original is emptied soon after)
// and returns its path.
func keepDamaged(path string, data []byte) (string, error) {
	base := fmt.Sprintf("%s.damaged-%d", path, time.Now().Unix())
	for i := 1; ; i++ {
		cp := base
		if i > 1 {
			cp = fmt.Sprintf("%s-%d", base, i) // a second start within the same second
		}
		f, err := os.OpenFile(cp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("storage: keep a copy of the damaged step journal: %w", err)
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(cp)
			return "", fmt.Errorf("storage: keep a copy of the damaged step journal: %w", err)
		}
		return cp, nil
	}
}

// journalScan is what readJournal found in a journal file.
type journalScan struct {
	// recs are the payloads of the intact records, in file order.
	recs [][]byte
	// end is the offset after the last intact record: where the next record goes.
	end int64
	// damagedRecords and damagedBytes count what failed its checksum and was not a torn
	// tail (see readJournal); damagedRecords counts records as stretchRecords does.
	damagedRecords int
	damagedBytes   int64
}

// readJournal reads the records of data. A record that does not verify is skipped up to
// the next one that does: its own length says where that is unless the length itself is
// damaged, and otherwise the next offset where a record verifies is searched for. A
// record's header and its payload's checksum, with a payload that opens a JSON object, do
// not verify by chance. What follows the last intact record is a torn tail when it is a
// single record cut short (the header says more bytes than the file has); anything else
// that is dropped, there or before intact records, is damage.
func readJournal(data []byte) journalScan {
	var scan journalScan
	off := 0
	for off < len(data) {
		if n, ok := journalRecordAt(data, off); ok {
			scan.recs = append(scan.recs, data[off+journalHeader:off+journalHeader+n])
			off += journalHeader + n
			scan.end = int64(off)
			continue
		}
		next := -1
		if n := journalLength(data, off); n >= 0 && off+journalHeader+n < len(data) {
			if _, ok := journalRecordAt(data, off+journalHeader+n); ok {
				next = off + journalHeader + n // a damaged payload or checksum
			}
		}
		for k := off + 1; next < 0 && k+journalHeader < len(data); k++ {
			if _, ok := journalRecordAt(data, k); ok {
				next = k
			}
		}
		if next < 0 {
			if !tornTail(data[off:]) {
				scan.damagedRecords += stretchRecords(data[off:])
				scan.damagedBytes += int64(len(data) - off)
			}
			break
		}
		scan.damagedRecords += stretchRecords(data[off:next])
		scan.damagedBytes += int64(next - off)
		off = next
	}
	return scan
}

// journalLength is the payload length the header at off declares, or -1 when the header is
// not all there or declares more than a record can hold.
func journalLength(data []byte, off int) int {
	if len(data)-off < journalHeader {
		return -1
	}
	n := binary.LittleEndian.Uint32(data[off:])
	if n > maxJournalRecord {
		return -1
	}
	return int(n)
}

// journalRecordAt reports whether a whole, intact record starts at off, and its length.
func journalRecordAt(data []byte, off int) (int, bool) {
	n := journalLength(data, off)
	// Every payload is a JSON object: this also refuses the empty records a run of zero
	// bytes would otherwise pass for (the checksum of nothing is 0).
	if n < 1 || len(data)-off-journalHeader < n || data[off+journalHeader] != '{' {
		return 0, false
	}
	p := data[off+journalHeader : off+journalHeader+n]
	if crc32.Checksum(p, crcTable) != binary.LittleEndian.Uint32(data[off+4:]) {
		return 0, false
	}
	return n, true
}

// tornTail reports whether tail, the bytes after the last intact record, is one record cut
// short: what a write the process did not finish leaves.
func tornTail(tail []byte) bool {
	if len(tail) < journalHeader {
		return true
	}
	n := binary.LittleEndian.Uint32(tail)
	return uint64(n) > uint64(len(tail)-journalHeader)
}

// stretchRecords is how many records a damaged stretch held: as many as its length fields
// delimit when they divide it exactly (a damaged payload or checksum), else 1 (a damaged
// length leaves the count unknown; at least one record is lost).
func stretchRecords(stretch []byte) int {
	count, off := 0, 0
	for off < len(stretch) {
		n := journalLength(stretch, off)
		if n < 1 || off+journalHeader+n > len(stretch) {
			return 1
		}
		off += journalHeader + n
		count++
	}
	return max(count, 1)
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
		for _, p := range readJournal(data).recs {
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
