// Package flock takes exclusive advisory locks on lock files with flock(2): the database's
// one-holder lock and the lock installs take turns through to edit Codex's config.toml.
// A flock belongs to an open file description, so closing the file (or the end of its
// process, also a crash) releases it and no stale lock is left behind; it is separate from
// the POSIX record locks SQLite takes, so the two never interfere. Platforms without flock
// have no lock: there Open still opens the file and the locks are always granted.
package flock
