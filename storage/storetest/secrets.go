package storetest

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage"
)

var secretCases = []testCase{
	{"SecretMadeOnceAndKept", func(t *testing.T, db storage.Backend) {
		first, err := db.Secret(bg(), "aap-cursor", 32)
		require.NoError(t, err)
		require.Len(t, first, 32)
		require.NotEqual(t, make([]byte, 32), first, "random, not zeros")
		again, err := db.Secret(bg(), "aap-cursor", 32)
		require.NoError(t, err)
		require.Equal(t, first, again)

		other, err := db.Secret(bg(), "another", 16)
		require.NoError(t, err)
		require.Len(t, other, 16)
		require.False(t, bytes.HasPrefix(first, other), "names have secrets of their own")

		// A name asked for with another size than it was made with is an error, not a
		// secret of the wrong size.
		_, err = db.Secret(bg(), "aap-cursor", 16)
		require.ErrorContains(t, err, "32 bytes")
		_, err = db.Secret(bg(), "never made", 0)
		require.Error(t, err)
	}},
	{"SecretMadeOnceConcurrently", func(t *testing.T, db storage.Backend) {
		// Guardians starting together (here callers on one backend, on its connections)
		// all get the one secret that was stored.
		const callers = 8
		got := make([][]byte, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				got[i], errs[i] = db.Secret(bg(), "raced", 32)
			})
		}
		close(start)
		wg.Wait()
		for i := range callers {
			require.NoError(t, errs[i])
			require.Equal(t, got[0], got[i], "caller %d", i)
		}
		stored, err := db.Secret(bg(), "raced", 32)
		require.NoError(t, err)
		require.Equal(t, got[0], stored)
	}},
}
