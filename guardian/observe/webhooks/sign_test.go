package webhooks_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/observe/webhooks"
)

// TestSignKnownValue pins the signature to the documented construction (docs/observability.md's
// receiver computes the same): HMAC-SHA256 of timestamp "." body, in hex.
func TestSignKnownValue(t *testing.T) {
	require.Equal(t, "sha256=1698a50bc74d1ff1db85c4e0a5297c2ad9fdba245d5737cdb789e4cc6e098940", webhooks.Sign([]byte("s3cret"), "1700000000", []byte(`{"a":1}`)))
}
