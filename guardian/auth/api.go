package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/crypto/bcrypt"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

// Key is an API key as the console and the CLI show it: never the key itself.
type Key struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	AgentID string `json:"agentId"`
	// Prefix is the key's first characters, to tell keys apart.
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"createdAt"`
	CreatedBy  string     `json:"createdBy"`
	ExpiresAt  *time.Time `json:"expiresAt"`
	RevokedAt  *time.Time `json:"revokedAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	// Status is active, revoked or expired.
	Status string `json:"status"`
}

// User is an operator account as the console and the CLI show it.
type User struct {
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// KeySpec describes a key to create.
type KeySpec struct {
	Name string
	// AgentID scopes the key to one agent id; empty lets it speak as any agent.
	AgentID string
	// ExpiresIn is the key's lifetime; 0 means it does not expire.
	ExpiresIn time.Duration
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// keyView is key k as this server knows it.
func (a *Auth) keyView(k record.APIKey) Key {
	v := keyViewAt(k, a.now())
	// The newest use is in memory until the next flush.
	if e, ok := a.keys.table.Load().byID[k.ID]; ok {
		if lu := e.lastUsed.Load(); lu > 0 && (v.LastUsedAt == nil || lu > v.LastUsedAt.UnixNano()) {
			v.LastUsedAt = optTime(time.Unix(0, lu).UTC())
		}
	}
	return v
}

// keyViewAt is key k as the database holds it, with its status at now: what `vigil keys
// list` shows, having no server's unflushed uses to add.
func keyViewAt(k record.APIKey, now time.Time) Key {
	v := Key{ID: k.ID, Name: k.Name, AgentID: k.AgentID, Prefix: k.Prefix, CreatedAt: k.CreatedAt,
		CreatedBy: k.CreatedBy, ExpiresAt: optTime(k.ExpiresAt), RevokedAt: optTime(k.RevokedAt),
		LastUsedAt: optTime(k.LastUsedAt), Status: "active"}
	switch {
	case !k.RevokedAt.IsZero():
		v.Status = "revoked"
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		v.Status = "expired"
	}
	return v
}

func userView(u record.User) User {
	return User{Name: u.Name, Role: u.Role, CreatedAt: u.CreatedAt, UpdatedAt: u.UpdatedAt}
}

// checkText validates a short free-text field.
func checkText(field, s string, maxLen int) error {
	if len(s) > maxLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, field, maxLen)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s contains a control character", ErrInvalid, field)
		}
	}
	return nil
}

// CreateKey creates an API key and returns it with its text, which is shown this once and
// never stored. operator is recorded in the key and the audit log.
func (a *Auth) CreateKey(ctx context.Context, spec KeySpec, operator string) (Key, string, error) {
	if err := checkText("name", spec.Name, 200); err != nil {
		return Key{}, "", err
	}
	if err := checkText("agentId", spec.AgentID, 200); err != nil {
		return Key{}, "", err
	}
	if spec.AgentID != strings.TrimSpace(spec.AgentID) {
		return Key{}, "", fmt.Errorf("%w: agentId has leading or trailing spaces", ErrInvalid)
	}
	if spec.ExpiresIn < 0 {
		return Key{}, "", fmt.Errorf("%w: expiry must not be negative", ErrInvalid)
	}
	text, err := newKeyText()
	if err != nil {
		return Key{}, "", err
	}
	id, err := newKeyID()
	if err != nil {
		return Key{}, "", err
	}
	now := a.now()
	h := hashKey(text)
	k := &record.APIKey{ID: id, Name: spec.Name, AgentID: spec.AgentID, Hash: h[:],
		Prefix: text[:keyShownChars], CreatedAt: now, CreatedBy: operator}
	if spec.ExpiresIn > 0 {
		k.ExpiresAt = now.Add(spec.ExpiresIn)
	}
	detail, _ := json.Marshal(map[string]any{"keyId": id, "name": spec.Name, "agentId": spec.AgentID,
		"expiresAt": optTime(k.ExpiresAt)})
	ev, err := a.store.CreateAPIKey(ctx, k, &record.AuditEntry{Type: record.AuditKeyCreated,
		Operator: operator, Note: keyNote(id, spec.Name, spec.AgentID), Detail: detail})
	if err != nil {
		return Key{}, "", fmt.Errorf("auth: create key: %w", err)
	}
	a.emit(ev)
	e, err := newKeyEntry(*k)
	if err != nil {
		return Key{}, "", err
	}
	a.keys.add(e)
	return a.keyView(*k), text, nil
}

