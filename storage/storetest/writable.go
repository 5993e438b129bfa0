package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage"
)

// A backend the suite can write to says so; a read-only database is each backend's own
// test, since only the backend knows how to make one.
var writableCases = []testCase{
	{"CheckWritable", func(t *testing.T, db storage.Backend) {
		require.NoError(t, db.CheckWritable(bg()), "an empty database")
		save(t, db, step("s1", "allow", 0))
		require.NoError(t, db.CheckWritable(bg()), "after a write")
	}},
}
