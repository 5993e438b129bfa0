package guardian

import "github.com/vigil-guardian/vigil/storage"

// Store is what the guardian needs from persistence: the step log of any storage backend
// (storage/sqlite, storage/postgres), which it closes when it stops.
type Store interface {
	storage.Steps
	Close() error
}
