package rulesapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

const fileAB = `rules:
  - id: a
    when: tool == "rm"
    action: deny
  - id: b
    when: tool == "curl"
    action: hold
    hold: {timeout: 5m, onTimeout: allow}
`

func TestImportMergeAndReplace(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	type importResult struct {
		Changed int        `json:"changed"`
		Rules   []ruleJSON `json:"rules"`
	}
	var res importResult
	f.call("POST", "/api/rules/import?mode=merge", fileAB, http.StatusOK, &res)
	require.Equal(t, 2, res.Changed)
	require.Len(t, res.Rules, 2)

	// b changes, c is new, a is untouched.
	merge := `rules:
  - id: b
    when: tool == "curl" || tool == "wget"
    action: hold
    hold: {timeout: 5m, onTimeout: allow}
  - id: c
    when: tool == "ssh"
    action: deny
`
	f.call("POST", "/api/rules/import?mode=merge", merge, http.StatusOK, &res)
	require.Equal(t, 2, res.Changed)
	require.Len(t, res.Rules, 3)
	versions := func(id string) []record.RuleVersion {
		vs, err := f.db.RuleVersions(ctx, id)
		require.NoError(t, err)
		return vs
	}
	require.Len(t, versions("a"), 1)
	require.Len(t, versions("b"), 2)
	require.Equal(t, "import", versions("b")[0].Op)
	require.Equal(t, rules.ActionHold, f.svc.Engine().Evaluate(toolEnv("wget")).Action)

	// The same file again changes nothing and publishes nothing.
	n := len(f.published())
	f.call("POST", "/api/rules/import?mode=merge", merge, http.StatusOK, &res)
	require.Zero(t, res.Changed)
	require.Len(t, f.published(), n)

	// Replace: only c remains (unchanged, so still version 1); a and b are deleted with
	// their history kept.
	f.call("POST", "/api/rules/import", "rules:\n  - {id: c, when: tool == \"ssh\", action: deny}\n", http.StatusOK, &res)
	require.Equal(t, 2, res.Changed)
	require.Len(t, res.Rules, 1)
	require.Equal(t, "c", res.Rules[0].ID)
	require.Equal(t, 1, res.Rules[0].Version)
	require.Equal(t, "delete", versions("a")[0].Op)
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("rm")).Action)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("ssh")).Action)

	// JSON files import too.
	f.call("POST", "/api/rules/import?mode=merge", `{"rules":[{"id":"j","when":"tool == \"x\"","action":"deny"}]}`, http.StatusOK, &res)
	require.Equal(t, 1, res.Changed)

	var e apiErr
	f.call("POST", "/api/rules/import?mode=sideways", fileAB, http.StatusBadRequest, &e)
	require.Equal(t, "invalid_request", e.Error.Code)
	f.call("POST", "/api/rules/import", "  \n", http.StatusBadRequest, &e)
	require.Equal(t, "invalid_request", e.Error.Code)
}

func TestImportErrorsCarryFilePositions(t *testing.T) {
	f := newFixture(t)
	f.call("POST", "/api/rules/import", fileAB, http.StatusOK, nil)
	before := f.svc.Engine().Rules()

	var e apiErr
	f.call("POST", "/api/rules/import", "rules:\n  - id: a\n    when: [unclosed\n", http.StatusBadRequest, &e)
	require.Equal(t, "invalid_file", e.Error.Code)
	require.Contains(t, e.Error.Message, "import.yaml:")

	bad := "rules:\n  - id: a\n    when: tool == \"rm\"\n    action: deny\n  - id: z\n    when: tool == \"x\" && nope\n    action: deny\n"
	f.call("POST", "/api/rules/import", bad, http.StatusBadRequest, &e)
	require.Equal(t, "invalid_rule", e.Error.Code)
	require.Len(t, e.Error.Details, 1)
	d := e.Error.Details[0]
	require.Equal(t, "z", d.RuleID)
	require.Equal(t, 6, d.FileLine)
	require.Equal(t, 26, d.FileColumn, "%+v", d)

	// Nothing changed: b is still there, z is not.
	require.Equal(t, before, f.svc.Engine().Rules())
	_, err := f.db.GetRule(context.Background(), "b")
	require.NoError(t, err)
}

