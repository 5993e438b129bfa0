package holds

import (
	"encoding/json"

	"github.com/vigil-guardian/vigil/jsonpatch"
)

// PatchOp is one operation of the JSON Patch an operator's modification is audited as.
type PatchOp = jsonpatch.Op

// Diff returns the JSON Patch that turns before into after (see jsonpatch.Diff).
func Diff(before, after json.RawMessage) ([]PatchOp, error) { return jsonpatch.Diff(before, after) }
