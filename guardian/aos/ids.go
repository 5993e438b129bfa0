package aos

import (
	"strings"
	"unicode/utf8"
)

// Ids of AOS steps (context.session.id, agent.id, turnId, stepId, toolId, user.id and the
// agent's name) are checked while decoding (decoder.id). MCP and A2A messages are decoded
// generically, so the ids the guardian takes from them (the MCP _meta.sessionId, the A2A
// contextId, the MCP tool name) are checked here, after decoding, against the same limits.

// idSource is where an id taken from a protocol message sits: its JSON path for errors,
// and the JSON object it is found in with the member names leading to it, to read the
// string again as received.
type idSource struct {
	field string
	buf   []byte
	keys  []string
}

// SessionField is the JSON path of the member SessionHint reads: "params.context.session.id",
// the path of an A2A contextId or of an MCP _meta.sessionId; "" when the step names no
// session.
func (s *Step) SessionField() string {
	if s.sessionField != "" {
		return s.sessionField
	}
	if s.Context != nil && s.Context.Session.ID != "" {
		return contextSessionField
	}
	if s.MCP != nil {
		if _, which := s.MCP.sessionMeta(); which >= 0 {
			return s.MCP.sessionSource(which, s.Params).field
		}
	}
	if s.A2A != nil && s.A2A.ContextID != "" {
		return "params.contextId"
	}
	return ""
}

const contextSessionField = "params.context.session.id"

// messageField is the path of the MCP message: params.message, or params itself inline.
func (p *MCPParams) messageField() string {
	if p.Inline {
		return "params"
	}
	return "params.message"
}

// sessionMeta returns the session id SessionHint takes from an MCP step and which _meta
// holds it: 0 the message's params, 1 its result, 2 the AOS params; -1 for none.
func (p *MCPParams) sessionMeta() (string, int) {
	for i, meta := range [...]any{p.Params["_meta"], p.Result["_meta"], p.Meta} {
		if meta, ok := meta.(map[string]any); ok {
			if id, ok := meta["sessionId"].(string); ok && id != "" {
				return id, i
			}
		}
	}
	return "", -1
}

// sessionSource locates the _meta.sessionId that sessionMeta numbered which; params are
// the AOS params as received.
func (p *MCPParams) sessionSource(which int, params []byte) idSource {
	switch which {
	case 0:
		return idSource{p.messageField() + ".params._meta.sessionId", p.Message, []string{"params", "_meta", "sessionId"}}
	case 1:
		return idSource{p.messageField() + ".result._meta.sessionId", p.Message, []string{"result", "_meta", "sessionId"}}
	case 2:
		return idSource{"params._meta.sessionId", params, []string{"_meta", "sessionId"}}
	}
	return idSource{}
}

// checkProtocolIDs checks the session id and tool name ParseStep read from an MCP or A2A
// message, and records the session id's path.
func (s *Step) checkProtocolIDs(a2aContext gpath) *Error {
	switch {
	case s.MCP != nil:
		m := s.MCP
		if id, which := m.sessionMeta(); which >= 0 {
			src := m.sessionSource(which, s.Params)
			if err := checkID(id, src); err != nil {
				return err
			}
			s.sessionField = src.field
		}
		if m.ToolName != "" {
			src := idSource{m.messageField() + ".params.name", m.Message, []string{"params", "name"}}
			if err := checkID(m.ToolName, src); err != nil {
				return err
			}
		}
	case s.A2A != nil && s.A2A.ContextID != "":
		src := idSource{a2aContext.s, s.A2A.Message, a2aContext.keys}
		if err := checkID(s.A2A.ContextID, src); err != nil {
			return err
		}
		s.sessionField = src.field
	}
	return nil
}

// checkID applies the limits of decoder.id to an id decoded generically. Only an id that
// holds U+FFFD can have been repaired, so only such an id is read again as received.
func checkID(id string, src idSource) *Error {
	if len(id) > MaxIDBytes {
		return fieldError(CodeInvalidParams, src.field, idTooLong(len(id)))
	}
	if strings.Contains(id, "\uFFFD") {
		if raw, ok := stringAt(src.buf, src.keys); ok && !exactText(raw) {
			return fieldError(CodeInvalidParams, src.field, idNotUTF8)
		}
	}
	return nil
}

// stringAt returns the contents (between the quotes) of the string at the member path keys
// in buf, a JSON object that passed skip; ok is false when there is no such string. A
// repeated member counts as its last occurrence, as it does when decoding.
func stringAt(buf []byte, keys []string) ([]byte, bool) {
	d := decoder{buf: buf, noLimits: true}
	for _, k := range keys {
		if d.cur() != '{' {
			return nil, false
		}
		d.pos++
		d.push(false)
		at := -1
		for {
			key, ok := d.nextKey()
			if !ok {
				break
			}
			if string(key) == k {
				d.ws()
				at = d.pos
			}
			d.skip()
		}
		if d.err != nil || at < 0 {
			return nil, false
		}
		d.pos = at
	}
	if d.cur() != '"' {
		return nil, false
	}
	start, end, _, ok := d.scanString()
	if !ok {
		return nil, false
	}
	return buf[start:end], true
}

// CheckID returns why s cannot be an id (longer than MaxIDBytes, or not valid UTF-8), or
// "" when it can. It is for ids that arrive outside a JSON body, such as a header.
func CheckID(s string) string {
	if len(s) > MaxIDBytes {
		return idTooLong(len(s))
	}
	if !utf8.ValidString(s) {
		return idNotUTF8
	}
	return ""
}

// CheckSessionID is CheckID for a session id, which also may not be empty, "." or ".."
// (see ParseStep).
func CheckSessionID(s string) string {
	switch s {
	case "":
		return sessionEmpty
	case ".", "..":
		return sessionDots
	}
	return CheckID(s)
}
