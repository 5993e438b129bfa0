package postgres

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	unorm "golang.org/x/text/unicode/norm"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Search is full-text search in a tsvector column written with each step (so the index
// never lags: IndexLag is always 0). The guardian splits and folds the words itself
// (foldWords) for both the documents and the queries, so matching does not depend on the
// server's text search configuration, locale or extensions: words match whole words, case
// and accents folded; a word ending in * matches as a beginning (at least 3 characters);
// "quoted words" match as a phrase. Session, agent and user match ids from their start
// (separators - _ . : @ / ignored), tool and decision exactly, rule a matched rule's id or
// reason code.

// indexTextBytes is how much of a step's text is searchable, as in the SQLite backend.
const indexTextBytes = 8192

// minPrefix is the shortest word a * or an id filter matches as a beginning.
const minPrefix = 3

// searchDoc is the text whose words a step is found by.
func searchDoc(rec *record.StepRecord) string {
	var b strings.Builder
	add := func(s string) {
		for _, w := range foldWords(s) {
			b.WriteString(w)
			b.WriteByte(' ')
		}
	}
	for _, id := range []string{rec.SessionID, rec.AgentID, rec.UserID, rec.Tool} {
		add(storage.SquashID(id))
		add(id)
	}
	add(rec.AgentName)
	add(rec.Decision)
	if rec.Held {
		add("held")
	}
	for _, m := range rec.MatchedRules {
		add(m.RuleID)
		add(m.ReasonCode)
	}
	add(record.CutText(rec.Text, indexTextBytes))
	return b.String()
}

// foldWords splits s into words (runs of letters and digits), lower-cased and without
// accents.
func foldWords(s string) []string {
	words := strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
	for i, w := range words {
		words[i] = fold(w)
	}
	return words
}

func fold(w string) string {
	if isASCII(w) {
		return strings.ToLower(w)
	}
	var b strings.Builder
	for _, r := range unorm.NFD.String(w) {
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return unorm.NFC.String(b.String())
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// tsQuery turns the free text of a search into a tsquery (to_tsquery syntax) and the
// words a snippet is centred on.
func tsQuery(text string) (string, []string, error) {
	phrases := storage.SplitQuery(text)
	if len(phrases) > record.MaxSearchTerms {
		return "", nil, fmt.Errorf("%w: q: at most %d words", record.ErrBadQuery, record.MaxSearchTerms)
	}
	var parts, words []string
	for _, p := range phrases {
		ws := foldWords(p.Text)
		if len(ws) == 0 {
			continue
		}
		star := !p.Quoted && strings.HasSuffix(p.Text, "*") && utf8.RuneCountInString(ws[len(ws)-1]) >= minPrefix
		for i, w := range ws {
			ws[i] = "'" + w + "'" // letters and digits only: nothing to escape
		}
		if star {
			ws[len(ws)-1] += ":*"
		}
		parts = append(parts, "("+strings.Join(ws, " <-> ")+")")
		words = append(words, strings.TrimRight(p.Text, "*"))
	}
	if len(phrases) > 0 && len(parts) == 0 {
		return "", nil, fmt.Errorf("%w: %s", record.ErrBadQuery, storage.NoSearchWord)
	}
	return strings.Join(parts, " & "), words, nil
}

// tokensSQL is the words of the columns, each column also squashed (squashID), lower-cased,
// separated and surrounded by single spaces: what LIKE '% word %' finds whole words in.
func tokensSQL(cols ...string) string {
	parts := []string{"' '"}
	for _, c := range cols {
		c = "coalesce(" + c + ", '')"
		parts = append(parts,
			"lower(translate("+c+", '"+storage.IDSeparators+"', ''))", "' '",
			"trim(regexp_replace(lower("+c+"), '[^[:alnum:]]+', ' ', 'g'))", "' '")
	}
	return "(" + strings.Join(parts, " || ") + ")"
}

// Search finds steps matching q, newest first, a page at a time.
func (db *DB) Search(ctx context.Context, q record.SearchQuery) (_ record.SearchPage, err error) {
	ctx, done := db.boundSlow(ctx)
	defer done(&err)
	for _, f := range []struct{ name, v string }{
		{"q", q.Text}, {"session", q.Session}, {"agent", q.Agent}, {"user", q.User},
		{"tool", q.Tool}, {"decision", q.Decision}, {"rule", q.Rule},
	} {
		if len(f.v) > record.MaxSearchBytes {
			return record.SearchPage{}, fmt.Errorf("%w: %s: at most %d bytes", record.ErrBadQuery, f.name, record.MaxSearchBytes)
		}
		if !utf8.ValidString(f.v) {
			return record.SearchPage{}, fmt.Errorf("%w: %s: not valid UTF-8", record.ErrBadQuery, f.name)
		}
	}
	tsq, words, err := tsQuery(q.Text)
	if err != nil {
		return record.SearchPage{}, err
	}
	limit := storage.ClampLimit(q.Limit, 50, 200)
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if tsq != "" {
		where = append(where, "s.search @@ to_tsquery('simple', "+arg(tsq)+")")
	}
	// Ids match as the SQLite index matches them: the query's words (separators squashed)
	// as a phrase of the id's words, or of the id squashed; the last word as a beginning
	// when it has at least minPrefix characters. A filter without a word is compared with
	// the columns instead (storage.WordlessID): dropped, it would widen the search to every
	// step.
	idFilter := func(v string, cols ...string) {
		words := foldWords(storage.SquashID(v))
		if len(words) == 0 {
			if m, ok := storage.WordlessID(v, minPrefix); ok {
				where = append(where, wordlessID(m, arg, cols...))
			}
			return
		}
		phrase := strings.Join(words, " ")
		pat := "% " + storage.EscapeLike(phrase) + " %"
		if utf8.RuneCountInString(words[len(words)-1]) >= minPrefix {
			pat = "% " + storage.EscapeLike(phrase) + "%"
		}
		where = append(where, tokensSQL(cols...)+" LIKE "+arg(pat))
	}
	idFilter(q.Session, "s.session_id")
	idFilter(q.Agent, "s.agent_id", "s.agent_name")
	idFilter(q.User, "s.user_id")
	if q.Before > 0 {
		where = append(where, "s.seq < "+arg(q.Before))
	}
	if q.Tool != "" {
		where = append(where, "s.tool = "+arg(q.Tool))
	}
	switch q.Decision {
	case "":
	case "held":
		where = append(where, "s.held")
	default:
		where = append(where, "s.decision = "+arg(q.Decision))
	}
	if words := foldWords(q.Rule); len(words) > 0 {
		// The words as a phrase of a matched rule's id or reason code.
		p := arg("% " + storage.EscapeLike(strings.Join(words, " ")) + " %")
		where = append(where, `EXISTS (SELECT 1 FROM jsonb_array_elements(s.matched_rules::jsonb) AS m
			WHERE `+tokensSQL("m ->> 'ruleId'", "m ->> 'reasonCode'")+` LIKE `+p+`)`)
	} else if q.Rule != "" {
		// No word to look for: a matched rule's id or reason code must be the filter.
		p := arg(q.Rule)
		where = append(where, `EXISTS (SELECT 1 FROM jsonb_array_elements(s.matched_rules::jsonb) AS m
			WHERE m ->> 'ruleId' = `+p+` OR m ->> 'reasonCode' = `+p+`)`)
	}
	if !q.From.IsZero() {
		where = append(where, "s.received_at >= "+arg(q.From.UnixNano()))
	}
	if !q.To.IsZero() {
		where = append(where, "s.received_at < "+arg(q.To.UnixNano()))
	}
	query := `SELECT s.seq, s.session_id, s.turn_id, s.step_id, s.method, s.kind, s.agent_id,
		s.agent_name, s.user_id, s.tool, s.decision, s.held, s.received_at, left(s.text, 65536)
		FROM steps s`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY s.seq DESC LIMIT " + arg(limit+1)
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return record.SearchPage{}, fmt.Errorf("storage: search: %w", err)
	}
	defer rows.Close()
	page, err := storage.ScanSearchPage(rows, limit, words)
	if err != nil {
		return record.SearchPage{}, fmt.Errorf("storage: search: %w", err)
	}
	return page, nil
}

// wordlessID is the condition that one of cols matches m; arg adds a parameter and returns
// its placeholder.
func wordlessID(m storage.IDMatch, arg func(any) string, cols ...string) string {
	var or []string
	for _, c := range cols {
		if m.Squashed {
			c = "translate(" + c + ", '" + storage.IDSeparators + "', '')"
		}
		if m.Prefix {
			or = append(or, c+" LIKE "+arg(storage.EscapeLike(m.Value)+"%"))
		} else {
			or = append(or, c+" = "+arg(m.Value))
		}
	}
	return "(" + strings.Join(or, " OR ") + ")"
}
