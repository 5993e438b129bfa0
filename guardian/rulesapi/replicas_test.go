package rulesapi

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// interleaveStore is the store of a service standing for one replica, beside another
// service on the same database: between runs a function right after the service's next
// read of the rule set, before the service writes what it decided from that read. This is
// the interleaving in which two replicas given the same request at once both pass checks
// made on their reads; here it happens every time instead of now and then.
type interleaveStore struct {
	Store
	mu   sync.Mutex
	next func()
}

// between makes fn run once, right after the next ListRules.
func (s *interleaveStore) between(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = fn
}

func (s *interleaveStore) ListRules(ctx context.Context) ([]rules.Rule, error) {
	list, err := s.Store.ListRules(ctx)
	s.mu.Lock()
	fn := s.next
	s.next = nil
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
	return list, err
}

// replicas are two services (a and b) on one database; a reads through store.
func replicas(t *testing.T) (a, b *fixture, store *interleaveStore) {
	t.Helper()
	b = newFixture(t)
	store = &interleaveStore{Store: b.db}
	a = newFixtureOn(t, b.db, func(o *Options) { o.Store = store })
	return a, b, store
}

// doBetween sends a request to f between store's next read and the write that follows it
// (in the other replica's handler goroutine), and answers its status on the channel once
// sent: the test goroutine checks it there.
func (f *fixture) doBetween(store *interleaveStore, method, path string, body any) <-chan int {
	status := make(chan int, 1)
	store.between(func() {
		code, _ := f.do(method, path, body)
		status <- code
	})
	return status
}

// answered waits for the status doBetween sends.
func answered(t *testing.T, status <-chan int) int {
	t.Helper()
	select {
	case code := <-status:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica's request was not sent: the service wrote without reading the rules first")
		return 0
	}
}

func versionOps(t *testing.T, f *fixture, id string) []string {
	t.Helper()
	vs, err := f.db.RuleVersions(context.Background(), id)
	require.NoError(t, err)
	ops := []string{}
	for _, v := range vs {
		ops = append(ops, v.Op)
	}
	return ops
}

// The QA case: POST of one id, then PUT of it with the same version, sent to two replicas
// at once. One of each is stored and the other is answered 409 as on one guardian, instead
// of both succeeding and one operator's save silently replacing the other's.
func TestReplicasCreateAndUpdateConflict(t *testing.T) {
	a, b, store := replicas(t)
	for round := range 3 {
		id := fmt.Sprintf("race-%d", round)
		bAnswer := b.doBetween(store, "POST", "/api/rules", denyTool(id, "by_b"))
		var e apiErr
		a.call("POST", "/api/rules", denyTool(id, "by_a"), http.StatusConflict, &e)
		require.Equal(t, http.StatusCreated, answered(t, bAnswer))
		require.Equal(t, "conflict", e.Error.Code)
		require.Equal(t, fmt.Sprintf("rule %q already exists: conflict", id), e.Error.Message)

		fromB, fromA := denyTool(id, "edit_b"), denyTool(id, "edit_a")
		fromB.Version, fromA.Version = 1, 1
		bAnswer = b.doBetween(store, "PUT", "/api/rules/"+id, fromB)
		a.call("PUT", "/api/rules/"+id, fromA, http.StatusConflict, &e)
		require.Equal(t, http.StatusOK, answered(t, bAnswer))
		require.Equal(t, "conflict", e.Error.Code)
		require.Equal(t, fmt.Sprintf("rule %q was changed meanwhile (now version 2, edited version 1): conflict", id), e.Error.Message)

		require.Equal(t, []string{record.RuleOpUpdate, record.RuleOpCreate}, versionOps(t, a, id))
		var got ruleJSON
		a.call("GET", "/api/rules/"+id, nil, http.StatusOK, &got)
		require.Equal(t, `tool == "edit_b"`, got.When, "the save that won is the one stored")
	}

	// An edit of a rule another replica deleted meanwhile does not bring it back.
	bAnswer := b.doBetween(store, "DELETE", "/api/rules/race-0", nil)
	var e apiErr
	a.call("PUT", "/api/rules/race-0", denyTool("race-0", "again"), http.StatusNotFound, &e)
	require.Equal(t, http.StatusOK, answered(t, bAnswer))
	require.Equal(t, `rule "race-0": not found`, e.Error.Message)
	_, err := a.db.GetRule(context.Background(), "race-0")
	require.ErrorIs(t, err, record.ErrNotFound)
}

