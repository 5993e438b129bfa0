package aap_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// In team mode a session opened without seed messages is a step of its own, carrying the
// opener's key: stored, it makes the key the session's owner from its opening (a seed's
// step does that when there is one). The rules decide it like a seed: refused, the session
// is deleted upstream and the client gets 403. Without a key there is no owner to record.
func TestOpeningRecordsTheKey(t *testing.T) {
	withKey := func(o *aap.Options) {
		o.KeyOf = func(context.Context) (string, string, bool) { return "key_1", "", true }
	}
	for _, c := range []struct {
		name     string
		mod      func(*aap.Options)
		body     string
		decision string
		status   int
		want     []string
	}{
		{"key, no seeds", withKey, `{"agent":{"name":"guarded-agent"}}`, "allow", http.StatusCreated,
			[]string{"steps/agentTrigger  → allow"}},
		{"key, seeds", withKey, `{"agent":{"name":"guarded-agent"},"messages":[{"role":"user","content":"hi"}]}`, "allow", http.StatusCreated,
			[]string{"steps/message user hi → allow"}},
		{"no key", func(*aap.Options) {}, `{"agent":{"name":"guarded-agent"}}`, "allow", http.StatusCreated, nil},
		{"key, opening denied", withKey, `{"agent":{"name":"guarded-agent"}}`, "deny", http.StatusForbidden,
			[]string{"steps/agentTrigger  → deny"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.mod)
			h.fd.rule = func(_ context.Context, s *aos.Step) (guardian.Verdict, error) {
				return guardian.Verdict{Decision: c.decision, Message: "No new sessions."}, nil
			}
			resp, body := h.do("POST", "/sessions", c.body)
			require.Equal(t, c.status, resp.StatusCode, body)
			require.Equal(t, c.want, h.fd.summary())
			for _, d := range h.fd.decided() {
				require.Equal(t, "key_1", d.meta.KeyID)
				if tr := d.step.Trigger; tr != nil {
					require.Equal(t, "aap.session.open", tr.Trigger.Event.Type)
					require.Equal(t, "sess_1", tr.Trigger.Event.ID)
					require.Equal(t, "aap:demo:sess_1", d.step.Context.Session.ID)
				}
			}
			if c.status == http.StatusForbidden {
				require.JSONEq(t, `{"error":"No new sessions."}`, body)
				require.Empty(t, h.upstream.Sessions(), "the refused session was deleted upstream")
			}
		})
	}
}
