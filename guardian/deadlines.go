package guardian

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// The HTTP server's read and write timeouts bound a request's whole life, which is right
// for everything but the waits that are long by design: a held step waits minutes for an
// operator. Reaching the read deadline while a handler runs also cancels the request's
// context (net/http's background read fails), so such a wait lifts both deadlines and
// gives the answer a fresh write deadline once it ends. The websocket needs none of this:
// hijacking clears the deadlines and the live hub sets its own per frame.

type waitKey struct{}

// waitDeadlines is one request's connection deadlines, shared by the waits of a batch.
type waitDeadlines struct {
	rc    *http.ResponseController
	write time.Duration

	mu sync.Mutex
	n  int // waits in progress
}

// WithLongWaits lets handlers below it lift the connection's deadlines during a LongWait.
// write is the server's write timeout, given to the answer afresh when the last wait of a
// request ends (0: no write timeout).
func WithLongWaits(next http.Handler, write time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wd := &waitDeadlines{rc: http.NewResponseController(w), write: write}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), waitKey{}, wd)))
	})
}

// LongWait lifts the deadlines of ctx's connection until the returned func is called; the
// wait itself must be bounded (a hold has its timeout). Outside WithLongWaits it does
// nothing.
func LongWait(ctx context.Context) (done func()) {
	wd, ok := ctx.Value(waitKey{}).(*waitDeadlines)
	if !ok {
		return func() {}
	}
	wd.mu.Lock()
	if wd.n == 0 {
		// Errors mean the writer cannot set deadlines (a test recorder): nothing to lift.
		_ = wd.rc.SetReadDeadline(time.Time{})
		_ = wd.rc.SetWriteDeadline(time.Time{})
	}
	wd.n++
	wd.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			wd.mu.Lock()
			defer wd.mu.Unlock()
			wd.n--
			if wd.n == 0 && wd.write > 0 {
				_ = wd.rc.SetWriteDeadline(time.Now().Add(wd.write))
			}
		})
	}
}