func keyNote(id, name, agentID string) string {
	n := "key " + id
	if name != "" {
		n += " (" + name + ")"
	}
	if agentID != "" {
		n += " for agent " + agentID
	} else {
		n += " for any agent"
	}
	return n
}

// Keys lists every API key, oldest first.
func (a *Auth) Keys(ctx context.Context) ([]Key, error) {
	ks, err := a.store.APIKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Key, len(ks))
	for i, k := range ks {
		out[i] = a.keyView(k)
	}
	return out, nil
}

// RevokeKey revokes key id. Requests with the key are refused by this server from the
// moment it returns (by other servers on the same database within their refresh interval).
func (a *Auth) RevokeKey(ctx context.Context, id, operator string) (Key, error) {
	k, ev, err := a.store.RevokeAPIKey(ctx, id, a.now(), &record.AuditEntry{Type: record.AuditKeyRevoked,
		Operator: operator, Note: keyNote(id, "", ""),
		Detail: json.RawMessage(fmt.Sprintf(`{"keyId":%q}`, id))})
	if err != nil {
		return Key{}, fmt.Errorf("auth: revoke key: %w", err)
	}
	a.emit(ev)
	if e, ok := a.keys.table.Load().byID[id]; ok {
		e.revoked.Store(true)
	} else if e, err := newKeyEntry(k); err == nil {
		a.keys.add(e)
	}
	return a.keyView(k), nil
}

// checkName validates an account name: 1 to 64 letters, digits and . _ @ -.
func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: a name has 1 to 64 characters", ErrInvalid)
	}
	for _, r := range name {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._@-", r)) {
			return fmt.Errorf("%w: a name may hold letters, digits and . _ @ - only", ErrInvalid)
		}
	}
	return nil
}

// checkPasswordRules enforces what bcrypt and common sense need.
func checkPasswordRules(pw string) error {
	switch {
	case len([]rune(pw)) < 8:
		return fmt.Errorf("%w: a password has at least 8 characters", ErrInvalid)
	case len(pw) > 72:
		// bcrypt ignores everything past 72 bytes.
		return fmt.Errorf("%w: a password has at most 72 bytes", ErrInvalid)
	}
	return nil
}

func (a *Auth) hashPassword(ctx context.Context, pw string) ([]byte, error) {
	if err := checkPasswordRules(pw); err != nil {
		return nil, err
	}
	if err := a.acquireBcrypt(ctx); err != nil {
		return nil, err
	}
	defer a.releaseBcrypt()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), a.cfg.BcryptCost)
	if err != nil {
		return nil, fmt.Errorf("auth: hash password: %w", err)
	}
	return h, nil
}

// AddUser creates an operator account. The first account turns sign-in on for the console.
func (a *Auth) AddUser(ctx context.Context, name, role, password, operator string) (User, error) {
	if err := checkName(name); err != nil {
		return User{}, err
	}
	if !ValidRole(role) {
		return User{}, fmt.Errorf("%w: role must be viewer, reviewer or admin", ErrInvalid)
	}
	hash, err := a.hashPassword(ctx, password)
	if err != nil {
		return User{}, err
	}
	u := &record.User{Name: name, Role: role, PasswordHash: hash, CreatedAt: a.now()}
	ev, err := a.store.CreateUser(ctx, u, &record.AuditEntry{Type: record.AuditUserCreated,
		Operator: operator, Note: "account " + name + " (" + role + ")",
		Detail: mustJSON(map[string]string{"name": name, "role": role})})
	if err != nil {
		return User{}, fmt.Errorf("auth: add user: %w", err)
	}
	a.emit(ev)
	return userView(*u), nil
}

