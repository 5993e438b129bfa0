package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// crashWriterEnv makes the test binary act as the writer process of TestKillKeepsAnsweredSteps.
const crashWriterEnv = "VIGIL_STORAGE_CRASH_DB"

// TestMain lets the test binary double as a process that stores steps until it is killed.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashWriterEnv); path != "" {
		crashWriter(path)
		return
	}
	os.Exit(m.Run())
}

// crashWriter saves steps from several goroutines and prints each seq once SaveStep has
// returned, i.e. once the step would have been answered. It never returns on its own.
func crashWriter(path string) {
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				rec := step(fmt.Sprint("crash", g), []string{"allow", "deny", "modify"}[i%3], time.Duration(i))
				rec.Request = benchRequest
				if err := db.SaveStep(context.Background(), rec); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				if i%20 == 19 {
					// A query of steps stores them, leaving their summaries owed.
					if _, err := db.Steps(context.Background(), record.StepQuery{SessionID: rec.SessionID, Limit: 1}); err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(2)
					}
				}
				mu.Lock()
				fmt.Fprintln(out, rec.Seq)
				_ = out.Flush()
				mu.Unlock()
			}
		}()
	}
	select {}
}

// Killing the process (SIGKILL on Unix) while it writes loses no step it had answered, and
// leaves a database that passes the integrity check, whose session summaries (written
// behind their steps) count every stored step once the next start has caught them up.
func TestKillKeepsAnsweredSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashWriterEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())

	var answered []int64
	lines := bufio.NewScanner(stdout)
	for len(answered) < 2000 && lines.Scan() {
		seq, err := strconv.ParseInt(lines.Text(), 10, 64)
		require.NoError(t, err)
		answered = append(answered, seq)
	}
	require.NoError(t, cmd.Process.Kill())
	// Whatever was printed after the kill decision was answered too.
	for lines.Scan() {
		seq, err := strconv.ParseInt(lines.Text(), 10, 64)
		if err == nil {
			answered = append(answered, seq)
		}
	}
	_ = cmd.Wait()
	require.GreaterOrEqual(t, len(answered), 2000, "the writer stopped early")

	// Summaries written with their steps: the journal's steps are in the rows too.
	db, err := Open(context.Background(), path, Options{SummaryDelay: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var check string
	require.NoError(t, db.Reader().QueryRow("PRAGMA integrity_check").Scan(&check))
	require.Equal(t, "ok", check)
	for _, seq := range answered {
		_, err := db.Step(context.Background(), seq)
		require.NoError(t, err, "answered step %d lost", seq)
	}
	rows := storedRows(t, db) // as the start left them, before anything was owed again
	require.NotEmpty(t, rows)
	for id, row := range rows {
		var steps []*record.StepRecord
		for after := int64(0); ; {
			page, err := db.Steps(context.Background(), record.StepQuery{SessionID: id, After: after, Limit: 1000})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			for i := range page {
				steps = append(steps, &page[i])
			}
			after = page[len(page)-1].Seq
		}
		require.Equal(t, summaryOf(steps), row, "session %s", id)
	}
}
