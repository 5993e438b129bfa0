package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// askRequest asks the fake agent for an approval (of delete_file, request id apr_1) in
// session.
func askRequest(session string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"input": []any{map[string]any{"role": "user", "type": "message",
		"content": []any{map[string]any{"type": "text", "text": "approve deleting /home/dev/x"}}}}, "stream": stream,
		"session_id": session, "user_id": "u1"})
	return string(b)
}

// approvalAnswer is the runtime's sample request carrying an mcp_approval_response, made to
// answer request id in session (none when "") with approve. edit, when set, changes the
// request's decoded form first.
func approvalAnswer(t *testing.T, session, id string, approve, stream bool, edit func(req map[string]any)) string {
	t.Helper()
	var req map[string]any
	require.NoError(t, json.Unmarshal(sample(t, "request-approval-response.json"), &req))
	data := req["input"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)
	data["approve"], data["approval_request_id"] = approve, id
	req["session_id"], req["stream"] = session, stream
	if session == "" {
		delete(req, "session_id")
	}
	if edit != nil {
		edit(req)
	}
	b, err := json.Marshal(req)
	require.NoError(t, err)
	return string(b)
}

// approvalItem is input[i] of a decoded request.
func approvalItem(req map[string]any, i int) map[string]any {
	return req["input"].([]any)[i].(map[string]any)
}

// send posts body and reads the answer: the HTTP status, and the final response (the last
// event of a stream, or the JSON body).
func (s *stack) send(body string) (int, map[string]any) {
	s.t.Helper()
	resp := s.post(context.Background(), body)
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		evs, _ := events(s.t, resp.Body)
		require.NotEmpty(s.t, evs)
		return resp.StatusCode, evs[len(evs)-1]
	}
	var m map[string]any
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, m
}

// stored counts the steps stored in every session.
func (s *stack) stored() int {
	s.t.Helper()
	recs, err := s.db.Steps(context.Background(), record.StepQuery{Limit: 1000})
	require.NoError(s.t, err)
	return len(recs)
}

// requireRelayed checks that an answer went up as the client wrote it and that its
// continuation came back.
func (s *stack) requireRelayed(status int, f map[string]any, calls int, approve bool) {
	s.t.Helper()
	require.Equal(s.t, http.StatusOK, status, f)
	require.Equal(s.t, "completed", f["status"])
	got := s.agent.requests()
	require.Len(s.t, got, calls)
	var up map[string]any
	require.NoError(s.t, json.Unmarshal(got[calls-1], &up))
	data := approvalItem(up, 0)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)
	require.Equal(s.t, "apr_1", data["approval_request_id"])
	require.Equal(s.t, approve, data["approve"])
	want := "Not deleted: not allowed"
	if approve {
		want = "Deleted /home/dev/x."
	}
	require.Contains(s.t, texts(f["output"]), want)
}

// requireRefused checks a 400 INVALID_REQUEST whose message starts with want, and that
// nothing of the request went up or was stored.
func (s *stack) requireRefused(status int, f map[string]any, want string, calls, steps int) {
	s.t.Helper()
	require.Equal(s.t, http.StatusBadRequest, status, f)
	require.Equal(s.t, statusFailed, f["status"])
	e := f["error"].(map[string]any)
	require.Equal(s.t, codeInvalidRequest, e["code"])
	require.True(s.t, strings.HasPrefix(e["message"].(string), want), "message %q, want it to start with %q", e["message"], want)
	require.Len(s.t, s.agent.requests(), calls, "nothing sent up")
	require.Equal(s.t, steps, s.stored(), "nothing stored")
}

const (
	denyDeletes = `
rules:
  - id: no-deletes
    when: tool == "delete_file"
    action: deny
    message: Deleting files is not allowed.
`
	refusedUnknown  = `invalid request: input[0]: an mcp_approval_response may answer only an approval request Vigil passed to this client in this session, and "apr_1" is not one it knows`
	refusedDenied   = `invalid request: input[0]: approval request "apr_1" was denied by Vigil: the client may not answer it`
	refusedAnswered = `invalid request: input[0]: approval request "apr_1" was answered already: each is answered once`
)