func TestExportRoundTrip(t *testing.T) {
	src := newFixture(t)
	ctx := context.Background()
	exp := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	all := []rules.Rule{
		denyTool("plain", "rm"),
		{ID: "held", When: `tool == "pay"`, Action: rules.ActionHold, Mode: rules.ModeEnforce, Enabled: true,
			Hold: &rules.HoldSpec{Timeout: rules.Duration(90 * time.Second), OnTimeout: rules.ActionAllow}, Priority: 5},
		{ID: "redact", When: `len(pii(text)) > 0`, Action: rules.ActionModify, Mode: rules.ModeMonitor, Enabled: false,
			Modify:      &rules.ModifySpec{Redact: []string{"pii", "ACCT-[0-9]{6}"}, Set: map[string]string{"to": `"ops@corp.example"`}},
			Description: "multi\nline", ExpiresAt: &exp},
	}
	for _, r := range all {
		_, err := src.svc.Create(ctx, r, "dana")
		require.NoError(t, err)
	}
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			resp, err := src.srv.Client().Get(src.srv.URL + "/api/rules/export?format=" + format)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, `attachment; filename="vigil-rules.`+format+`"`, resp.Header.Get("Content-Disposition"))
			require.Contains(t, resp.Header.Get("Content-Type"), format)

			dst := newFixture(t)
			path := filepath.Join(t.TempDir(), "rules."+format)
			require.NoError(t, os.WriteFile(path, body, 0o600))
			n, err := dst.svc.ImportFile(ctx, path, ModeReplace, "file")
			require.NoError(t, err)
			require.Equal(t, len(all), n)
			got, err := dst.db.ListRules(ctx)
			require.NoError(t, err)
			want, err := src.db.ListRules(ctx)
			require.NoError(t, err)
			require.Len(t, got, len(want))
			for i := range want {
				require.True(t, sameContent(want[i], got[i]), "%+v\n%+v", want[i], got[i])
			}
		})
	}
	var e apiErr
	src.call("GET", "/api/rules/export?format=xml", nil, http.StatusBadRequest, &e)
}

func TestStartRefusesStoredRulesThatDoNotCompile(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.call("POST", "/api/rules", denyTool("fine", "rm"), http.StatusCreated, nil)
	// Written behind the service's back, as a database from another version could hold it.
	_, _, err := f.db.SaveRule(ctx, rules.Rule{ID: "broken", When: "tool == ", Action: rules.ActionDeny, Enabled: true},
		"other", record.RuleOpCreate)
	require.NoError(t, err)

	svc := New(Options{Store: f.db})
	err = svc.Start(ctx)
	require.Error(t, err)
	var inv *InvalidRulesError
	require.ErrorAs(t, err, &inv)
	require.Len(t, inv.Diagnostics, 1)
	require.Equal(t, "broken", inv.Diagnostics[0].RuleID)
	require.Contains(t, err.Error(), "rule broken: when:")
	require.Empty(t, svc.Engine().Rules(), "nothing is half-loaded")

	// A merge import cannot help: the broken rule would stay in the set.
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fileAB), 0o600))
	_, err = svc.ImportFile(ctx, path, ModeMerge, "file")
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "broken", inv.Diagnostics[0].RuleID)
	// A replace import, before Start, is the way out.
	n, err := svc.ImportFile(ctx, path, ModeReplace, "file")
	require.NoError(t, err)
	require.Equal(t, 4, n, "a and b created, fine and broken deleted")
	require.NoError(t, svc.Start(ctx))
	require.Len(t, svc.Engine().Rules(), 2)
}

func TestReloadFromFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fileAB), 0o600))

	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	f := newFixtureOn(t, db, func(o *Options) { o.RulesFile = path })

	// As `vigil serve --rules FILE` does at start.
	n, err := f.svc.ImportFile(ctx, path, ModeMerge, "file")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	f.call("POST", "/api/rules", denyTool("ui-made", "ftp"), http.StatusCreated, nil)

	// The console learns which rules the file sets, to warn before an edit it would undo.
	var listed struct {
		Rules []map[string]any `json:"rules"`
	}
	f.call("GET", "/api/rules", nil, http.StatusOK, &listed)
	fromFile := map[string]bool{}
	for _, r := range listed.Rules {
		fromFile[r["id"].(string)], _ = r["fromFile"].(bool)
	}
	require.Equal(t, map[string]bool{"a": true, "b": true, "ui-made": false}, fromFile)
	var one map[string]any
	f.call("GET", "/api/rules/a", nil, http.StatusOK, &one)
	require.Equal(t, true, one["fromFile"])

	// A restart with the same file: nothing changes, the operator's rule stays.
	svc2 := New(Options{Store: db})
	require.NoError(t, svc2.Start(ctx))
	n, err = svc2.ImportFile(ctx, path, ModeMerge, "file")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, svc2.Engine().Rules(), 3)

	// The file is edited, then reloaded over the API.
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(fileAB, `tool == "rm"`, `tool == "rmdir"`, 1)), 0o600))
	var res struct {
		Changed int    `json:"changed"`
		File    string `json:"file"`
	}
	f.call("POST", "/api/rules/reload", nil, http.StatusOK, &res)
	require.Equal(t, 1, res.Changed)
	require.Equal(t, path, res.File)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("rmdir")).Action)
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("rm")).Action)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("ftp")).Action, "merge keeps other rules")

	// A broken file is refused with its position and the running rules stay.
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - id: a\n    when: tool ==\n    action: deny\n"), 0o600))
	_, err = f.svc.Reload(ctx, "sighup")
	var inv *InvalidRulesError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, path, inv.Diagnostics[0].File)
	require.Equal(t, 3, inv.Diagnostics[0].FileLine)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("rmdir")).Action)

	_, err = f.svc.ImportFile(ctx, filepath.Join(t.TempDir(), "missing.yaml"), ModeMerge, "file")
	require.ErrorIs(t, err, os.ErrNotExist)

	other := newFixture(t)
	var e apiErr
	other.call("POST", "/api/rules/reload", nil, http.StatusBadRequest, &e)
	require.Contains(t, e.Error.Message, "no rules file")
}

