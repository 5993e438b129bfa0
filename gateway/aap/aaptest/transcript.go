package aaptest

import (
	"net/http"
	"strconv"
	"strings"
)

// Exchange is one answer of the captured wire transcript (testdata/wire-transcript.txt).
type Exchange struct {
	Title  string
	Status int // 0 when the transcript shows the body only
	Header http.Header
	Body   string
}

// ParseTranscript reads the transcript's sections: "### title", then the raw HTTP answer
// (status line, headers, a blank line, the body as received) or the body alone.
func ParseTranscript(text string) []Exchange {
	var out []Exchange
	for _, sec := range strings.Split(text, "### ")[1:] {
		title, rest, _ := strings.Cut(sec, "\n")
		ex := Exchange{Title: title, Header: http.Header{}}
		if strings.HasPrefix(rest, "HTTP/1.1 ") {
			head, body, _ := strings.Cut(rest, "\n\n")
			lines := strings.Split(head, "\n")
			fields := strings.Fields(lines[0])
			ex.Status, _ = strconv.Atoi(fields[1])
			for _, l := range lines[1:] {
				k, v, _ := strings.Cut(l, ": ")
				ex.Header.Add(k, v)
			}
			rest = body
		}
		// A blank line ends a section; an SSE body's last event ends with one itself, and
		// no other body ends with a newline.
		ex.Body = rest
		if ex.Header.Get("Content-Type") != "text/event-stream" {
			ex.Body = strings.TrimRight(rest, "\n")
		}
		out = append(out, ex)
	}
	return out
}
