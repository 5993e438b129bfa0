package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

// BenchmarkSearch times searches over a large database: VIGIL_BENCH_STEPS steps (default
// 1,000,000) in 10,000 sessions of 20 agents, with message-like text drawn from 200 words,
// 10 tools, 2 % denied and 0.5 % held. Building it takes minutes; VIGIL_BENCH_DB names a
// file to keep it in between runs.
//
//	go test -run='^$' -bench=Search -benchtime=200x ./storage/sqlite/
func BenchmarkSearch(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("VIGIL_BENCH_STEPS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	path := os.Getenv("VIGIL_BENCH_DB")
	if path == "" {
		path = filepath.Join(b.TempDir(), "vigil.db")
	}
	ctx := context.Background()
	db, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(b, err)
	defer db.Close()
	var have int
	require.NoError(b, db.Reader().QueryRow(`SELECT count(*) FROM steps`).Scan(&have))
	start := time.Now()
	if have < n {
		fillSearchBench(b, db, n-have)
	}
	require.NoError(b, db.IndexComplete(ctx))
	// As the indexer leaves the index once the guardian has been idle for a moment (under
	// sustained load, searches by word read more segments: about 20 % slower).
	for {
		did, err := db.mergeIndex(ctx)
		require.NoError(b, err)
		if !did {
			break
		}
	}
	b.Logf("%d steps; built what was missing, and its index, in %s", n, time.Since(start).Round(time.Second))
	// A word that occurs in a few hundred steps, one in most, and filters alone.
	var rare string
	require.NoError(b, db.Reader().QueryRow(`SELECT tool FROM steps WHERE decision = 'deny' LIMIT 1`).Scan(&rare))
	for _, q := range []struct {
		name string
		q    record.SearchQuery
	}{
		{"common word", record.SearchQuery{Text: "invoice"}},
		{"two words", record.SearchQuery{Text: "refund invoice"}},
		{"rare word", record.SearchQuery{Text: "word7777"}},
		{"phrase", record.SearchQuery{Text: `"monthly report"`}},
		{"prefix", record.SearchQuery{Text: "refu*"}},
		{"decision deny", record.SearchQuery{Decision: "deny"}},
		{"held", record.SearchQuery{Decision: "held"}},
		{"word and agent and decision", record.SearchQuery{Text: "invoice", Agent: "agent-7", Decision: "deny"}},
		{"session prefix", record.SearchQuery{Session: "sess-123"}},
		{"tool", record.SearchQuery{Tool: rare}},
		{"time range (last hour of a day)", record.SearchQuery{From: t0.Add(23 * time.Hour), To: t0.Add(24 * time.Hour)}},
		{"no match", record.SearchQuery{Text: "zebra unicorn"}},
		{"page 10", record.SearchQuery{Text: "invoice", Before: int64(n) / 2}},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := db.Search(ctx, q.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillSearchBench adds n steps in batches, as bulkSteps does, with varied content.
func fillSearchBench(b *testing.B, db *DB, n int) {
	const batch = 50_000
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		require.NoError(b, db.Exec(context.Background(), func(tx *sql.Tx) error {
			var last int64
			if err := tx.QueryRow(`SELECT coalesce(max(seq), 0) FROM events`).Scan(&last); err != nil {
				return err
			}
			if _, err := tx.Exec(`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?)
				INSERT INTO events (type, session_id, at)
				SELECT 'step', 'sess-' || ((? + i) / 100), ? + (? + i) * 86400000000 / ? FROM k`,
				k, done, t0.UnixNano(), done, max(n, 1)); err != nil {
				return err
			}
			_, err := tx.Exec(`WITH w(ws) AS (SELECT json_array('invoice','refund','monthly','report',
				'payroll','customer','order','status','shipping','address','password','reset','account',
				'billing','upgrade','ticket','transfer','amount','weather','calendar','meeting','notes',
				'summary','search','policy','holiday','travel','expense','receipt','contract'))
				INSERT INTO steps (seq, session_id, method, kind, agent_id, agent_name, user_id, tool,
					decision, held, received_at, request, response, matched_rules, text)
				SELECT seq, session_id, 'steps/toolCallRequest', 'toolCall',
					'agent-' || (seq % 20), 'Agent ' || (seq % 20), 'user-' || (seq % 500),
					'tool_' || (seq % 10),
					CASE WHEN seq % 50 = 0 THEN 'deny' ELSE 'allow' END, seq % 200 = 0, at, '{}', 'null',
					CASE WHEN seq % 50 = 0 THEN '[{"ruleId":"r-deny","action":"deny","mode":"enforce","reasonCode":"NO"}]' ELSE '[]' END,
					'q=' || (SELECT ws ->> (seq % 30) FROM w) || ' ' || (SELECT ws ->> ((seq / 7) % 30) FROM w)
						|| ' word' || (seq % 10000) || ' please ' || (SELECT ws ->> ((seq / 13) % 30) FROM w)
						|| ' the monthly report for the customer account and the refund status of the order'
				FROM events WHERE seq > ? ORDER BY seq`, last)
			return err
		}))
	}
}