// TestConcurrentEvaluateSeesWholeSets swaps between two rule sets while steps are being
// evaluated: every verdict must come from one set entirely.
func TestConcurrentEvaluateSeesWholeSets(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	set := func(name string) string {
		return fmt.Sprintf("rules:\n  - {id: %[1]s-1, when: 'true', action: deny, reasonCode: %[1]s_1}\n"+
			"  - {id: %[1]s-2, when: 'tool != \"\"', action: deny, reasonCode: %[1]s_2}\n", name)
	}
	dir := t.TempDir()
	files := map[string]string{}
	for _, name := range []string{"a", "b"} {
		files[name] = filepath.Join(dir, name+".yaml")
		require.NoError(t, os.WriteFile(files[name], []byte(set(name)), 0o600))
	}
	_, err := f.svc.ImportFile(ctx, files["a"], ModeReplace, "file")
	require.NoError(t, err)

	var (
		stop      atomic.Bool
		wg        sync.WaitGroup
		evaluated atomic.Int64
		bad       = make(chan string, 1)
	)
	for range 2 {
		wg.Go(func() {
			env := toolEnv("anything")
			for !stop.Load() {
				v := f.svc.Engine().Evaluate(env)
				codes := strings.Join(v.ReasonCodes, ",")
				if codes != "a_1,a_2" && codes != "a_2,a_1" && codes != "b_1,b_2" && codes != "b_2,b_1" {
					select {
					case bad <- codes:
					default:
					}
				}
				evaluated.Add(1)
			}
		})
	}
	for i := range 20 {
		name := []string{"b", "a"}[i%2]
		n, err := f.svc.ImportFile(ctx, files[name], ModeReplace, "file")
		require.NoError(t, err)
		require.Equal(t, 4, n)
	}
	stop.Store(true)
	wg.Wait()
	close(bad)
	require.Empty(t, <-bad, "a verdict mixed two rule sets")
	require.Positive(t, evaluated.Load())
}

// failingEngine refuses every Load after the first `ok` ones.
type failingEngine struct {
	*rules.Engine
	ok atomic.Int32
}

func (e *failingEngine) Load(rs []rules.Rule) error {
	if e.ok.Add(-1) < 0 {
		return errors.New("engine refused the set")
	}
	return e.Engine.Load(rs)
}

func TestEngineFailureRevertsTheStore(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.call("POST", "/api/rules", denyTool("keep", "rm"), http.StatusCreated, nil)

	fe := &failingEngine{Engine: f.svc.live}
	fe.ok.Store(0)
	f.svc.engine = fe
	var e apiErr
	f.call("PUT", "/api/rules/keep", denyTool("keep", "ls"), http.StatusInternalServerError, &e)
	require.Equal(t, "internal", e.Error.Code)

	// The store holds the old content again, as a new version; the engine never changed.
	got, err := f.db.GetRule(ctx, "keep")
	require.NoError(t, err)
	require.Equal(t, `tool == "rm"`, got.When)
	require.Equal(t, 3, got.Version)
	vs, err := f.db.RuleVersions(ctx, "keep")
	require.NoError(t, err)
	require.Equal(t, "revert", vs[0].Op)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("rm")).Action)

	// A refused create is undone by a delete.
	f.call("POST", "/api/rules", denyTool("new", "ls"), http.StatusInternalServerError, &e)
	_, err = f.db.GetRule(ctx, "new")
	require.ErrorIs(t, err, record.ErrNotFound)

	// Live clients saw each change and its revert.
	var ops []string
	for _, ev := range f.published() {
		if ev.Type != record.EventRuleChanged {
			continue // the audit entries of the same changes
		}
		var p record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(ev.Payload, &p))
		ops = append(ops, p.Op+" "+p.RuleID+strings.Join(p.RuleIDs, ","))
	}
	require.Equal(t, []string{"create keep", "update keep", "reload keep", "create new", "reload new"}, ops)
}
