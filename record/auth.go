package record

import (
	"errors"
	"time"
)

// Errors of the team-mode tables.
var (
	// ErrExists is returned when creating an account or key whose name or id is taken.
	ErrExists = errors.New("already exists")
	// ErrLastAdmin is returned when removing the only admin would leave other accounts
	// without anyone able to manage them.
	ErrLastAdmin = errors.New("the last admin cannot be removed while other accounts exist")
)

// Audit entry types written by team mode.
const (
	AuditKeyCreated   = "key.created"
	AuditKeyRevoked   = "key.revoked"
	AuditUserCreated  = "user.created"
	AuditUserRemoved  = "user.removed"
	AuditUserPassword = "user.password"
	AuditLogin        = "auth.login"
	AuditLogout       = "auth.logout"
)

// EndsSignIns reports whether an audit entry of type typ may have ended console sign-ins:
// a logout, an account removed, a password changed.
func EndsSignIns(typ string) bool {
	switch typ {
	case AuditUserRemoved, AuditUserPassword, AuditLogout:
		return true
	}
	return false
}

// APIKey is an agent's API key as stored. The key text itself is never stored: Hash is its
// SHA-256, which is what a presented key is looked up by.
type APIKey struct {
	ID   string
	Name string
	// AgentID is the only agent id the key may speak as; empty for any agent.
	AgentID string
	Hash    []byte
	// Prefix is the key's first characters, shown so operators can tell keys apart.
	Prefix    string
	CreatedAt time.Time
	CreatedBy string
	// ExpiresAt, RevokedAt and LastUsedAt are zero when unset.
	ExpiresAt  time.Time
	RevokedAt  time.Time
	LastUsedAt time.Time
}

// User is an operator account.
type User struct {
	Name string
	// Role is viewer, reviewer or admin.
	Role string
	// PasswordHash is the bcrypt hash of the password.
	PasswordHash []byte
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// AuthSession is a signed-in console session. TokenHash is the SHA-256 of the cookie's
// token; Role is the user's current role, read with the session.
type AuthSession struct {
	TokenHash []byte
	UserName  string
	Role      string
	CSRFToken string
	CreatedAt time.Time
	ExpiresAt time.Time
}