// Users lists the operator accounts by name.
func (a *Auth) Users(ctx context.Context) ([]User, error) {
	us, err := a.store.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]User, len(us))
	for i, u := range us {
		out[i] = userView(u)
	}
	return out, nil
}

// RemoveUser removes an account and ends its sessions. keepAdmin refuses to remove the only
// admin at all (the console's rule: an admin cannot lock everyone out of administration);
// without it the only admin may go when no other account remains.
func (a *Auth) RemoveUser(ctx context.Context, name, operator string, keepAdmin bool) (User, error) {
	if keepAdmin {
		us, err := a.store.Users(ctx)
		if err != nil {
			return User{}, err
		}
		admins, target := 0, false
		for _, u := range us {
			if u.Role == RoleAdmin {
				admins++
				target = target || strings.EqualFold(u.Name, name)
			}
		}
		if target && admins == 1 {
			return User{}, ErrLastAdmin
		}
	}
	u, ev, err := a.store.DeleteUser(ctx, name, &record.AuditEntry{Type: record.AuditUserRemoved,
		Operator: operator, Note: "account " + name,
		Detail: mustJSON(map[string]string{"name": name})})
	if err != nil {
		return User{}, fmt.Errorf("auth: remove user: %w", err)
	}
	a.emit(ev)
	return userView(u), nil
}

// SetPassword replaces an account's password and ends its sessions.
func (a *Auth) SetPassword(ctx context.Context, name, password, operator string) error {
	hash, err := a.hashPassword(ctx, password)
	if err != nil {
		return err
	}
	ev, err := a.store.SetUserPassword(ctx, name, hash, a.now(), &record.AuditEntry{
		Type: record.AuditUserPassword, Operator: operator, Note: "password of " + name,
		Detail: mustJSON(map[string]string{"name": name})})
	if err != nil {
		return fmt.Errorf("auth: set password: %w", err)
	}
	a.emit(ev)
	return nil
}

func mustJSON(v map[string]string) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// ParseLifetime reads a key lifetime: a Go duration ("720h", "90m") or whole days ("30d");
// "", "0" and "never" mean no expiry.
func ParseLifetime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "0", "never":
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%w: lifetime %q: use e.g. 30d or 720h", ErrInvalid, s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: lifetime %q: use e.g. 30d or 720h", ErrInvalid, s)
	}
	return d, nil
}

// Register adds the sign-in routes and the admin API for keys and accounts:
//
//	POST   /api/auth/login          {"name","password"} → Me, sets the session cookie
//	POST   /api/auth/logout         ends the session
//	GET    /api/auth/me             → Me, or 401 {"error":{"code":"unauthenticated"}}
//	GET    /api/keys                → {"keys":[Key…]}
//	POST   /api/keys                {"name","agentId","expiresIn":"720h"} → {"key":Key,"secret":"vgl_…"}
//	POST   /api/keys/{id}/revoke    → Key
//	GET    /api/users               → {"users":[User…]}
//	POST   /api/users               {"name","role","password"} → User
//	DELETE /api/users/{name}        → User
//
// The admin routes check the caller themselves too, so they stay closed even on a handler
// that ConsoleMiddleware does not wrap.
func (a *Auth) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/auth/login", a.handleLogin)
	mux.HandleFunc("POST /api/auth/logout", a.handleLogout)
	mux.HandleFunc("GET /api/auth/me", a.handleMe)
	mux.HandleFunc("GET /api/keys", a.admin(a.handleListKeys))
	mux.HandleFunc("POST /api/keys", a.admin(a.handleCreateKey))
	mux.HandleFunc("POST /api/keys/{id}/revoke", a.admin(a.handleRevokeKey))
	mux.HandleFunc("GET /api/users", a.admin(a.handleListUsers))
	mux.HandleFunc("POST /api/users", a.admin(a.handleAddUser))
	mux.HandleFunc("DELETE /api/users/{name}", a.admin(a.handleRemoveUser))
}