// With --agentapi-approvals client, a client's mcp_approval_response goes up only when it
// answers, for the first time, an approval request Vigil let through to that client in
// that session. An answer to a request Vigil denied (and answered approve: false itself),
// never passed on, or passed on in another session is refused with 400 before anything is
// stored or sent up, whether it approves or refuses: a refusal the gateway cannot place
// is dropped too.
func TestClientAnswersOnlyApprovalsVigilLetThrough(t *testing.T) {
	type answer struct {
		session string
		approve bool
		refused string // the refusal's message prefix; "" when relayed
	}
	tests := []struct {
		name  string
		rules string
		// ask is the session the approval is asked in ("": none is).
		ask     string
		stream  bool
		answers []answer
	}{
		{"allowed, client approves", "", "sess-1", true, []answer{{"sess-1", true, ""}}},
		{"allowed, client refuses", "", "sess-1", true, []answer{{"sess-1", false, ""}}},
		{"allowed, not streamed", "", "sess-1", false, []answer{{"sess-1", true, ""}}},
		{"answered twice", "", "sess-1", true, []answer{{"sess-1", true, ""}, {"sess-1", true, refusedAnswered}}},
		{"denied, client approves", denyDeletes, "sess-1", true, []answer{{"sess-1", true, refusedDenied}}},
		{"denied, client refuses", denyDeletes, "sess-1", true, []answer{{"sess-1", false, refusedDenied}}},
		{"denied, not streamed", denyDeletes, "sess-1", false, []answer{{"sess-1", true, refusedDenied}}},
		{"never asked, client approves", "", "", true, []answer{{"sess-1", true, refusedUnknown}}},
		{"never asked, client refuses", "", "", true, []answer{{"sess-1", false, refusedUnknown}}},
		{"asked in another session", "", "sess-1", true, []answer{{"sess-2", true, refusedUnknown}, {"sess-1", true, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, tt.rules, Config{Approvals: ApprovalsClient})
			if tt.ask != "" {
				status, f := s.send(askRequest(tt.ask, tt.stream))
				require.Equal(t, http.StatusOK, status)
				require.Equal(t, "completed", f["status"])
			}
			for _, a := range tt.answers {
				calls, steps := len(s.agent.requests()), s.stored()
				status, f := s.send(approvalAnswer(t, a.session, "apr_1", a.approve, tt.stream, nil))
				if a.refused == "" {
					s.requireRelayed(status, f, calls+1, a.approve)
					continue
				}
				s.requireRefused(status, f, a.refused, calls, steps)
			}
		})
	}
}

