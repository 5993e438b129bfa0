package hook

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

// TestVerdictOfAsk: only a deny every one of whose reasons is ASK_USER is handed to the
// developer; a deny that another rule also gave (ASK_USER with RECURSIVE_DELETE for
// `npm publish && rm -rf build`) stays a deny.
func TestVerdictOfAsk(t *testing.T) {
	call := &Call{Agent: ClaudeCode, Event: "PreToolUse", Phase: PhaseBeforeTool}
	tests := []struct {
		name  string
		codes []string
		want  Kind
	}{
		{"ask alone", []string{ReasonAsk}, Ask},
		{"ask twice", []string{ReasonAsk, ReasonAsk}, Ask},
		{"ask then another rule's hold", []string{ReasonAsk, "RECURSIVE_DELETE"}, Deny},
		{"ask then another rule's deny", []string{ReasonAsk, "PIPE_TO_SHELL"}, Deny},
		{"another rule first", []string{"PIPE_TO_SHELL", ReasonAsk}, Deny},
		{"no code", nil, Deny},
		{"other code", []string{"DANGEROUS_COMMAND"}, Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := VerdictOf(call, &aos.Result{Decision: aos.Deny, Message: "m", ReasonCode: tt.codes})
			require.Equal(t, tt.want, v.Kind)
		})
	}
}
