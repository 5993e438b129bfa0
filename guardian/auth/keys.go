package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// KeyPrefix starts every API key, so a leaked key is recognisable (e.g. by secret scanners).
const KeyPrefix = "vgl_"

// keySecretBytes is the key's randomness; keyTextLen its length as text (prefix plus the
// unpadded base64url of 32 bytes).
const (
	keySecretBytes = 32
	keyTextLen     = len(KeyPrefix) + (keySecretBytes*8+5)/6
	// keyShownChars is how much of a key is stored in clear to tell keys apart in lists.
	keyShownChars = len(KeyPrefix) + 6
)

// hashKey is how a key is stored and looked up. A key carries 256 random bits, so no
// guessing attack on its hash is feasible and a slow password hash would buy nothing while
// costing every agent request; a plain SHA-256 is the right tool (it is not for passwords).
func hashKey(text string) [sha256.Size]byte { return sha256.Sum256([]byte(text)) }

// newKeyText returns a new random API key.
func newKeyText() (string, error) {
	var b [keySecretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: generate key: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// randomToken returns n random bytes as unpadded base64url.
func randomToken(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// keyEntry is one key held in memory. Everything but revoked, lastUsed and flushed is
// fixed once the key exists.
type keyEntry struct {
	id, name, agentID string
	hash              [sha256.Size]byte
	expires           time.Time
	scope             *agentKey // what AgentMiddleware puts in the context
	// revoked only ever goes from false to true.
	revoked atomic.Bool
	// lastUsed is unix nanoseconds of the last accepted request, kept in memory and written
	// by Run in batches: a write per agent request would cost more than the request.
	lastUsed atomic.Int64
	// flushed is the lastUsed value last written; Run's goroutine alone touches it.
	flushed int64
}

func newKeyEntry(k record.APIKey) (*keyEntry, error) {
	if len(k.Hash) != sha256.Size {
		return nil, fmt.Errorf("auth: api key %s: stored hash has %d bytes", k.ID, len(k.Hash))
	}
	e := &keyEntry{id: k.ID, name: k.Name, agentID: k.AgentID, expires: k.ExpiresAt,
		scope: &agentKey{id: k.ID, agentID: k.AgentID}}
	copy(e.hash[:], k.Hash)
	e.revoked.Store(!k.RevokedAt.IsZero())
	if !k.LastUsedAt.IsZero() {
		e.lastUsed.Store(k.LastUsedAt.UnixNano())
		e.flushed = k.LastUsedAt.UnixNano()
	}
	return e, nil
}

// keyTable is an immutable snapshot of the keys; the cache swaps in a new one on change, so
// the request path reads it without locks.
type keyTable struct {
	byHash map[[sha256.Size]byte]*keyEntry
	byID   map[string]*keyEntry
}

// keyCache holds every key in memory (keys are few: one per agent or so).
type keyCache struct {
	table atomic.Pointer[keyTable]
	mu    sync.Mutex // serialises table swaps
	// exist is true once any key was ever created: from then on /aos requires one.
	exist atomic.Bool
}

func (c *keyCache) init() {
	c.table.Store(&keyTable{byHash: map[[sha256.Size]byte]*keyEntry{}, byID: map[string]*keyEntry{}})
}

// add puts e in the table, keeping the entry already there for the same id.
func (c *keyCache) add(e *keyEntry) *keyEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.table.Load()
	if cur, ok := old.byID[e.id]; ok {
		if e.revoked.Load() {
			cur.revoked.Store(true)
		}
		return cur
	}
	t := &keyTable{byHash: make(map[[sha256.Size]byte]*keyEntry, len(old.byHash)+1),
		byID: make(map[string]*keyEntry, len(old.byID)+1)}
	for h, v := range old.byHash {
		t.byHash[h] = v
	}
	for id, v := range old.byID {
		t.byID[id] = v
	}
	t.byHash[e.hash] = e
	t.byID[e.id] = e
	c.table.Store(t)
	c.exist.Store(true)
	return e
}

// refreshKeys reloads the keys from the database, keeping the in-memory state of keys it
// already holds. Revocations only ever add: a key revoked here is never un-revoked.
func (a *Auth) refreshKeys(ctx context.Context) error {
	rows, err := a.store.APIKeys(ctx)
	if err != nil {
		return fmt.Errorf("auth: load api keys: %w", err)
	}
	c := &a.keys
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.table.Load()
	t := &keyTable{byHash: make(map[[sha256.Size]byte]*keyEntry, len(rows)),
		byID: make(map[string]*keyEntry, len(rows))}
	for _, k := range rows {
		e, ok := old.byID[k.ID]
		if ok {
			if !k.RevokedAt.IsZero() {
				e.revoked.Store(true)
			}
		} else if e, err = newKeyEntry(k); err != nil {
			a.log.Warn("auth: skipping a damaged api key", "err", err)
			continue
		}
		t.byHash[e.hash] = e
		t.byID[e.id] = e
	}
	// Keys added to the old table since the query started (created here, or found on a
	// miss) are kept; the next refresh sees them in the database.
	for id, e := range old.byID {
		if _, ok := t.byID[id]; !ok {
			t.byHash[e.hash] = e
			t.byID[id] = e
		}
	}
	c.table.Store(t)
	if len(t.byID) > 0 {
		c.exist.Store(true)
	}
	return nil
}

// flushLastUsed writes the last-use times that changed since the previous flush. It runs on
// Run's goroutine only.
func (a *Auth) flushLastUsed(ctx context.Context) error {
	t := a.keys.table.Load()
	used := make(map[string]time.Time)
	var entries []*keyEntry
	for _, e := range t.byID {
		if lu := e.lastUsed.Load(); lu > e.flushed {
			used[e.id] = time.Unix(0, lu)
			entries = append(entries, e)
		}
	}
	if len(used) == 0 {
		return nil
	}
	if err := a.store.TouchAPIKeys(ctx, used); err != nil {
		return err
	}
	for _, e := range entries {
		e.flushed = used[e.id].UnixNano()
	}
	return nil
}

// keyError is why a presented key was refused.
type keyError struct {
	status  int
	rpc     *aos.Error
	logText string
}

var (
	errKeyMissing = &keyError{http.StatusUnauthorized, &aos.Error{Code: aos.CodeUnauthorized,
		Message: "unauthorized: an API key is required (send Authorization: Bearer <key>)"}, "missing key"}
	errKeyInvalid = &keyError{http.StatusUnauthorized, &aos.Error{Code: aos.CodeUnauthorized,
		Message: "unauthorized: invalid API key"}, "invalid key"}
	errKeyRevoked = &keyError{http.StatusUnauthorized, &aos.Error{Code: aos.CodeUnauthorized,
		Message: "unauthorized: API key revoked"}, "revoked key"}
	errKeyExpired = &keyError{http.StatusUnauthorized, &aos.Error{Code: aos.CodeUnauthorized,
		Message: "unauthorized: API key expired"}, "expired key"}
	errKeyProxied = &keyError{http.StatusUnauthorized, &aos.Error{Code: aos.CodeUnauthorized,
		Message: "unauthorized: this guardian has no API keys and accepts agents without one " +
			"only directly on this machine; create a key with vigil keys create"}, "unauthenticated request through a proxy"}
	errKeyUnavailable = &keyError{http.StatusServiceUnavailable, &aos.Error{Code: aos.CodeUnavailable,
		Message: "guardian unavailable: could not check the API key"}, "key lookup failed"}
)

// verifyKey checks a presented key against the cache, looking it up in the database only
// when the cache does not know it (a key created by another process since the last
// refresh). The cache is keyed by the key's SHA-256, so a lookup's timing depends on bits
// of a hash of the secret, never on the secret itself; the final comparison is constant
// time anyway.
func (a *Auth) verifyKey(ctx context.Context, text, client string, now time.Time) (*keyEntry, *keyError) {
	if text == "" {
		return nil, errKeyMissing
	}
	if len(text) != keyTextLen || !strings.HasPrefix(text, KeyPrefix) {
		return nil, errKeyInvalid
	}
	h := hashKey(text)
	e := a.keys.table.Load().byHash[h]
	if e == nil {
		// Each miss costs a query: limit them per client so a flood of made-up keys cannot
		// turn into a flood of database reads.
		if ok, _ := a.misses.allow(bucketKey{kind: 'm', id: client}, now); !ok {
			return nil, errKeyInvalid
		}
		k, err := a.store.APIKeyByHash(ctx, h[:])
		if errors.Is(err, record.ErrNotFound) {
			return nil, errKeyInvalid
		}
		if err != nil {
			a.log.Error("auth: look up api key", "err", err)
			return nil, errKeyUnavailable
		}
		ne, err := newKeyEntry(k)
		if err != nil {
			a.log.Error("auth: look up api key", "err", err)
			return nil, errKeyInvalid
		}
		e = a.keys.add(ne)
	}
	if subtle.ConstantTimeCompare(e.hash[:], h[:]) != 1 {
		return nil, errKeyInvalid
	}
	if e.revoked.Load() {
		return nil, errKeyRevoked
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return nil, errKeyExpired
	}
	// Write the shared word at most once a second per key, so that concurrent requests of
	// one agent do not fight over its cache line.
	n := now.UnixNano()
	if n-e.lastUsed.Load() >= int64(time.Second) {
		e.lastUsed.Store(n)
	}
	return e, nil
}

// bearer returns the token of an "Authorization: Bearer …" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// AgentMiddleware authenticates /aos requests and applies the per-agent request rate.
// When agent authentication is on (a key exists, or Config.RequireAgentKeys), a request
// without a valid key gets HTTP 401 with a JSON-RPC error -32004; a presented key is
// checked even when authentication is off. A request over the rate gets HTTP 429 with a
// JSON-RPC error -32003, data {"retryAfterMs": n} and a Retry-After header. The key's agent
// scope is available to the handler through AgentScope and CheckAgent.
func (a *Auth) AgentMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, refusal := a.admitAgent(r, bearer(r), "aos", errKeyMissing)
		if refusal != nil {
			if refusal.retry > 0 {
				writeRateLimited(w, refusal.bucket, refusal.retry, a.cfg.AgentRate)
				return
			}
			if refusal.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="vigil"`)
			}
			writeRPCError(w, refusal.status, refusal.rpc)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// GatewayKeyHeader carries the agent key of a request to a gateway route (/agentapi/…,
// /aap/…): the client's own Authorization header belongs to the upstream.
const GatewayKeyHeader = "X-Vigil-Key"

// errGatewayKeyMissing is errKeyMissing for gateway routes, naming their header.
var errGatewayKeyMissing = &keyError{http.StatusUnauthorized, &aos.Error{Code: aos.CodeUnauthorized,
	Message: "unauthorized: an API key is required (send " + GatewayKeyHeader + ": <key>)"}, "missing key"}

// GatewayRefusal writes a refused gateway request in the gateway's own protocol: status is
// the HTTP status (401, 429 or 503), message says why, retryAfter is set for 429.
type GatewayRefusal func(w http.ResponseWriter, status int, message string, retryAfter time.Duration)

// GatewayMiddleware authenticates requests to a gateway route the way AgentMiddleware does
// /aos (same keys, same rule for when a key is required, same per-agent rate), taking the
// key from the X-Vigil-Key header or, only when that header is absent, from an
// "Authorization: Bearer vgl_…" header. Neither reaches the handler: the key is Vigil's, not
// the upstream's; any other Authorization passes through untouched. Refusals are written by
// refuse, in the gateway's protocol (a Retry-After header is already set on a 429).
func (a *Auth) GatewayMiddleware(refuse GatewayRefusal) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, fromBearer := strings.TrimSpace(r.Header.Get(GatewayKeyHeader)), false
			if _, present := r.Header[http.CanonicalHeaderKey(GatewayKeyHeader)]; !present {
				if b := bearer(r); strings.HasPrefix(b, KeyPrefix) {
					tok, fromBearer = b, true
				}
			}
			if tok != "" || fromBearer {
				r = r.Clone(r.Context())
				r.Header.Del(GatewayKeyHeader)
				if fromBearer {
					r.Header.Del("Authorization")
				}
			}
			r, refusal := a.admitAgent(r, tok, "gateway", errGatewayKeyMissing)
			if refusal != nil {
				if refusal.retry > 0 {
					msg, ms := rateLimitedMessage(refusal.bucket, a.cfg.AgentRate, refusal.retry)
					w.Header().Set("Retry-After", strconv.FormatInt(max((ms+999)/1000, 1), 10))
					refuse(w, http.StatusTooManyRequests, msg, refusal.retry)
					return
				}
				refuse(w, refusal.status, refusal.rpc.Message, 0)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// agentRefusal is why admitAgent refused a request: a key error, or (retry > 0) the rate.
type agentRefusal struct {
	*keyError
	retry time.Duration
	// bucket is what the rate counted: the key, or the client address.
	bucket bucketKey
}

// admitAgent checks an agent request's key tok (required when agent authentication is on)
// and its rate, returning the request carrying the key for KeyOf and AgentScope.
func (a *Auth) admitAgent(r *http.Request, tok, route string, missing *keyError) (*http.Request, *agentRefusal) {
	now := a.now()
	client := clientHost(r)
	required := a.cfg.RequireAgentKeys || a.keys.exist.Load()
	var e *keyEntry
	if tok != "" || required {
		var kerr *keyError
		if tok == "" {
			kerr = missing
		} else {
			e, kerr = a.verifyKey(r.Context(), tok, client, now)
		}
		if kerr != nil {
			a.log.Info(route+": request refused", "reason", kerr.logText, "client", client)
			return r, &agentRefusal{keyError: kerr}
		}
	} else if a.localOnly() && forwarded(r) {
		// Open agent routes are meant for agents on this machine; a proxy in front makes
		// them public.
		return r, &agentRefusal{keyError: errKeyProxied}
	}
	if a.agents != nil {
		bk := bucketKey{kind: 'a', id: client}
		if e != nil {
			bk = bucketKey{kind: 'k', id: e.id}
		}
		if ok, wait := a.agents.allow(bk, now); !ok {
			return r, &agentRefusal{retry: max(wait, time.Nanosecond), bucket: bk}
		}
	}
	if e != nil {
		r = r.WithContext(context.WithValue(r.Context(), agentKeyKey, e.scope))
	}
	return r, nil
}

// writeRateLimited answers a request over the rate: HTTP 429, a Retry-After header in whole
// seconds (at least 1) and the exact wait in the JSON-RPC error's data.
func writeRateLimited(w http.ResponseWriter, k bucketKey, wait time.Duration, rate float64) {
	msg, ms := rateLimitedMessage(k, rate, wait)
	w.Header().Set("Retry-After", strconv.FormatInt(max((ms+999)/1000, 1), 10))
	writeRPCError(w, http.StatusTooManyRequests, &aos.Error{
		Code:    aos.CodeRateLimited,
		Message: msg,
		Data:    map[string]any{"retryAfterMs": ms},
	})
}

// writeRPCError writes a JSON-RPC error response with a null id: the body is not read
// before authentication, so the request's id is unknown.
func writeRPCError(w http.ResponseWriter, status int, e *aos.Error) {
	b, err := json.Marshal(aos.Response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: e})
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// newKeyID returns a short random id for a new key.
func newKeyID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: generate key id: %w", err)
	}
	return "key_" + hex.EncodeToString(b[:]), nil
}