// Replicas started together with one --rules file each import it: every rule is stored
// once, and the replica that finds it stored already writes and audits nothing (no second
// version of identical content, no rule.import entry with an empty diff).
func TestReplicasImportSameFile(t *testing.T) {
	ctx := context.Background()
	a, b, store := replicas(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	file, err := rules.MarshalFile(&rules.File{Rules: []rules.Rule{denyTool("hold-transfer", "transfer"),
		denyTool("no-email", "send_email")}}, "yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, file, 0o600))

	var nb int
	store.between(func() {
		nb, err = b.svc.ImportFile(ctx, path, ModeMerge, "rules-file")
		require.NoError(t, err)
	})
	na, err := a.svc.ImportFile(ctx, path, ModeMerge, "rules-file")
	require.NoError(t, err)
	require.Equal(t, []int{0, 2}, []int{na, nb}, "what each replica changed")
	for _, id := range []string{"hold-transfer", "no-email"} {
		require.Equal(t, []string{record.RuleOpImport}, versionOps(t, a, id), id)
	}
	audits, err := a.db.ListAudit(ctx, record.AuditQuery{Type: "rule"})
	require.NoError(t, err)
	require.Len(t, audits, 2)
	for _, e := range audits {
		require.Equal(t, "rule.import", e.Type)
		require.NotEqual(t, "[]", string(e.Diff))
	}

	// In replace mode both delete the rule the file does not name: it is deleted once,
	// and the replica whose delete finds it gone already succeeds, having nothing to do.
	_, err = b.svc.Create(ctx, denyTool("console-only", "x"), "dana")
	require.NoError(t, err)
	store.between(func() {
		nb, err = b.svc.ImportFile(ctx, path, ModeReplace, "rules-file")
		require.NoError(t, err)
	})
	na, err = a.svc.ImportFile(ctx, path, ModeReplace, "rules-file")
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, []int{na, nb})
	require.Equal(t, []string{record.RuleOpDelete, record.RuleOpCreate}, versionOps(t, a, "console-only"))
}

// Upserts (rules a hold approval remembers) and enable/disable are made again from the rule
// as stored when another replica changed it meanwhile: the same rule remembered twice is
// stored once, and a disable does not undo an edit saved between its read and its write.
func TestReplicasUpsertAndToggle(t *testing.T) {
	ctx := context.Background()
	a, b, store := replicas(t)

	remembered := denyTool("remembered", "rm")
	store.between(func() { require.NoError(t, b.svc.Upsert(ctx, remembered, "hold:h1")) })
	require.NoError(t, a.svc.Upsert(ctx, remembered, "hold:h2"))
	require.Equal(t, []string{record.RuleOpCreate}, versionOps(t, a, "remembered"))

	edited := denyTool("remembered", "rm_rf")
	store.between(func() {
		_, err := b.svc.Update(ctx, edited, "dana")
		require.NoError(t, err)
	})
	got, err := a.svc.SetEnabled(ctx, "remembered", false, "eli")
	require.NoError(t, err)
	require.False(t, got.Enabled)
	require.Equal(t, `tool == "rm_rf"`, got.When, "the edit saved meanwhile is kept")
	require.Equal(t, 3, got.Version)
	stored, err := a.db.GetRule(ctx, "remembered")
	require.NoError(t, err)
	require.Equal(t, got, stored)
	require.Equal(t, []string{record.RuleOpDisable, record.RuleOpUpdate, record.RuleOpCreate}, versionOps(t, a, "remembered"))

	// Disabled by both at once: one disable is stored.
	_, err = a.svc.SetEnabled(ctx, "remembered", true, "eli")
	require.NoError(t, err)
	store.between(func() {
		_, err := b.svc.SetEnabled(ctx, "remembered", false, "dana")
		require.NoError(t, err)
	})
	got, err = a.svc.SetEnabled(ctx, "remembered", false, "eli")
	require.NoError(t, err)
	require.False(t, got.Enabled)
	require.Equal(t, 5, got.Version)

	// A rule deleted meanwhile is not brought back by a disable.
	store.between(func() {
		_, err := b.svc.Delete(ctx, "remembered", "dana")
		require.NoError(t, err)
	})
	_, err = a.svc.SetEnabled(ctx, "remembered", true, "eli")
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = a.db.GetRule(ctx, "remembered")
	require.ErrorIs(t, err, record.ErrNotFound)
}
