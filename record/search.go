package record

import (
	"errors"
	"time"
)

// SearchQuery finds steps by content and attributes. Every set field must match.
type SearchQuery struct {
	// Text is free text: words match whole words of the step (case and accents folded); a
	// word ending in * matches as a beginning (refu* finds refund); "quoted words" match as
	// a phrase. It looks in the text, tool, session, agent, user, decision and matched rules.
	Text string
	// Session, Agent and User match ids from their start ("sess-4" finds "sess-42").
	Session, Agent, User string
	// Tool and Decision match exactly; Decision "held" matches every held step.
	Tool, Decision string
	// Rule matches a matched rule's id or reason code.
	Rule string
	// From and To bound the received time (To excluded); zero leaves that side open.
	From, To time.Time
	// Before keeps steps with a seq below it (the cursor of the previous page); 0: newest.
	Before int64
	// Limit is clamped to 1..200 (default 50).
	Limit int
}

// SearchHit is one step found: its summary, without request and response.
type SearchHit struct {
	Seq        int64     `json:"seq"`
	SessionID  string    `json:"sessionId"`
	TurnID     string    `json:"turnId"`
	StepID     string    `json:"stepId"`
	Method     string    `json:"method"`
	Kind       string    `json:"kind"`
	AgentID    string    `json:"agentId"`
	AgentName  string    `json:"agentName"`
	UserID     string    `json:"userId"`
	Tool       string    `json:"tool"`
	Decision   string    `json:"decision"`
	Held       bool      `json:"held"`
	ReceivedAt time.Time `json:"receivedAt"`
	// Snippet is the part of the step's text around the first word of the query (or its
	// start), at most snippetBytes.
	Snippet string `json:"snippet"`
}

// SearchPage is one page of hits, newest first; Next is the Before of the following page,
// nil after the last.
type SearchPage struct {
	Steps []SearchHit `json:"steps"`
	Next  *int64      `json:"next"`
	// IndexLag counts the newest stored steps not indexed yet, which only an empty query
	// (every step, newest first) finds: the index trails the steps by about a second, more
	// under heavy load.
	IndexLag int64 `json:"indexLag"`
}

// ErrBadQuery is returned for a search the index cannot answer as asked.
var ErrBadQuery = errors.New("storage: bad search query")

const (
	// MaxSearchBytes bounds the text and each filter of a search.
	MaxSearchBytes = 1024
	// MaxSearchTerms bounds the words and phrases of a search.
	MaxSearchTerms = 32
	// SnippetBytes bounds a hit's snippet.
	SnippetBytes = 240
)