// admin runs h for admins (or the open console), using the principal ConsoleMiddleware
// found, or checking the request itself when it did not run.
func (a *Auth) admin(h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := principalFrom(r.Context())
		if !ok {
			var aerr *apiError
			if p, aerr = a.authorize(r, RoleAdmin); aerr != nil {
				writeAPIError(w, aerr)
				return
			}
		} else if !p.open && p.role != RoleAdmin {
			writeAPIError(w, &apiError{http.StatusForbidden, "forbidden", "this needs the admin role", ""})
			return
		}
		h(w, r, p)
	}
}

// apiFailure maps an error of the management methods to an API error.
func (a *Auth) apiFailure(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrInvalid):
		writeAPIError(w, &apiError{http.StatusBadRequest, "bad_request", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "), ""})
	case errors.Is(err, record.ErrNotFound):
		writeAPIError(w, &apiError{http.StatusNotFound, "not_found", "no such key or account", ""})
	case errors.Is(err, record.ErrExists):
		writeAPIError(w, &apiError{http.StatusConflict, "conflict", "an account with that name exists", ""})
	case errors.Is(err, ErrLastAdmin), errors.Is(err, record.ErrLastAdmin):
		writeAPIError(w, &apiError{http.StatusConflict, "conflict", err.Error(), ""})
	default:
		a.log.Error("auth: admin api", "err", err)
		writeAPIError(w, errInternal)
	}
}

// maxAdminBody bounds an admin API request.
const maxAdminBody = 16 << 10

func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &apiError{http.StatusBadRequest, "bad_request", "invalid JSON body: " + err.Error(), ""}
	}
	return nil
}

// actor is who the audit log names for an admin request: the signed-in operator, or in the
// open console the "operator" the request gives.
func actor(p principal, fromBody string) string {
	if !p.open && p.name != "" {
		return p.name
	}
	return fromBody
}

func (a *Auth) handleListKeys(w http.ResponseWriter, r *http.Request, _ principal) {
	ks, err := a.Keys(r.Context())
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string][]Key{"keys": ks})
}

func (a *Auth) handleCreateKey(w http.ResponseWriter, r *http.Request, p principal) {
	var body struct {
		Name      string `json:"name"`
		AgentID   string `json:"agentId"`
		ExpiresIn string `json:"expiresIn"`
		Operator  string `json:"operator"`
	}
	if aerr := decodeBody(w, r, &body); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	life, err := ParseLifetime(body.ExpiresIn)
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	k, secret, err := a.CreateKey(r.Context(), KeySpec{Name: body.Name, AgentID: body.AgentID, ExpiresIn: life},
		actor(p, body.Operator))
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	apijson.Write(w, http.StatusCreated, struct {
		Key    Key    `json:"key"`
		Secret string `json:"secret"`
	}{k, secret})
}

func (a *Auth) handleRevokeKey(w http.ResponseWriter, r *http.Request, p principal) {
	k, err := a.RevokeKey(r.Context(), r.PathValue("id"), actor(p, r.Header.Get("X-Vigil-Operator")))
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, k)
}

func (a *Auth) handleListUsers(w http.ResponseWriter, r *http.Request, _ principal) {
	us, err := a.Users(r.Context())
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string][]User{"users": us})
}

func (a *Auth) handleAddUser(w http.ResponseWriter, r *http.Request, p principal) {
	var body struct {
		Name     string `json:"name"`
		Role     string `json:"role"`
		Password string `json:"password"`
		Operator string `json:"operator"`
	}
	if aerr := decodeBody(w, r, &body); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	u, err := a.AddUser(r.Context(), body.Name, body.Role, body.Password, actor(p, body.Operator))
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	apijson.Write(w, http.StatusCreated, u)
}

func (a *Auth) handleRemoveUser(w http.ResponseWriter, r *http.Request, p principal) {
	u, err := a.RemoveUser(r.Context(), r.PathValue("name"), actor(p, r.Header.Get("X-Vigil-Operator")), true)
	if err != nil {
		a.apiFailure(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, u)
}
