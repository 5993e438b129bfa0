// Command goagent is a small support agent that reports every step of one conversation to a
// Vigil guardian and obeys its decisions: a user message, a knowledge retrieval, a tool call
// and its result, and the agent's answer.
//
//	go run ./examples/goagent -url http://127.0.0.1:7878/aos
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:7878/aos", "the guardian's AOS endpoint")
	apiKey := flag.String("api-key", "", "bearer token, if the guardian requires one")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long to wait for each decision (a held step waits for an operator)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var opts []aos.ClientOption
	if *apiKey != "" {
		opts = append(opts, aos.WithAPIKey(*apiKey))
	}
	a := &agent{client: aos.NewClient(*url, opts...), out: os.Stdout, timeout: *timeout,
		session: "goagent-" + strconv.FormatInt(time.Now().Unix(), 10)}
	if err := a.run(ctx); err != nil {
		slog.Error("goagent", "err", err)
		os.Exit(1)
	}
}

type agent struct {
	client  *aos.Client
	out     io.Writer
	timeout time.Duration
	session string
	step    int
}

var profile = aos.Agent{
	ID:           "goagent-support",
	Name:         "Go support agent",
	Instructions: "Help customers with their orders. Refunds over 500 EUR need approval.",
	Version:      "1.0.0",
	Provider:     aos.AgentProvider{Name: "Acme", URL: "https://acme.example"},
	Model:        &aos.Model{ID: "gpt-4o", Name: "GPT-4o", Provider: aos.LlmProvider{Name: "OpenAI"}},
	Tools: []aos.ToolDefinition{{
		ID: "refund_payment", Name: "refund_payment", Type: "function_call",
		Description: "Refund part or all of a payment.",
		Arguments: []aos.ToolArgumentDefinition{
			{Name: "orderId", Type: "string", Required: true},
			{Name: "amount", Type: "number", Required: true},
		},
	}},
}

// nextContext returns the StepContext of the next step of turn 1.
func (a *agent) nextContext() aos.StepContext {
	a.step++
	return aos.StepContext{
		Agent:   profile,
		Session: aos.Session{ID: a.session},
		TurnID:  "turn-1",
		StepID:  "step-" + strconv.Itoa(a.step),
		User:    &aos.User{ID: "user-4821", Name: "Dana Whitfield", Organization: aos.Organization{ID: "customers"}},
	}
}

// ask sends one step and prints the decision.
func (a *agent) ask(ctx context.Context, what string, send func(context.Context) (*aos.Result, error)) (*aos.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	res, err := send(ctx)
	if err != nil {
		var rpcErr *aos.Error
		if errors.As(err, &rpcErr) {
			return nil, fmt.Errorf("%s: the guardian rejected the step: %w", what, rpcErr)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	fmt.Fprintf(a.out, "%-22s %-6s %s\n", what, res.Decision, res.Message)
	return res, nil
}

func (a *agent) run(ctx context.Context) error {
	c := a.client
	if _, err := c.Ping(ctx); err != nil {
		return fmt.Errorf("guardian not reachable: %w", err)
	}
	fmt.Fprintln(a.out, "session", a.session)

	prompt := "My order A-10023 never arrived. Please refund the 89.90 EUR."
	res, err := a.ask(ctx, "user message", func(ctx context.Context) (*aos.Result, error) {
		return c.Message(ctx, a.nextContext(), aos.Message{ID: "m1", Role: aos.RoleUser, Content: []aos.Part{aos.TextPart{Text: prompt}}}, nil, "")
	})
	if err != nil {
		return err
	}
	if res.Decision == aos.Deny {
		fmt.Fprintln(a.out, "the guardian blocked the prompt; stopping")
		return nil
	}

	if _, err := a.ask(ctx, "knowledge retrieval", func(ctx context.Context) (*aos.Result, error) {
		return c.KnowledgeRetrieval(ctx, a.nextContext(), aos.KnowledgeRetrievalStepParams{
			Query: "refund policy for undelivered orders",
			Results: []aos.KnowledgeRetrievalResult{{ID: "kb-refunds",
				Content: "Undelivered orders older than 10 days are refunded in full."}},
		}, "Check the refund policy before refunding.")
	}); err != nil {
		return err
	}

	call := aos.ToolCallRequest{ExecutionID: "exec-1", ToolID: "refund_payment", Inputs: []aos.ToolArgumentValue{
		{Name: "orderId", Value: "A-10023"}, {Name: "amount", Value: 89.90}}}
	res, err = a.ask(ctx, "tool call request", func(ctx context.Context) (*aos.Result, error) {
		return c.ToolCallRequest(ctx, a.nextContext(), call, "Policy allows a full refund.")
	})
	if err != nil {
		return err
	}
	answer := "I've refunded 89.90 EUR for order A-10023."
	switch res.Decision {
	case aos.Deny:
		answer = "I can't issue that refund myself; a colleague will follow up."
	case aos.Modify:
		// Use the guardian's version of the call.
		raw, err := res.ModifiedParams()
		if err != nil {
			return err
		}
		var p aos.ToolCallRequestParams
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("modified tool call: %w", err)
		}
		call = p.ToolCallRequest
		fmt.Fprintf(a.out, "%-22s using the modified inputs %v\n", "", call.Inputs)
	}
	if res.Decision != aos.Deny {
		output := `{"refundId":"rf_3Kx81","status":"pending"}`
		if _, err := a.ask(ctx, "tool call result", func(ctx context.Context) (*aos.Result, error) {
			return c.ToolCallResult(ctx, a.nextContext(), call.ExecutionID, aos.ToolCallResult{Outputs: []aos.TextPart{{Text: output}}})
		}); err != nil {
			return err
		}
	}

	res, err = a.ask(ctx, "agent message", func(ctx context.Context) (*aos.Result, error) {
		return c.Message(ctx, a.nextContext(), aos.Message{ID: "m2", Role: aos.RoleAgent, Content: []aos.Part{aos.TextPart{Text: answer}}},
			[]aos.Source{aos.FileSource{ID: "kb-refunds", Name: "Refund policy"}}, "Confirm the outcome to the customer.")
	})
	if err != nil {
		return err
	}
	switch res.Decision {
	case aos.Deny:
		return nil
	case aos.Modify:
		raw, err := res.ModifiedParams()
		if err != nil {
			return err
		}
		var p aos.MessageParams
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("modified answer: %w", err)
		}
		answer = (&aos.Step{Message: &p}).Text()
	}
	fmt.Fprintln(a.out, "\nagent:", answer)
	return nil
}
