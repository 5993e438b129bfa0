package agentapi

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkTurn measures one no-tool turn (a user message, an echoed answer streamed in
// deltas) straight to the fake agent and through the gateway (real guardian, real SQLite,
// loopback HTTP both ways), and reports the p50 of each and what the gateway adds. With
// "rules" an enforced rule could act on agent messages, so the answer is buffered and
// judged before the client sees it; without, it streams through and is judged after. The
// fake agent answers at once, the worst case for the relative figure; "agent-5ms" gives it
// 5 ms to think, still far less than a model takes.
func BenchmarkTurn(b *testing.B) {
	for _, c := range []struct {
		name, rules string
		think       time.Duration
	}{{"streamed", "", 0}, {"streamed-agent-5ms", "", 5 * time.Millisecond}, {"buffered", `
rules:
  - id: redact-card
    when: method == "steps/message" && text matches "4111"
    action: modify
    modify: {redact: ["creditCard"]}
`, 0}} {
		b.Run(c.name, func(b *testing.B) {
			s := newStack(b, c.rules, Config{})
			s.agent.think = c.think
			body := userRequest("hello there", true)
			upstream := s.agentURL
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			turn := func(url string) time.Duration {
				start := time.Now()
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				return time.Since(start)
			}
			var viaDirect, viaGateway []time.Duration
			b.ResetTimer()
			for range b.N {
				viaDirect = append(viaDirect, turn(upstream+"/process"))
				viaGateway = append(viaGateway, turn(s.url+"/agentapi/support/process"))
			}
			b.StopTimer()
			p50 := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Microseconds())
			}
			pd, pg := p50(viaDirect), p50(viaGateway)
			b.ReportMetric(pd, "direct-p50-µs")
			b.ReportMetric(pg, "gateway-p50-µs")
			b.ReportMetric(pg-pd, "added-p50-µs")
			b.ReportMetric(100*(pg-pd)/pd, "added-%")
		})
	}
}
