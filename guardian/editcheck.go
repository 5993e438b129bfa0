package guardian

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

// EditChecker judges an operator's edit of a held step with the live rules, as a step of
// its session would be judged: the session's history is its stored steps, as backtests see
// them. It is the holds' CheckEdit, so an edit cannot carry through what a deny rule
// forbids without the operator saying so.
type EditChecker struct {
	Policy Policy
	Store  interface {
		SessionStepsBefore(ctx context.Context, sessionID string, before int64, limit int) ([]record.StepRecord, error)
	}
	HistorySize int
}

// Check implements holds.CheckEditFunc.
func (c EditChecker) Check(ctx context.Context, sessionID, method string, params json.RawMessage) (holds.EditVerdict, error) {
	req, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("0"), Method: method, Params: params})
	if err != nil {
		return holds.EditVerdict{}, fmt.Errorf("params: %w", err)
	}
	step, perr := aos.ParseStep(req)
	if perr != nil {
		return holds.EditVerdict{}, perr
	}
	hist := &History{SessionID: sessionID}
	if c.Store != nil && c.HistorySize > 0 {
		recs, err := c.Store.SessionStepsBefore(ctx, sessionID, math.MaxInt64, c.HistorySize)
		if err != nil {
			return holds.EditVerdict{}, fmt.Errorf("session history: %w", err)
		}
		for _, r := range recs {
			hist.Steps = append(hist.Steps, HistoryStep(r))
		}
		hist.StepCount = len(recs)
	}
	v := c.Policy.Decide(ctx, step, hist, time.Now())
	return holds.EditVerdict{Decision: v.Decision, RuleID: v.RuleID, Message: v.Message, ReasonCodes: v.ReasonCodes}, nil
}
