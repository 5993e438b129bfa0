//go:build !unix

package hook

// lockFile has no advisory lock to take on this platform: concurrent installs there can
// still lose each other's Codex trust (documented in docs/coding-agents.md).
func lockFile(string) (func(), error) { return func() {}, nil }
