package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// interruptedMessage is the message of a step whose hold its guardian's stop interrupted.
const interruptedMessage = "The guardian stopped while this step was held for review; its agent got no answer."

// RecordInterrupted stores the steps of holds a previous run left pending (see
// holds.Manager.Interrupted). A held step is stored once it is decided, so without this a
// crash would leave the hold pointing at a step and a session that do not exist. Each is
// stored as it arrived, held, and denied: nobody let it through, and its agent, whose
// connection ended with the process, never got an answer (the step has no response). The
// hold is then linked to the step. Call it before serving traffic. A step that cannot be
// stored does not keep the others from being: the errors are returned together.
func (g *Guardian) RecordInterrupted(ctx context.Context, hs []record.Hold) error {
	var errs []error
	for _, h := range hs {
		var rec record.StepRecord
		if step, err := aos.ParseStoredStep(h.Request); err == nil {
			v := Verdict{Decision: string(aos.Deny), RuleID: h.RuleID, Message: interruptedMessage,
				ReasonCodes: []string{holds.ReasonRestarting}, Matches: holdMatches(h)}
			rec = g.record(step, h.SessionID, v, h.CreatedAt, true)
		} else {
			rec = interruptedStep(h)
		}
		rec.Response = json.RawMessage("null")
		if err := g.store.SaveStep(ctx, &rec); err != nil {
			errs = append(errs, fmt.Errorf("guardian: store the step of interrupted hold %s: %w", h.ID, err))
			continue
		}
		if g.holds != nil {
			if err := g.holds.AttachStep(ctx, h.ID, rec.Seq); err != nil {
				errs = append(errs, fmt.Errorf("guardian: link interrupted hold %s to step %d: %w", h.ID, rec.Seq, err))
			}
		}
		g.log.Info("stored the step of a hold interrupted by a stop", "hold", h.ID, "session", h.SessionID, "seq", rec.Seq)
		if g.pub != nil {
			g.pub.PublishStep(&rec)
		}
	}
	return errors.Join(errs...)
}

// interruptedStep is the record of an interrupted hold's step from the hold alone, for a
// request that no longer parses (one stored by an older version, say): what the hold
// knows, and the request kept as it was.
func interruptedStep(h record.Hold) record.StepRecord {
	return record.StepRecord{
		SessionID: h.SessionID, AgentID: h.AgentID, Method: h.Method, Kind: h.Kind, Tool: h.Tool,
		Decision: string(aos.Deny), ReceivedAt: h.CreatedAt.UTC(), Request: h.Request, Held: true,
		MatchedRules: holdMatches(h),
	}
}

// holdMatches is the match a stored hold still tells of: the rule that held the step.
func holdMatches(h record.Hold) []record.RuleMatch {
	if h.RuleID == "" {
		return []record.RuleMatch{}
	}
	return []record.RuleMatch{{RuleID: h.RuleID, Action: DecisionHold, Mode: string(rules.ModeEnforce)}}
}
