package live

import (
	"strconv"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// encodeEvent writes ev as the frame clients receive: the same JSON object as
// json.Marshal(ev), built by appending. The payload is copied as is, not re-validated and
// re-compacted: it is JSON the guardian produced, and re-scanning it would cost the publisher
// time proportional to the step's size on every event.
func encodeEvent(ev record.Event) []byte {
	buf := make([]byte, 0, 64+len(ev.Type)+len(ev.SessionID)+len(ev.Payload))
	buf = appendEnvelope(buf, ev.Seq, ev.Type, ev.SessionID, ev.At)
	if len(ev.Payload) == 0 {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, ev.Payload...)
	}
	return append(buf, '}')
}

// encodeStep writes a step's event frame, the record encoded straight into it: the same
// frame as encodeEvent of the event with the record's JSON as payload, with one copy of the
// (large) request and response instead of two.
func encodeStep(rec *record.StepRecord) []byte {
	buf := make([]byte, 0, 640+len(rec.SessionID)*2+len(rec.Request)+len(rec.Response)+len(rec.Text))
	buf = appendEnvelope(buf, rec.Seq, record.EventStep, rec.SessionID, rec.ReceivedAt)
	buf = rec.AppendJSON(buf)
	return append(buf, '}')
}

// appendEnvelope appends an event frame up to its payload.
func appendEnvelope(buf []byte, seq int64, typ, sessionID string, at time.Time) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendInt(buf, seq, 10)
	buf = append(buf, `,"type":`...)
	buf = record.AppendJSONString(buf, typ)
	if sessionID != "" {
		buf = append(buf, `,"sessionId":`...)
		buf = record.AppendJSONString(buf, sessionID)
	}
	buf = append(buf, `,"at":"`...)
	buf = at.AppendFormat(buf, time.RFC3339Nano)
	return append(buf, `","payload":`...)
}
