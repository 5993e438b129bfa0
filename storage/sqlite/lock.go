package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/vigil-guardian/vigil/internal/flock"
)

// ErrInUse is returned by Open when another process (a running guardian, or a command
// that opened it the same way) has the database open.
var ErrInUse = errors.New("database is in use by another Vigil process")

// errBesideSteps refuses a step saved through a DB opened beside the holder: steps take
// their seqs from the holder's journal.
var errBesideSteps = errors.New("storage: steps cannot be saved beside the guardian holding the database")

// LockPath is the lock file of the database at path. It is left in place when the database
// closes (removing it would race with the next opener); it holds the last holder's pid.
func LockPath(path string) string { return path + "-lock" }

// fileLock is an exclusive advisory lock on the database's lock file, held for the life of
// a DB opened with Open. Two guardians on one file would each hand out the same seqs to
// their steps and each replay (and empty) the other's step journal: answered steps lost.
type fileLock struct{ f *os.File }

// lockDatabase takes the lock of the database at abs, or reports who holds it.
func lockDatabase(abs string) (*fileLock, error) {
	f, err := flock.Open(LockPath(abs), dbFileMode)
	if err != nil {
		return nil, fmt.Errorf("storage: open lock file: %w", err)
	}
	// Made by root (a keys or users command run with sudo) beside a service account's
	// database, a root-owned lock file would keep that account's guardian from starting.
	if err := ownLikeDatabase(f, abs); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: lock file: %w", err)
	}
	held, err := flock.TryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: lock %s: %w", LockPath(abs), err)
	}
	if !held {
		b, _ := io.ReadAll(io.LimitReader(f, 64))
		_ = f.Close()
		holder := "another process"
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			holder = "process " + strconv.Itoa(pid)
		}
		return nil, fmt.Errorf("storage: %s is open in %s (a running guardian, or a vigil command that opened it): "+
			"stop it first, or use its console and API: %w", abs, holder, ErrInUse)
	}
	// The pid is for the message above only; the lock is what excludes.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &fileLock{f: f}, nil
}

// release lets the next opener in. Safe on a nil lock.
func (l *fileLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the lock
	l.f = nil
	return err
}

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// checkDatabaseFile refuses a path that exists but is not a SQLite database (a directory, a
// text file), before anything changes it: its mode is tightened and its journal created
// only once it is known to be one.
func checkDatabaseFile(abs string) error {
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("storage: %w", err)
	case st.IsDir():
		return fmt.Errorf("storage: %s is a directory, not a database file (give --db a file path such as %s)",
			abs, abs+string(os.PathSeparator)+"vigil.db")
	case !st.Mode().IsRegular():
		return fmt.Errorf("storage: %s is not a regular file", abs)
	case st.Size() == 0:
		return nil // created by us and never written, or touched: SQLite makes it a database
	}
	f, err := os.Open(abs)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, sqliteHeader) {
		return fmt.Errorf("storage: %s is not a SQLite database (it does not start with SQLite's header); "+
			"nothing was changed", abs)
	}
	return nil
}
