package record

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends rec as JSON, as encoding/json encodes it but without scanning Request
// and Response again (they must be JSON, as SaveStep leaves them): the live stream
// publishes every step, and this is several times faster. The output is byte for byte
// encoding/json's when Request and Response are compact and hold no <, > or &; otherwise
// the same JSON value with their whitespace and escapes as they are.
func (rec *StepRecord) AppendJSON(b []byte) []byte {
	return AppendStepFields(AppendStepPrefix(b, rec.Seq), rec)
}

// AppendStepFields appends rec's JSON without its opening brace and seq: the part the
// caller can encode before the journal assigns the seq; jrec.complete puts appendStepPrefix
// in front. The output is what encoding/json produces for StepRecord (same fields, order,
// omitempty and string escaping); Request and Response are copied as they are, since
// SaveStep has made sure they are JSON. Encoding by hand matters on the answer path:
// encoding/json re-scans and compacts both raw messages, which cost more than the rest.
func AppendStepFields(b []byte, rec *StepRecord) []byte {
	b, _, _ = AppendStepFieldsAt(b, rec)
	return b
}

// AppendStepFieldsAt is AppendStepFields that also says where in b rec.Request and
// rec.Response were copied (at request and response, for their lengths), so that a caller
// who keeps b can use those bytes instead of copying them again.
func AppendStepFieldsAt(b []byte, rec *StepRecord) (out []byte, request, response int) {
	b = append(b, `,"sessionId":`...)
	b = AppendJSONString(b, rec.SessionID)
	b = appendOptString(b, `,"turnId":`, rec.TurnID)
	b = appendOptString(b, `,"stepId":`, rec.StepID)
	b = append(b, `,"method":`...)
	b = AppendJSONString(b, rec.Method)
	b = append(b, `,"kind":`...)
	b = AppendJSONString(b, rec.Kind)
	b = appendOptString(b, `,"agentId":`, rec.AgentID)
	b = appendOptString(b, `,"agentName":`, rec.AgentName)
	b = appendOptString(b, `,"userId":`, rec.UserID)
	b = appendOptString(b, `,"keyId":`, rec.KeyID)
	b = appendPeer(b, `,"client":`, rec.Client)
	b = appendPeer(b, `,"server":`, rec.Server)
	b = appendOptString(b, `,"tool":`, rec.Tool)
	b = append(b, `,"decision":`...)
	b = AppendJSONString(b, rec.Decision)
	b = append(b, `,"receivedAt":"`...)
	b = rec.ReceivedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request":`...)
	request = len(b)
	b = appendRaw(b, rec.Request)
	b = append(b, `,"response":`...)
	response = len(b)
	b = appendRaw(b, rec.Response)
	b = append(b, `,"matchedRules":`...)
	if rec.MatchedRules == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range rec.MatchedRules {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"ruleId":`...)
			b = AppendJSONString(b, m.RuleID)
			b = append(b, `,"action":`...)
			b = AppendJSONString(b, m.Action)
			b = append(b, `,"mode":`...)
			b = AppendJSONString(b, m.Mode)
			b = appendOptString(b, `,"reasonCode":`, m.ReasonCode)
			b = appendOptString(b, `,"error":`, m.Error)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"latencyMicros":`...)
	b = strconv.AppendInt(b, rec.LatencyMicros, 10)
	b = appendOptString(b, `,"text":`, rec.Text)
	if rec.Held {
		b = append(b, `,"held":true`...)
	}
	if rec.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	return append(b, '}'), request, response
}

// TruncatedTextBytes is how much of a truncated step's text is kept: enough for a preview.
const TruncatedTextBytes = 4 << 10

// StepBulk is the size in bytes of a step's bulky fields, the ones Truncate leaves out.
func StepBulk(rec *StepRecord) int {
	return len(rec.Request) + len(rec.Response) + len(rec.Text)
}

// Truncate returns rec when its bulky fields (request, response, text) add up to at most
// maxBulk bytes, and otherwise a copy with request and response null, the text cut to its
// first TruncatedTextBytes (at a character boundary) and Truncated set. A frame of the
// live stream thus stays small whatever the agent sent; maxBulk <= 0 never truncates.
func (rec *StepRecord) Truncate(maxBulk int) *StepRecord {
	if maxBulk <= 0 || StepBulk(rec) <= maxBulk {
		return rec
	}
	cp := *rec
	cp.Request, cp.Response, cp.Truncated = nil, nil, true
	cp.Text = CutText(cp.Text, TruncatedTextBytes)
	return &cp
}

// CutText returns s's longest prefix of at most n bytes that does not split a character.
func CutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// AppendStepPrefix appends the start of a record, its opening brace and seq, which
// AppendStepFields continues.
func AppendStepPrefix(b []byte, seq int64) []byte {
	b = append(b, `{"seq":`...)
	return strconv.AppendInt(b, seq, 10)
}

// appendPeer appends key and p as encoding/json writes a *Peer, nothing for nil.
func appendPeer(b []byte, key string, p *Peer) []byte {
	if p == nil {
		return b
	}
	b = append(b, key...)
	b = append(b, `{"name":`...)
	b = AppendJSONString(b, p.Name)
	b = appendOptString(b, `,"version":`, p.Version)
	return append(b, '}')
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, key...)
	return AppendJSONString(b, s)
}

func appendRaw(b []byte, raw []byte) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s quoted the way encoding/json does: HTML-safe (<, > and &
// escaped), U+2028 and U+2029 escaped, invalid UTF-8 replaced by U+FFFD.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
