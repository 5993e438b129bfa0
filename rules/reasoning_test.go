package rules

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// reasoningFmt is reasoning as first written with fmt: the reference for the concatenating
// version.
func reasoningFmt(v Verdict, decider *hit, hits []hit) string {
	var b strings.Builder
	if decider == nil {
		fmt.Fprintf(&b, "no enforced rule matched; default decision %s", v.Action)
	} else if decider.err != nil {
		fmt.Fprintf(&b, "rule %s failed (%s); error policy decided %s", decider.r.ID, errorText(decider.err), v.Action)
	} else {
		fmt.Fprintf(&b, "rule %s decided %s (priority %d)", decider.r.ID, v.Action, decider.r.Priority)
	}
	var also, monitor, failed []string
	for i := range hits {
		h := &hits[i]
		if h == decider {
			continue
		}
		switch {
		case h.err != nil:
			failed = append(failed, fmt.Sprintf("%s (%s, %s: %s)", h.r.ID, h.r.mode, h.action, errorText(h.err)))
		case h.decides:
			also = append(also, fmt.Sprintf("%s (%s)", h.r.ID, h.action))
		default:
			monitor = append(monitor, fmt.Sprintf("%s (%s)", h.r.ID, h.action))
		}
	}
	if len(also) > 0 {
		b.WriteString("; also matched: ")
		b.WriteString(strings.Join(also, ", "))
	}
	if len(monitor) > 0 {
		b.WriteString("; monitor only: ")
		b.WriteString(strings.Join(monitor, ", "))
	}
	if len(failed) > 0 {
		b.WriteString("; failed: ")
		b.WriteString(strings.Join(failed, ", "))
	}
	return b.String()
}

// TestReasoningMatchesFmt: the reasoning of random combinations of matches and failures is
// the text the fmt version wrote.
func TestReasoningMatchesFmt(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 16))
	actions := []Action{ActionAllow, ActionDeny, ActionHold, ActionModify}
	modes := []Mode{ModeEnforce, ModeMonitor}
	for range 2000 {
		hits := make([]hit, r.IntN(5))
		for i := range hits {
			cr := &compiledRule{mode: modes[r.IntN(2)]}
			cr.ID = fmt.Sprintf("rule-%d", r.IntN(100))
			cr.Priority = r.IntN(21) - 10
			hits[i] = hit{r: cr, action: actions[r.IntN(4)], decides: r.IntN(2) == 0}
			if r.IntN(4) == 0 {
				hits[i].err = errors.New("boom " + fmt.Sprint(r.IntN(9)))
			}
		}
		v := Verdict{Action: actions[r.IntN(4)]}
		var decider *hit
		if len(hits) > 0 && r.IntN(2) == 0 {
			decider = &hits[r.IntN(len(hits))]
		}
		require.Equal(t, reasoningFmt(v, decider, hits), reasoning(v, decider, hits))
	}
}
