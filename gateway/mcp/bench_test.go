package mcp

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// BenchmarkToolCall measures one tools/call of server-everything's echo with the Go SDK's
// client, straight to the server and through Vigil, over each transport, and reports the
// p50 of each and what Vigil adds. Through Vigil the call and its result are two judged,
// stored steps (real guardian with the test rules, real SQLite): over Streamable HTTP
// in process, over stdio via the guardian's /aos on loopback as `vigil mcp wrap` does.
func BenchmarkToolCall(b *testing.B) {
	bin := nodeBin(b, "mcp-server-everything")
	ctx := context.Background()
	call := func(cs *sdk.ClientSession) time.Duration {
		start := time.Now()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}})
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
		return time.Since(start)
	}
	connect := func(b *testing.B, t sdk.Transport) *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		if _, err := cs.ListTools(ctx, nil); err != nil {
			b.Fatal(err)
		}
		return cs
	}
	for _, transport := range []string{"http", "stdio"} {
		b.Run(transport, func(b *testing.B) {
			var direct, viaVigil *sdk.ClientSession
			switch transport {
			case "http":
				up := startEverythingHTTP(b)
				s := newStack(b, testRules, up, Config{})
				direct = connect(b, &sdk.StreamableClientTransport{Endpoint: up, MaxRetries: -1})
				viaVigil = connect(b, &sdk.StreamableClientTransport{Endpoint: s.url + "/mcp/everything", MaxRetries: -1})
			case "stdio":
				s := newStack(b, testRules, "http://127.0.0.1:1/mcp", Config{})
				direct = connect(b, &sdk.CommandTransport{Command: exec.Command(bin, "stdio")})
				viaVigil, _ = wrapClient(b, s.url, bin)
			}
			var d, v []time.Duration
			b.ResetTimer()
			for range b.N {
				d = append(d, call(direct))
				v = append(v, call(viaVigil))
			}
			b.StopTimer()
			p50 := func(x []time.Duration) float64 {
				slices.Sort(x)
				return float64(x[len(x)/2].Microseconds())
			}
			pd, pv := p50(d), p50(v)
			b.ReportMetric(pd, "direct-p50-µs")
			b.ReportMetric(pv, "vigil-p50-µs")
			b.ReportMetric(pv-pd, "added-p50-µs")
			b.ReportMetric(100*(pv-pd)/pd, "added-%")
		})
	}
}

// wrapClient is wrap with the default error policy and no progress, for the benchmark.
func wrapClient(b *testing.B, guardianURL, bin string) (*sdk.ClientSession, chan error) {
	return wrap(b, guardianURL, OnErrorDeny, bin, "stdio")
}

// BenchmarkToolsListHiding measures one tools/list of server-everything through the stdio
// relay, listing every tool and hiding the denied ones by asking the guardian's dry run
// (POST /aos/preview on loopback, once per tool, as `vigil mcp wrap` does), and reports
// the p50 of each.
func BenchmarkToolsListHiding(b *testing.B) {
	bin := nodeBin(b, "mcp-server-everything")
	ctx := context.Background()
	s := newStack(b, testRules, "http://127.0.0.1:1/mcp", Config{})
	judge := Remote(aos.NewClient(s.url + "/aos"))
	all, _ := wrapWith(b, SessionConfig{ID: "mcp-bench-all", Upstream: "everything", Judge: judge}, bin, "stdio")
	hiding, _ := wrapWith(b, SessionConfig{ID: "mcp-bench-hide", Upstream: "everything", Judge: judge,
		Hides: HidesRemote(aos.NewClient(s.url + guardian.PreviewPath))}, bin, "stdio")
	list := func(cs *sdk.ClientSession) (time.Duration, int) {
		start := time.Now()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start), len(res.Tools)
	}
	var a, h []time.Duration
	na, nh := 0, 0
	b.ResetTimer()
	for range b.N {
		d, n := list(all)
		a, na = append(a, d), n
		d, n = list(hiding)
		h, nh = append(h, d), n
	}
	b.StopTimer()
	p50 := func(x []time.Duration) float64 {
		slices.Sort(x)
		return float64(x[len(x)/2].Microseconds())
	}
	b.ReportMetric(p50(a), "all-p50-µs")
	b.ReportMetric(p50(h), "hiding-p50-µs")
	b.ReportMetric(float64(na), "tools-listed")
	b.ReportMetric(float64(nh), "tools-after-hiding")
}
