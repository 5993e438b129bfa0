package storage

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Scanner is a row of a query: *sql.Row, *sql.Rows and pgx.Row all are. The Scan functions
// below read the rows both backends select with the same columns in the same order (each
// backend's sessionColumns, userColumns, apiKeyColumns and its rules' columns), so that a
// record reads back the same from either.
type Scanner interface{ Scan(dest ...any) error }

// TimeFromNanos is a stored time: nanoseconds since the epoch, 0 for none (the zero time).
func TimeFromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// ScanSession reads a session summary: id, agent id and name, user, first and last seen,
// last seq, steps, last method, control, decisions (JSON text), key id, client and server
// name and version, pending holds.
func ScanSession(sc Scanner) (record.Session, error) {
	var (
		s                   record.Session
		firstSeen, lastSeen int64
		decisions           string
		client, server      record.Peer
	)
	if err := sc.Scan(&s.ID, &s.AgentID, &s.AgentName, &s.UserID, &firstSeen, &lastSeen,
		&s.LastSeq, &s.Steps, &s.LastMethod, &s.Control, &decisions, &s.KeyID,
		&client.Name, &client.Version, &server.Name, &server.Version, &s.PendingHolds); err != nil {
		return record.Session{}, err
	}
	// A peer is known by its name: a session no step named one has none.
	if client.Name != "" {
		s.Client = &client
	}
	if server.Name != "" {
		s.Server = &server
	}
	s.FirstSeen = time.Unix(0, firstSeen).UTC()
	s.LastSeen = time.Unix(0, lastSeen).UTC()
	s.Decisions = map[string]int64{}
	if err := json.Unmarshal([]byte(decisions), &s.Decisions); err != nil {
		return record.Session{}, fmt.Errorf("decode decisions of session %q: %w", s.ID, err)
	}
	return s, nil
}

// ScanUser reads an operator account: name, role, password hash, created, updated.
func ScanUser(sc Scanner) (record.User, error) {
	var (
		u                record.User
		hash             string
		created, updated int64
	)
	if err := sc.Scan(&u.Name, &u.Role, &hash, &created, &updated); err != nil {
		return record.User{}, err
	}
	u.PasswordHash = []byte(hash)
	u.CreatedAt, u.UpdatedAt = TimeFromNanos(created), TimeFromNanos(updated)
	return u, nil
}

// ScanAPIKey reads an agent key: id, name, agent id, hash, prefix, created, created by,
// expires, revoked, last used.
func ScanAPIKey(sc Scanner) (record.APIKey, error) {
	var (
		k                                  record.APIKey
		created, expires, revoked, lastUse int64
	)
	if err := sc.Scan(&k.ID, &k.Name, &k.AgentID, &k.Hash, &k.Prefix, &created, &k.CreatedBy,
		&expires, &revoked, &lastUse); err != nil {
		return record.APIKey{}, err
	}
	k.CreatedAt, k.ExpiresAt = TimeFromNanos(created), TimeFromNanos(expires)
	k.RevokedAt, k.LastUsedAt = TimeFromNanos(revoked), TimeFromNanos(lastUse)
	return k, nil
}

// ScanRule reads a current rule: id, version, the rule's JSON, updated. The columns win
// over the JSON copy.
func ScanRule(sc Scanner) (rules.Rule, error) {
	var (
		id        string
		version   int
		js        string
		updatedAt int64
	)
	if err := sc.Scan(&id, &version, &js, &updatedAt); err != nil {
		return rules.Rule{}, err
	}
	var r rules.Rule
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		return rules.Rule{}, fmt.Errorf("decode rule %q: %w", id, err)
	}
	r.ID, r.Version, r.UpdatedAt = id, version, time.Unix(0, updatedAt).UTC()
	return r, nil
}

// ScanRuleVersion reads a saved version of rule id: version, the rule's JSON, saved,
// operator, operation.
func ScanRuleVersion(sc Scanner, id string) (record.RuleVersion, error) {
	var (
		v       record.RuleVersion
		js      string
		savedAt int64
	)
	if err := sc.Scan(&v.Version, &js, &savedAt, &v.Operator, &v.Op); err != nil {
		return record.RuleVersion{}, err
	}
	if err := json.Unmarshal([]byte(js), &v.Rule); err != nil {
		return record.RuleVersion{}, fmt.Errorf("decode rule %q version %d: %w", id, v.Version, err)
	}
	v.RuleID, v.SavedAt = id, time.Unix(0, savedAt).UTC()
	v.Rule.ID, v.Rule.Version, v.Rule.UpdatedAt = id, v.Version, v.SavedAt
	return v, nil
}

// Rows are a query's rows: *sql.Rows and pgx.Rows both are.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Collect appends to dst each of rows as scan reads it, and returns dst with rows.Err: the
// loop of every list both backends read with one of the Scan functions. The caller closes
// rows.
func Collect[T any](rows Rows, dst []T, scan func(Scanner) (T, error)) ([]T, error) {
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		dst = append(dst, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return dst, nil
}

// ScanSearchPage reads a step search's rows, newest first, into a page of at most limit
// hits with their snippets around terms; the query asks for limit+1 rows, the last of which
// only says there is a next page. The columns are seq, session id, turn id, step id,
// method, kind, agent id and name, user, tool, decision, held, received at (nanoseconds)
// and the text to take the snippet from.
func ScanSearchPage(rows Rows, limit int, terms []string) (record.SearchPage, error) {
	page := record.SearchPage{Steps: []record.SearchHit{}}
	for rows.Next() {
		var (
			h    record.SearchHit
			at   int64
			text string
		)
		if err := rows.Scan(&h.Seq, &h.SessionID, &h.TurnID, &h.StepID, &h.Method, &h.Kind, &h.AgentID,
			&h.AgentName, &h.UserID, &h.Tool, &h.Decision, &h.Held, &at, &text); err != nil {
			return record.SearchPage{}, err
		}
		if len(page.Steps) == limit {
			next := page.Steps[limit-1].Seq
			page.Next = &next
			break
		}
		h.ReceivedAt = time.Unix(0, at).UTC()
		h.Snippet = Snippet(text, terms)
		page.Steps = append(page.Steps, h)
	}
	if err := rows.Err(); err != nil {
		return record.SearchPage{}, err
	}
	return page, nil
}

// MinuteWindow is the stats' per-minute window at now: the last record.StatsMinutes
// minutes, the current one last, each with its Minute set and no counts.
func MinuteWindow(now time.Time) []record.MinuteStats {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute) // end of the current minute
	start := end.Add(-record.StatsMinutes * time.Minute)
	out := make([]record.MinuteStats, record.StatsMinutes)
	for i := range out {
		out[i].Minute = start.Add(time.Duration(i) * time.Minute)
	}
	return out
}

// CountMinutes adds rows of (minute index in out, outcome, count) into out, ignoring
// minutes outside it.
func CountMinutes(rows Rows, out []record.MinuteStats) error {
	for rows.Next() {
		var (
			m       int
			outcome string
			n       int64
		)
		if err := rows.Scan(&m, &outcome, &n); err != nil {
			return err
		}
		if m < 0 || m >= len(out) {
			continue
		}
		out[m].Add(outcome, n)
	}
	return rows.Err()
}
