// Command opa-bench is the OPA side of make bench's comparison: a JSON-RPC server that
// answers the load generator's AOS steps with OPA's decision on four Rego rules equivalent
// to four of bench/rules-realistic.yaml (policy.rego), evaluated with OPA's Go SDK from a
// prepared query, storing nothing. It is its own module so that OPA stays out of Vigil's.
//
//	go build -o ../../bin/opa-bench . && ../../bin/opa-bench 127.0.0.1:8181
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
)

//go:embed policy.rego
var policy string

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: opa-bench ADDR")
		os.Exit(2)
	}
	if err := serve(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "opa-bench:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	query, err := prepare(context.Background())
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/aos", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params map[string]any  `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		decision, err := decide(r.Context(), query, req.Params)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"decision":%q}}`, req.ID, decision)
	})
	return (&http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe()
}

func prepare(ctx context.Context) (rego.PreparedEvalQuery, error) {
	q, err := rego.New(rego.Query("data.vigil.decision"), rego.Module("policy.rego", policy)).PrepareForEval(ctx)
	if err != nil {
		return q, fmt.Errorf("prepare the policy: %w", err)
	}
	return q, nil
}

func decide(ctx context.Context, q rego.PreparedEvalQuery, params map[string]any) (string, error) {
	rs, err := q.Eval(ctx, rego.EvalInput(params))
	if err != nil {
		return "", fmt.Errorf("evaluate: %w", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return "", fmt.Errorf("evaluate: %d results", len(rs))
	}
	d, ok := rs[0].Expressions[0].Value.(string)
	if !ok {
		return "", fmt.Errorf("evaluate: decision %v is not a string", rs[0].Expressions[0].Value)
	}
	return d, nil
}
