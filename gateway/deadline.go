package gateway

import (
	"net/http"
	"time"
)

// timedWriter gives each write to the client a deadline of its own: the server's write
// timeout, counted from that write. A gateway's stream, a turn and a call waiting for
// review lift the server's deadlines (guardian.LongWait) for as long as they last; without
// a deadline per write, a client that stops reading would hold the handler, its connection
// and the upstream's stream or connection for good.
type timedWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// TimedWriter wraps w so that each write gets the HTTP server's WriteTimeout (the
// --write-timeout of vigil serve). A server without one (0: no bound, as its operator
// chose, or a handler called outside a server) gets w as it is: setting a deadline there
// would outlive the request, since such a server does not reset it before the
// connection's next request.
func TimedWriter(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil || srv.WriteTimeout <= 0 {
		return w
	}
	return &timedWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: srv.WriteTimeout}
}

func (w *timedWriter) deadline() {
	// An error means the writer cannot take deadlines (HTTP/2 without them, a test
	// recorder): nothing to bound there.
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
}

func (w *timedWriter) Write(b []byte) (int, error) {
	w.deadline()
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls: a flush writes to the
// connection too.
func (w *timedWriter) FlushError() error {
	w.deadline()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *timedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
