package webhooks

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/vigil-guardian/vigil/record"
)

// Payload is the body of a json-format delivery. It carries no step content (request,
// arguments, edited params): a receiver follows URL to the console for that, where the
// operator's own access applies.
type Payload struct {
	// ID is unique per event in one Vigil database ("evt_" and the event's seq): a receiver
	// can drop a retried delivery it already has.
	ID   string    `json:"id"`
	Type string    `json:"type"`
	At   time.Time `json:"at"`
	// URL opens the hold (or the denied step) in the console.
	URL  string    `json:"url,omitempty"`
	Hold *HoldInfo `json:"hold,omitempty"`
	Step *StepInfo `json:"step,omitempty"`
}

// HoldInfo is a hold without its content.
type HoldInfo struct {
	ID        string    `json:"id"`
	SessionID string    `json:"sessionId"`
	AgentID   string    `json:"agentId,omitempty"`
	Method    string    `json:"method"`
	Kind      string    `json:"kind"`
	Tool      string    `json:"tool,omitempty"`
	RuleID    string    `json:"ruleId,omitempty"`
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	Deadline  time.Time `json:"deadline"`
	OnTimeout string    `json:"onTimeout,omitempty"`
	// Status is pending for hold.created, the final status for hold.resolved.
	Status    string    `json:"status"`
	Decision  string    `json:"decision,omitempty"`
	DecidedBy string    `json:"decidedBy,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	Note      string    `json:"note,omitempty"`
}

// StepInfo is a stored step without its content.
type StepInfo struct {
	Seq         int64     `json:"seq"`
	SessionID   string    `json:"sessionId"`
	TurnID      string    `json:"turnId,omitempty"`
	StepID      string    `json:"stepId,omitempty"`
	Method      string    `json:"method"`
	Kind        string    `json:"kind"`
	Tool        string    `json:"tool,omitempty"`
	AgentID     string    `json:"agentId,omitempty"`
	AgentName   string    `json:"agentName,omitempty"`
	Decision    string    `json:"decision"`
	Held        bool      `json:"held,omitempty"`
	ReceivedAt  time.Time `json:"receivedAt"`
	RuleID      string    `json:"ruleId,omitempty"`
	ReasonCodes []string  `json:"reasonCodes,omitempty"`
	Message     string    `json:"message,omitempty"`
}

// answer is the part of a stored AOS response a notice reports.
type answer struct {
	Result struct {
		ReasonCode []string `json:"reasonCode"`
		Message    string   `json:"message"`
		Data       struct {
			RuleID string `json:"ruleId"`
		} `json:"data"`
	} `json:"result"`
}

func stepInfo(rec *record.StepRecord) *StepInfo {
	s := &StepInfo{
		Seq: rec.Seq, SessionID: rec.SessionID, TurnID: rec.TurnID, StepID: rec.StepID,
		Method: rec.Method, Kind: rec.Kind, Tool: rec.Tool, AgentID: rec.AgentID, AgentName: rec.AgentName,
		Decision: rec.Decision, Held: rec.Held, ReceivedAt: rec.ReceivedAt,
	}
	var a answer
	if json.Unmarshal(rec.Response, &a) == nil {
		s.RuleID, s.ReasonCodes, s.Message = a.Result.Data.RuleID, a.Result.ReasonCode, a.Result.Message
	}
	return s
}

func holdInfo(h *record.Hold) *HoldInfo {
	return &HoldInfo{
		ID: h.ID, SessionID: h.SessionID, AgentID: h.AgentID, Method: h.Method, Kind: h.Kind, Tool: h.Tool,
		RuleID: h.RuleID, Message: h.Message, CreatedAt: h.CreatedAt, Deadline: h.Deadline, OnTimeout: h.OnTimeout,
		Status: h.Status, Decision: h.Decision, DecidedBy: h.DecidedBy, DecidedAt: h.DecidedAt, Note: h.Note,
	}
}

// HoldURL is the console's deep link to a hold.
func HoldURL(publicURL, holdID string) string {
	return publicURL + "/#/held?hold=" + url.QueryEscape(holdID)
}

// StepURL is the console's deep link to a step in its session.
func StepURL(publicURL, sessionID string, seq int64) string {
	return fmt.Sprintf("%s/#/session/%s?step=%d", publicURL, url.PathEscape(sessionID), seq)
}

// Slack limits: a header's text, a section's text; and the length a field's value is
// shortened to (Slack takes 2000, a field is a short fact).
const (
	slackHeaderMax  = 150
	slackSectionMax = 3000
	slackFieldMax   = 200
)

// holdOutcomes are a resolved hold's statuses in words, for a message's title.
var holdOutcomes = map[string]string{
	record.HoldApproved:    "approved",
	record.HoldDenied:      "denied",
	record.HoldModified:    "modified",
	record.HoldTimedOut:    "timed out",
	record.HoldAbandoned:   "abandoned",
	record.HoldInterrupted: "interrupted",
}

func holdOutcome(status string) string {
	if w, ok := holdOutcomes[status]; ok {
		return w
	}
	return status
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []any       `json:"elements,omitempty"`
}

// SlackMessage is the body of a slack-format delivery: Block Kit blocks, and text as the
// notification's fallback (Slack, Mattermost and others that accept Slack's format).
type SlackMessage struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackButton struct {
	Type  string    `json:"type"`
	Text  slackText `json:"text"`
	URL   string    `json:"url"`
	Style string    `json:"style,omitempty"`
}

// slackMessage renders p for Slack.
func slackMessage(p *Payload) SlackMessage {
	var title, button string
	var fields []slackText
	var detail string
	field := func(name, value string) {
		if value != "" {
			fields = append(fields, slackText{Type: "mrkdwn", Text: "*" + name + "*\n" + slackEscapeClip(value, slackFieldMax)})
		}
	}
	switch {
	case p.Hold != nil:
		h := p.Hold
		what := cmpOr(h.Tool, h.Method)
		switch p.Type {
		case EventHoldCreated:
			title = "Held for review: " + what
			button = "Review in Vigil"
		default:
			title = "Hold " + holdOutcome(h.Status) + ": " + what
			button = "Open in Vigil"
		}
		field("Session", h.SessionID)
		field("Agent", h.AgentID)
		field("Rule", h.RuleID)
		if p.Type == EventHoldCreated {
			field("Deadline", h.Deadline.UTC().Format(time.RFC3339)+" (then "+cmpOr(h.OnTimeout, "deny")+")")
		} else {
			field("Decided by", h.DecidedBy)
			field("Answer", h.Decision)
		}
		detail = h.Message
		if h.Note != "" {
			detail += "\nNote: " + h.Note
		}
	case p.Step != nil:
		s := p.Step
		title = "Denied: " + cmpOr(s.Tool, s.Method)
		button = "Open in Vigil"
		field("Session", s.SessionID)
		field("Agent", cmpOr(s.AgentName, s.AgentID))
		field("Rule", s.RuleID)
		field("Reason", strings.Join(s.ReasonCodes, ", "))
		detail = s.Message
	}
	m := SlackMessage{
		// The fallback text is mrkdwn, the header plain text: only the first is escaped.
		Text:   "Vigil: " + slackEscapeClip(title, slackHeaderMax),
		Blocks: []slackBlock{{Type: "header", Text: &slackText{Type: "plain_text", Text: clip(title, slackHeaderMax)}}},
	}
	if detail != "" {
		m.Blocks = append(m.Blocks, slackBlock{Type: "section", Text: &slackText{Type: "mrkdwn", Text: slackEscapeClip(detail, slackSectionMax)}})
	}
	if len(fields) > 0 {
		m.Blocks = append(m.Blocks, slackBlock{Type: "section", Fields: fields})
	}
	if p.URL != "" {
		m.Blocks = append(m.Blocks, slackBlock{Type: "actions", Elements: []any{slackButton{
			Type: "button", Text: slackText{Type: "plain_text", Text: button}, URL: p.URL, Style: "primary",
		}}})
	}
	return m
}

// slackEntity is what r becomes in Slack's mrkdwn: &, < and > as entities, the rest as it is.
func slackEntity(r rune) string {
	switch r {
	case '&':
		return "&amp;"
	case '<':
		return "&lt;"
	case '>':
		return "&gt;"
	}
	return string(r)
}

// slackEscapeClip escapes the three characters Slack's mrkdwn gives meaning to and shortens the result to at most n
// characters, marking the cut. The cut is measured after escaping, since Slack's limits
// apply to the text it receives (an "&" is five characters of it), and falls between
// whole entities.
func slackEscapeClip(s string, n int) string { return clipPieces(s, n, slackEntity) }

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	return clipPieces(s, n, func(r rune) string { return string(r) })
}

// clipPieces joins what each rune of s becomes (piece) and, when that is longer than n
// characters, keeps the whole pieces that fit before a closing "…". Characters are counted
// in UTF-16 units, which is never fewer than runes, so the text fits whichever of the two
// Slack counts.
func clipPieces(s string, n int, piece func(rune) string) string {
	var b strings.Builder
	used, cut := 0, -1 // cut: b's length at the last piece that leaves room for the "…"
	for _, r := range s {
		p := piece(r)
		if cut < 0 && used+utf16Len(p) > n-1 {
			cut = b.Len()
		}
		if used += utf16Len(p); used > n {
			return b.String()[:cut] + "…"
		}
		b.WriteString(p)
	}
	return b.String()
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
