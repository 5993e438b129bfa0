package live

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/vigil-guardian/vigil/storage"
)

// encodeEvent writes ev as the frame clients receive: the same JSON object as
// json.Marshal(ev), built by appending. The payload is copied as is, not re-validated and
// re-compacted: it is JSON the guardian produced, and re-scanning it would cost the publisher
// time proportional to the step's size on every event.
func encodeEvent(ev storage.Event) []byte {
	buf := make([]byte, 0, 64+len(ev.Type)+len(ev.SessionID)+len(ev.Payload))
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendInt(buf, ev.Seq, 10)
	buf = append(buf, `,"type":`...)
	buf = appendString(buf, ev.Type)
	if ev.SessionID != "" {
		buf = append(buf, `,"sessionId":`...)
		buf = appendString(buf, ev.SessionID)
	}
	buf = append(buf, `,"at":"`...)
	buf = ev.At.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","payload":`...)
	if len(ev.Payload) == 0 {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, ev.Payload...)
	}
	return append(buf, '}')
}

// appendString appends s as a JSON string. Types and session ids are plain ASCII; anything
// else goes through encoding/json for its escaping rules.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, _ := json.Marshal(s) // a string always marshals
			return append(buf, quoted...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
