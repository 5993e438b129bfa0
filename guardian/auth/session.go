package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

// Me is GET /api/auth/me, and the answer to a sign-in.
type Me struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// CSRFToken must be sent as X-CSRF-Token on every state-changing request.
	CSRFToken string `json:"csrfToken"`
	// AuthRequired is false for the open zero-config console (no accounts exist).
	AuthRequired bool `json:"authRequired"`
}

// maxLoginBody bounds a sign-in request.
const maxLoginBody = 8 << 10

// handleLogin is POST /api/auth/login {"name","password"}: on success it sets the session
// cookie and answers Me.
func (a *Auth) handleLogin(w http.ResponseWriter, r *http.Request) {
	// A page of another site cannot send a JSON content type here without a CORS preflight,
	// which the guardian never grants: so it cannot sign a visitor in to an account of its
	// choosing (login CSRF). No Origin check on top: a reverse proxy that rewrites the Host
	// would make every sign-in look cross-origin.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeAPIError(w, &apiError{http.StatusUnsupportedMediaType, "bad_request", "send the credentials as application/json", ""})
		return
	}
	var body struct {
		Name     string `json:"name"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLoginBody)).Decode(&body); err != nil {
		writeAPIError(w, &apiError{http.StatusBadRequest, "bad_request", "body must be {\"name\":…,\"password\":…}", ""})
		return
	}
	// The throttle is consulted and updated while holding a hashing slot, so that a burst of
	// parallel guesses cannot all pass the check before the first failure is recorded.
	if err := a.acquireBcrypt(r.Context()); err != nil {
		return
	}
	defer a.releaseBcrypt()
	now := a.now()
	client := clientHost(r)
	if wait := a.logins.wait(body.Name, client, now); wait > 0 {
		writeAPIError(w, loginThrottled(wait))
		return
	}
	u, known, ok, err := a.checkPassword(r.Context(), body.Name, body.Password)
	if err != nil {
		a.log.Error("auth: sign-in", "err", err)
		writeAPIError(w, errInternal)
		return
	}
	if !ok {
		wait := a.logins.fail(body.Name, client, a.now())
		a.log.Warn("auth: failed sign-in", "name", logName(body.Name, known), "client", client)
		if wait > 0 {
			writeAPIError(w, loginThrottled(wait))
			return
		}
		writeAPIError(w, &apiError{http.StatusUnauthorized, "invalid_credentials", "wrong name or password", ""})
		return
	}
	a.logins.succeed(body.Name, client)

	token, err := randomToken(32)
	if err != nil {
		writeAPIError(w, errInternal)
		return
	}
	csrf, err := randomToken(32)
	if err != nil {
		writeAPIError(w, errInternal)
		return
	}
	h := hashKey(token)
	sess := &record.AuthSession{TokenHash: h[:], UserName: u.Name, CSRFToken: csrf,
		CreatedAt: now, ExpiresAt: now.Add(a.cfg.SessionTTL)}
	ev, err := a.store.CreateAuthSession(r.Context(), sess, &record.AuditEntry{
		Type: record.AuditLogin, Operator: u.Name, Note: "signed in from " + client})
	if err != nil {
		a.log.Error("auth: create session", "err", err)
		writeAPIError(w, errInternal)
		return
	}
	a.emit(ev)
	// A session cookie already on the request (another account, or an old sign-in) ends.
	if old, err := r.Cookie(SessionCookie); err == nil && old.Value != "" && old.Value != token {
		oh := hashKey(old.Value)
		if _, _, err := a.store.DeleteAuthSession(r.Context(), oh[:], nil); err != nil {
			a.log.Warn("auth: end previous session", "err", err)
		}
		a.epoch.Add(1) // that sign-in's live streams end too
	}
	http.SetCookie(w, a.sessionCookie(r, token, sess.ExpiresAt))
	apijson.Write(w, http.StatusOK, Me{Name: u.Name, Role: u.Role, CSRFToken: csrf, AuthRequired: true})
}

func loginThrottled(wait time.Duration) *apiError {
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	return &apiError{http.StatusTooManyRequests, "rate_limited",
		fmt.Sprintf("too many failed sign-ins; try again in %d s", secs), strconv.FormatInt(secs, 10)}
}

// sessionCookie is the session cookie: unreadable by scripts, never sent cross-site, and
// Secure whenever the request came over TLS (or Config.SecureCookies says a proxy did TLS).
func (a *Auth) sessionCookie(r *http.Request, value string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name:     SessionCookie,
		Value:    value,
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil || a.cfg.SecureCookies,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
		c.MaxAge = max(int(expires.Sub(a.now())/time.Second), 1)
	}
	return c
}

// checkPassword verifies name's password; the caller holds a hashing slot. Unknown names
// cost the same bcrypt comparison as known ones, so the answer's timing does not reveal
// which accounts exist. known reports whether name is an account (for the log only).
func (a *Auth) checkPassword(ctx context.Context, name, password string) (u record.User, known, ok bool, err error) {
	u, err = a.store.User(ctx, name)
	if err != nil && !errors.Is(err, record.ErrNotFound) {
		return record.User{}, false, false, err
	}
	known = err == nil
	hash := u.PasswordHash
	if !known {
		if hash, err = a.dummy(); err != nil {
			return record.User{}, false, false, err
		}
	}
	cmpErr := bcrypt.CompareHashAndPassword(hash, []byte(password))
	if !known || cmpErr != nil {
		return record.User{}, known, false, nil
	}
	return u, true, true, nil
}

func (a *Auth) dummy() ([]byte, error) {
	a.dummyOnce.Do(func() {
		a.dummyHash, a.dummyErr = bcrypt.GenerateFromPassword([]byte("vigil-no-such-account"), a.cfg.BcryptCost)
	})
	if a.dummyErr != nil {
		return nil, fmt.Errorf("auth: dummy hash: %w", a.dummyErr)
	}
	return a.dummyHash, nil
}

// acquireBcrypt bounds concurrent bcrypt work, which is slow on purpose: a burst of
// sign-ins must not take every core from the guardian.
func (a *Auth) acquireBcrypt(ctx context.Context) error {
	select {
	case a.bcryptCh <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Auth) releaseBcrypt() { <-a.bcryptCh }

// handleLogout is POST /api/auth/logout: it ends the session and clears the cookie. It
// needs no CSRF token: ending a session is harmless, and the cookie is SameSite=Strict.
func (a *Auth) handleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		h := hashKey(c.Value)
		name := ""
		if s, err := a.store.AuthSession(r.Context(), h[:]); err == nil {
			name = s.UserName
		}
		_, ev, err := a.store.DeleteAuthSession(r.Context(), h[:],
			&record.AuditEntry{Type: record.AuditLogout, Operator: name})
		if err != nil {
			a.log.Error("auth: end session", "err", err)
			writeAPIError(w, errInternal)
			return
		}
		a.emit(ev)
	}
	http.SetCookie(w, a.sessionCookie(r, "", time.Time{}))
	apijson.Write(w, http.StatusOK, map[string]bool{"ok": true})
}

// handleMe is GET /api/auth/me: who is signed in, or 401 {"error":{"code":"unauthenticated"}}.
func (a *Auth) handleMe(w http.ResponseWriter, r *http.Request) {
	p, aerr := a.identify(r)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if p.open {
		apijson.Write(w, http.StatusOK, Me{Role: RoleAdmin})
		return
	}
	apijson.Write(w, http.StatusOK, Me{Name: p.name, Role: p.role, CSRFToken: p.csrf, AuthRequired: true})
}