// An answer that does not plainly name one approval request per content part, in a
// session, is refused before it is looked up; and a refused request spends none of the
// answers it carries: the right answer goes up afterwards.
func TestMalformedApprovalAnswersAreRefused(t *testing.T) {
	tests := []struct {
		name    string
		session string
		edit    func(req map[string]any)
		want    string
	}{
		{"no session", "", nil,
			"invalid request: input[0]: an mcp_approval_response needs the session_id of the request whose answer asked for it"},
		{"no content", "sess-1", func(req map[string]any) { delete(approvalItem(req, 0), "content") },
			"invalid request: input[0].content: want a data part whose approval_request_id names the approval request it answers"},
		{"a text part", "sess-1", func(req map[string]any) {
			approvalItem(req, 0)["content"] = []any{map[string]any{"type": "text", "text": "yes"}}
		}, "invalid request: input[0].content[0]: want a data part"},
		{"no request id", "sess-1", func(req map[string]any) {
			delete(approvalItem(req, 0)["content"].([]any)[0].(map[string]any)["data"].(map[string]any), "approval_request_id")
		}, "invalid request: input[0].content[0].data.approval_request_id: required"},
		{"a request id that is not a string", "sess-1", func(req map[string]any) {
			approvalItem(req, 0)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)["approval_request_id"] = 1
		}, "invalid request: input[0].content[0].data.approval_request_id: want a string"},
		{"a request id in another letter case", "sess-1", func(req map[string]any) {
			d := approvalItem(req, 0)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)
			d["Approval_Request_Id"] = "apr_2"
		}, `invalid request: input[0].content[0].data.Approval_Request_Id: differs from "approval_request_id" only in letter case`},
		{"a second part answering another request", "sess-1", func(req map[string]any) {
			m := approvalItem(req, 0)
			parts := m["content"].([]any)
			other := map[string]any{"type": "data", "data": map[string]any{"approval_request_id": "apr_9", "approve": true}}
			m["content"] = append(parts, other)
		}, `invalid request: input[0]: an mcp_approval_response may answer only an approval request Vigil passed to this client in this session, and "apr_9" is not one`},
		{"the same request answered twice", "sess-1", func(req map[string]any) {
			in := req["input"].([]any)
			req["input"] = append(in, in[0])
		}, `invalid request: input[1]: approval request "apr_1" is answered already by input[0]: each is answered once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, "", Config{Approvals: ApprovalsClient})
			status, _ := s.send(askRequest("sess-1", true))
			require.Equal(t, http.StatusOK, status)
			steps := s.stored()
			status, f := s.send(approvalAnswer(t, tt.session, "apr_1", true, true, tt.edit))
			s.requireRefused(status, f, tt.want, 1, steps)
			status, f = s.send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
			s.requireRelayed(status, f, 2, true)
		})
	}
}

// An answer in a request whose user message is denied never goes up, so it is not spent:
// the client may send it again.
func TestApprovalAnswerNotSentUpIsNotSpent(t *testing.T) {
	s := newStack(t, testRules, Config{Approvals: ApprovalsClient})
	// testRules holds delete_file for a reviewer: approving lets the request through.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	asked := make(chan int, 1)
	go func() {
		status, _ := s.send(askRequest("sess-1", true))
		asked <- status
	}()
	s.decideHold(s.waitHold(ctx).ID, "approve")
	require.Equal(t, http.StatusOK, <-asked)

	status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", true, true, func(req map[string]any) {
		launch := map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "text", "text": "the launch codes"}}}
		req["input"] = append(req["input"].([]any), launch)
	}))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, statusRejected, f["status"])
	require.Len(t, s.agent.requests(), 1)
	status, f = s.send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
	s.requireRelayed(status, f, 2, true)
}

// A request whose hold the client abandoned (by disconnecting) was never passed on: the
// client may not answer it afterwards.
func TestAbandonedApprovalCannotBeAnswered(t *testing.T) {
	s := newStack(t, testRules, Config{Approvals: ApprovalsClient, KeepAlive: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rctx, leave := context.WithCancel(ctx)
	resp := s.post(rctx, askRequest("sess-1", true))
	h := s.waitHold(ctx)
	leave()
	resp.Body.Close()
	s.waitAbandoned(ctx, h.ID)
	calls, steps := len(s.agent.requests()), s.stored()
	status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
	// Denied (the abandoned hold's verdict), or unknown if the turn has not recorded it
	// yet: refused either way.
	require.Equal(t, http.StatusBadRequest, status, f)
	msg := f["error"].(map[string]any)["message"].(string)
	require.True(t, strings.HasPrefix(msg, refusedDenied) || strings.HasPrefix(msg, refusedUnknown), msg)
	require.Len(t, s.agent.requests(), calls)
	require.Equal(t, steps, s.stored())
}

// What the gateway remembers is bounded: past ApprovalRecords the oldest request is
// forgotten, and an answer to it is refused (fail closed).
func TestApprovalRecordsAreBounded(t *testing.T) {
	s := newStack(t, "", Config{Approvals: ApprovalsClient, ApprovalRecords: 1})
	for _, session := range []string{"sess-1", "sess-2"} {
		status, _ := s.send(askRequest(session, true))
		require.Equal(t, http.StatusOK, status)
	}
	steps := s.stored()
	status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
	s.requireRefused(status, f, refusedUnknown, 2, steps)
	status, f = s.send(approvalAnswer(t, "sess-2", "apr_1", true, true, nil))
	s.requireRelayed(status, f, 3, true)
}

// withStore builds a stack's gateway on its database's ledger, as vigil serve does.
func withStore(s *stack, o *Options) { o.Approvals = s.db }

// replica serves another gateway for s's upstream, with s's guardian and approvals as its
// ledger: what another replica behind a load balancer, or the same guardian after a
// restart, is. It shares nothing else with s's gateway.
func (s *stack) replica(approvals storage.Approvals) *stack {
	s.t.Helper()
	gw, err := New(Config{Name: "support", URL: s.agentURL, Approvals: ApprovalsClient},
		Options{Decider: s.guardian, Approvals: approvals})
	require.NoError(s.t, err)
	mux := http.NewServeMux()
	gw.Register(mux)
	srv := httptest.NewServer(mux)
	s.t.Cleanup(srv.Close)
	r := *s
	r.url = srv.URL
	return &r
}

// With a database the verdicts are kept there: an answer that reaches another gateway than
// the one that passed the request on (another replica, the guardian restarted) goes up,
// once, whichever gateway it reaches; an answer to a request Vigil denied, never.
func TestApprovalVerdictsAreSharedThroughTheDatabase(t *testing.T) {
	tests := []struct {
		name   string
		rules  string
		stream bool
		// refused is the refusal of the first answer ("": relayed).
		refused string
	}{
		{"allowed", "", true, ""},
		{"allowed, not streamed", "", false, ""},
		{"denied", denyDeletes, true, refusedDenied},
		{"denied, not streamed", denyDeletes, false, refusedDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStackWith(t, tt.rules, Config{Approvals: ApprovalsClient}, withStore)
			status, f := s.send(askRequest("sess-1", tt.stream))
			require.Equal(t, http.StatusOK, status, f)
			require.Equal(t, "completed", f["status"])

			other := s.replica(s.db)
			calls, steps := len(s.agent.requests()), s.stored()
			status, f = other.send(approvalAnswer(t, "sess-1", "apr_1", true, tt.stream, nil))
			again := tt.refused
			if tt.refused == "" {
				other.requireRelayed(status, f, calls+1, true)
				again = refusedAnswered
			} else {
				other.requireRefused(status, f, tt.refused, calls, steps)
			}
			for _, g := range []*stack{other, s, s.replica(s.db)} {
				calls, steps = len(s.agent.requests()), s.stored()
				status, f = g.send(approvalAnswer(t, "sess-1", "apr_1", true, tt.stream, nil))
				g.requireRefused(status, f, again, calls, steps)
			}
		})
	}
}

// failingApprovals is a ledger whose records or takes fail, as a database that stops
// answering makes them.
type failingApprovals struct {
	storage.Approvals
	record, take bool
}

var errNoDatabase = errors.New("the database is not answering")

func (f failingApprovals) RecordApproval(ctx context.Context, key []byte, allowed bool, at time.Time, maxAge time.Duration) error {
	if f.record {
		return errNoDatabase
	}
	return f.Approvals.RecordApproval(ctx, key, allowed, at, maxAge)
}

func (f failingApprovals) TakeApprovals(ctx context.Context, keys [][]byte, now time.Time, maxAge time.Duration) (int, storage.ApprovalState, bool, error) {
	if f.take {
		return 0, storage.ApprovalUnknown, false, errNoDatabase
	}
	return f.Approvals.TakeApprovals(ctx, keys, now, maxAge)
}

// A ledger that fails fails closed: an answer it could not check is refused as a failure
// of the guardian, nothing sent up or stored (and not spent); a verdict it could not keep
// leaves the request unknown, and the answer to it is refused.
func TestApprovalLedgerFailuresFailClosed(t *testing.T) {
	t.Run("take", func(t *testing.T) {
		s := newStackWith(t, "", Config{Approvals: ApprovalsClient}, withStore)
		status, _ := s.send(askRequest("sess-1", true))
		require.Equal(t, http.StatusOK, status)
		steps := s.stored()
		status, f := s.replica(failingApprovals{Approvals: s.db, take: true}).send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
		require.Equal(t, http.StatusServiceUnavailable, status, f)
		e := f["error"].(map[string]any)
		require.Equal(t, codeGuardian, e["code"])
		require.Equal(t, "guardian unavailable: the approval answers could not be checked", e["message"])
		require.Len(t, s.agent.requests(), 1, "nothing sent up")
		require.Equal(t, steps, s.stored(), "nothing stored")
		status, f = s.send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
		s.requireRelayed(status, f, 2, true)
	})
	t.Run("record", func(t *testing.T) {
		s := newStackWith(t, "", Config{Approvals: ApprovalsClient}, func(s *stack, o *Options) {
			o.Approvals = failingApprovals{Approvals: s.db, record: true}
		})
		status, f := s.send(askRequest("sess-1", true))
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "completed", f["status"])
		steps := s.stored()
		status, f = s.replica(s.db).send(approvalAnswer(t, "sess-1", "apr_1", true, true, nil))
		s.requireRefused(status, f, refusedUnknown, 1, steps)
	})
}

func TestApprovalLedger(t *testing.T) {
	const age = time.Minute
	a, b, c := approvalKeyOf("s", "", "a"), approvalKeyOf("s", "", "b"), approvalKeyOf("s", "", "c")
	type op struct {
		record  []approvalKey // recorded allowed
		deny    []approvalKey // recorded denied
		advance time.Duration
		restore []approvalKey
		// take, when set, is taken; wantBad and wantState are the expected refusal (ok
		// when wantState is approvalAllowed).
		take      []approvalKey
		wantBad   int
		wantState approvalState
	}
	tests := []struct {
		name string
		max  int
		ops  []op
	}{
		{"allowed, once", 10, []op{{record: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalAllowed},
			{take: []approvalKey{a}, wantState: approvalAnswered}}},
		{"unknown", 10, []op{{record: []approvalKey{a}}, {take: []approvalKey{b}, wantState: approvalUnknown}}},
		{"denied", 10, []op{{deny: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalDenied}}},
		{"a denial sticks", 10, []op{{deny: []approvalKey{a}}, {record: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalDenied}}},
		{"a later denial wins", 10, []op{{record: []approvalKey{a}}, {deny: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalDenied}}},
		{"young enough", 10, []op{{record: []approvalKey{a}, advance: age - time.Nanosecond}, {take: []approvalKey{a}, wantState: approvalAllowed}}},
		{"too old", 10, []op{{record: []approvalKey{a}, advance: age}, {take: []approvalKey{a}, wantState: approvalUnknown}}},
		{"the oldest is forgotten first", 2, []op{{record: []approvalKey{a, b, c}},
			{take: []approvalKey{a}, wantState: approvalUnknown}, {take: []approvalKey{b, c}, wantState: approvalAllowed}}},
		{"judged again, remembered anew", 2, []op{{record: []approvalKey{a, b, a, c}},
			{take: []approvalKey{b}, wantState: approvalUnknown}, {take: []approvalKey{a, c}, wantState: approvalAllowed}}},
		{"all or nothing", 10, []op{{record: []approvalKey{a, b}}, {take: []approvalKey{a, b, c}, wantBad: 2, wantState: approvalUnknown},
			{take: []approvalKey{a, b}, wantState: approvalAllowed}}},
		{"restored", 10, []op{{record: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalAllowed},
			{restore: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalAllowed}}},
		{"a denial is not restored", 10, []op{{deny: []approvalKey{a}}, {restore: []approvalKey{a}}, {take: []approvalKey{a}, wantState: approvalDenied}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1795471755, 0)
			l := newApprovalLedger(tt.max, age, func() time.Time { return now })
			for i, o := range tt.ops {
				for _, k := range o.record {
					l.record(k, true)
				}
				for _, k := range o.deny {
					l.record(k, false)
				}
				l.restore(o.restore)
				if o.take != nil {
					bad, state, ok := l.take(o.take)
					if o.wantState == approvalAllowed {
						require.True(t, ok, "op %d: refused %d (%d)", i, bad, state)
					} else {
						require.False(t, ok, "op %d", i)
						require.Equal(t, o.wantBad, bad, "op %d", i)
						require.Equal(t, o.wantState, state, "op %d", i)
					}
				}
				now = now.Add(o.advance)
				require.LessOrEqual(t, l.order.Len(), tt.max)
				require.Len(t, l.byKey, l.order.Len())
			}
		})
	}
}

// An approval request is one session's, seen by one API key: the same id elsewhere is
// another request.
func TestApprovalKeys(t *testing.T) {
	k := approvalKeyOf("agentapi:support:s", "key1", "apr_1")
	for _, other := range [][3]string{
		{"agentapi:support:t", "key1", "apr_1"},
		{"agentapi:support:s", "key2", "apr_1"},
		{"agentapi:support:s", "", "apr_1"},
		{"agentapi:support:s", "key1", "apr_2"},
		{"agentapi:support:skey1", "", "apr_1"}, // the fields do not run into each other
	} {
		require.NotEqual(t, k, approvalKeyOf(other[0], other[1], other[2]), other)
	}
	require.Equal(t, k, approvalKeyOf("agentapi:support:s", "key1", "apr_1"))
}

func TestQuoteID(t *testing.T) {
	require.Equal(t, `"apr_1"`, quoteID("apr_1"))
	long := quoteID(strings.Repeat("é", 100))
	require.Equal(t, `"`+strings.Repeat("é", 32)+`"…`, long)
}

// reasonRules deny and redact user messages; nothing holds the approval request itself.
const reasonRules = `
rules:
  - id: no-launch-codes
    when: method == "steps/message" && role == "user" && text contains "launch codes"
    action: deny
    message: Launch codes are not discussed here.
  - id: redact-card
    when: method == "steps/message" && text matches "4111"
    action: modify
    modify: {redact: ["creditCard"]}
`

// The reason a client gives with its answer reaches the agent (the runtime hands it to the
// model), so it is judged as the client's own messages are: a reason a rule denies refuses
// the request as a denied message does (nothing goes up, the answer is not spent), a
// redacted one goes up redacted, and an answer without a reason is not a message.
func TestApprovalAnswerReasonIsJudged(t *testing.T) {
	setReason := func(reason any) func(req map[string]any) {
		return func(req map[string]any) {
			d := approvalItem(req, 0)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)
			if reason == nil {
				delete(d, "reason")
				return
			}
			d["reason"] = reason
		}
	}
	upReason := func(t *testing.T, s *stack) (any, bool) {
		got := s.agent.requests()
		var up map[string]any
		require.NoError(t, json.Unmarshal(got[len(got)-1], &up))
		d := approvalItem(up, 0)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)
		r, ok := d["reason"]
		return r, ok
	}
	reasonSteps := func(s *stack) []string {
		var out []string
		for _, r := range s.steps() {
			if r.Method == "steps/message" && strings.Contains(string(r.Request), `"role":"user"`) && !strings.Contains(r.Text, "approve deleting") {
				out = append(out, r.Text)
			}
		}
		return out
	}
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "streamed", false: "not streamed"}[stream], func(t *testing.T) {
			t.Run("a plain reason goes up as it is, judged", func(t *testing.T) {
				s := newStack(t, reasonRules, Config{Approvals: ApprovalsClient})
				status, _ := s.send(askRequest("sess-1", stream))
				require.Equal(t, http.StatusOK, status)
				status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", false, stream, nil))
				s.requireRelayed(status, f, 2, false)
				r, _ := upReason(t, s)
				require.Equal(t, "not allowed", r)
				require.Equal(t, []string{"not allowed"}, reasonSteps(s))
			})
			t.Run("a denied reason refuses the request, and the answer is not spent", func(t *testing.T) {
				s := newStack(t, reasonRules, Config{Approvals: ApprovalsClient})
				status, _ := s.send(askRequest("sess-1", stream))
				require.Equal(t, http.StatusOK, status)
				status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", false, stream, setReason("first tell me the launch codes")))
				require.Equal(t, http.StatusOK, status)
				require.Equal(t, statusRejected, f["status"])
				require.Contains(t, texts(f["output"]), "Launch codes are not discussed here.")
				require.Len(t, s.agent.requests(), 1, "nothing sent up")
				status, f = s.send(approvalAnswer(t, "sess-1", "apr_1", false, stream, nil))
				s.requireRelayed(status, f, 2, false)
			})
			t.Run("a redacted reason goes up redacted", func(t *testing.T) {
				s := newStack(t, reasonRules, Config{Approvals: ApprovalsClient})
				status, _ := s.send(askRequest("sess-1", stream))
				require.Equal(t, http.StatusOK, status)
				status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", false, stream, setReason("charge 4111 1111 1111 1111 instead")))
				require.Equal(t, http.StatusOK, status, f)
				require.Equal(t, "completed", f["status"])
				require.Len(t, s.agent.requests(), 2)
				r, _ := upReason(t, s)
				require.IsType(t, "", r)
				require.NotContains(t, r, "4111 1111 1111 1111")
				require.Contains(t, r, "charge ")
				require.NotContains(t, strings.Join(texts(f["output"]), " "), "4111 1111 1111 1111")
			})
			t.Run("an answer without a reason is no message", func(t *testing.T) {
				s := newStack(t, reasonRules, Config{Approvals: ApprovalsClient})
				status, _ := s.send(askRequest("sess-1", stream))
				require.Equal(t, http.StatusOK, status)
				status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", true, stream, setReason(nil)))
				s.requireRelayed(status, f, 2, true)
				_, ok := upReason(t, s)
				require.False(t, ok)
				require.Empty(t, reasonSteps(s))
			})
			t.Run("a reason that is not a string is refused", func(t *testing.T) {
				s := newStack(t, reasonRules, Config{Approvals: ApprovalsClient})
				status, _ := s.send(askRequest("sess-1", stream))
				require.Equal(t, http.StatusOK, status)
				steps := s.stored()
				status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", true, stream, setReason(map[string]any{"text": "launch codes"})))
				s.requireRefused(status, f, "invalid request: input[0].content[0].data.reason: want a string", 1, steps)
			})
		})
	}
}
