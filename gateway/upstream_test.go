package gateway

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in, name, url, err string
	}{
		{in: "demo=http://127.0.0.1:3000", name: "demo", url: "http://127.0.0.1:3000"},
		{in: "a.b_c-1=https://agents.example.com/x", name: "a.b_c-1", url: "https://agents.example.com/x"},
		{in: "demo", err: "want NAME=URL"},
		{in: "-demo=http://x", err: "want NAME=URL"},
		{in: "a b=http://x", err: "want NAME=URL"},
		{in: "demo=ftp://x", err: "absolute http(s) URL"},
		{in: "demo=/relative", err: "absolute http(s) URL"},
	} {
		name, url, err := ParseUpstream(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.name, name)
		require.Equal(t, tc.url, url)
	}
	require.False(t, ValidName(string(make([]byte, 65))))
}

func TestCopyHeaders(t *testing.T) {
	src := http.Header{}
	src.Set("Authorization", "Bearer upstream-token")
	src.Set("X-Custom", "kept")
	src.Set("Connection", "keep-alive, X-Hop")
	src.Set("X-Hop", "dropped: named by Connection")
	for _, h := range []string{"Keep-Alive", "Transfer-Encoding", "Content-Length", "Host", "X-Vigil-Key",
		"X-Vigil-Session", "X-Vigil-Gateway", "Accept-Encoding", "Content-Encoding"} {
		src.Set(h, "dropped")
	}
	dst := http.Header{}
	CopyHeaders(dst, src)
	require.Equal(t, http.Header{"Authorization": {"Bearer upstream-token"}, "X-Custom": {"kept"}}, dst)
	dst["X-Custom"][0] = "changed"
	require.Equal(t, "kept", src.Get("X-Custom"), "values are copied, not shared")
}
