package aap_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/rules"
)

// BenchmarkAddedLatency measures what the gateway adds to a client's turn: each iteration
// runs the same exchange directly against the upstream and through Vigil (real rules engine,
// SQLite, loopback HTTP both ways), and reports both medians and the difference.
//
//	go test -run '^$' -bench AddedLatency -benchtime 2000x ./gateway/aap/
//
// "tools" is the captured exchange: directly, the client answers delete_file's permission
// in a second turn; through Vigil it sends one turn and the gateway answers two permissions
// upstream from the verdicts (read_file, trusted by the client, is asked too: one more
// upstream round). "tools-same-rounds" has the direct client trust nothing and grant both
// calls itself, so both paths make the same upstream rounds.
func BenchmarkAddedLatency(b *testing.B) {
	rs := []rules.Rule{
		{ID: "no-destruction", When: `kind == "message" && role == "user" && text contains "rm -rf"`, Action: rules.ActionDeny, Enabled: true},
		{ID: "redact-keys", When: `text matches "sk-live-"`, Action: rules.ActionModify,
			Modify: &rules.ModifySpec{Redact: []string{`sk-live-[A-Za-z0-9]+`}}, Enabled: true},
		{ID: "no-etc", When: `tool == "delete_file" && inputs.path startsWith "/etc"`, Action: rules.ActionDeny, Enabled: true},
	}
	type scenario struct {
		name, mode, text string
		tools            bool
		// untrusted: the direct client trusts no tool and grants each call itself, so both
		// paths make the same upstream rounds.
		untrusted bool
		think     time.Duration
	}
	var scs []scenario
	// think 0: the gateway's own cost against an upstream that answers at once; 2ms: an
	// agent that works 2 ms per turn (any model takes far longer).
	for _, think := range []time.Duration{0, 2 * time.Millisecond} {
		scs = append(scs,
			scenario{"no-tool/none", "none", "hello", false, false, think},
			scenario{"no-tool/delta", "delta", "hello", false, false, think},
			scenario{"no-tool/message", "message", "hello", false, false, think},
			scenario{"tools/delta", "delta", readAndDelete, true, false, think},
			scenario{"tools/none", "none", readAndDelete, true, false, think},
			scenario{"tools-same-rounds/delta", "delta", readAndDelete, true, true, think},
		)
	}
	for _, sc := range scs {
		b.Run(sc.name+"/think="+sc.think.String(), func(b *testing.B) {
			e := newVigil(b, rs)
			e.upstream.Think = sc.think
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			session := func(base, body string) string {
				resp, err := client.Post(base+"/sessions", "application/json", strings.NewReader(body))
				require.NoError(b, err)
				defer resp.Body.Close()
				var out struct {
					SessionID string `json:"sessionId"`
				}
				require.NoError(b, json.NewDecoder(resp.Body).Decode(&out))
				return out.SessionID
			}
			turn := func(base, id, body string) string {
				resp, err := client.Post(base+"/sessions/"+id+"/turns", "application/json", strings.NewReader(body))
				require.NoError(b, err)
				out, err := io.ReadAll(resp.Body)
				require.NoError(b, err)
				resp.Body.Close()
				require.Equal(b, http.StatusOK, resp.StatusCode, string(out))
				return string(out)
			}
			directBase, gwBase := e.up.URL, e.srv.URL+"/aap/demo"
			directBody := sessionBody
			if sc.untrusted {
				directBody = strings.Replace(sessionBody, `,"trust":true`, "", 1)
			}
			direct, through := session(directBase, directBody), session(gwBase, sessionBody)
			first := turnBody(sc.mode, userMsg(sc.text))
			dTimes := make([]time.Duration, 0, b.N)
			gTimes := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				out := turn(directBase, direct, first)
				for sc.tools && strings.Contains(out, `"stopReason":"tool_use"`) {
					// The fake stops at its first call that needs permission: the last one named.
					ids := callID.FindAllString(out, -1)
					out = turn(directBase, direct, turnBody(sc.mode, `{"role":"tool_permission","toolCallId":"`+ids[len(ids)-1]+`","granted":true}`))
				}
				dTimes = append(dTimes, time.Since(start))
				start = time.Now()
				turn(gwBase, through, first)
				gTimes = append(gTimes, time.Since(start))
			}
			b.StopTimer()
			d, g := median(dTimes), median(gTimes)
			b.ReportMetric(float64(d.Microseconds()), "direct-p50-µs")
			b.ReportMetric(float64(g.Microseconds()), "vigil-p50-µs")
			b.ReportMetric(float64((g - d).Microseconds()), "added-µs")
			b.ReportMetric(100*float64(g-d)/float64(d), "added-%")
		})
	}
}

var callID = regexp.MustCompile(`call_[a-z]+_[0-9]+`)

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
