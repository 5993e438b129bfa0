package apijson

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name   string
		write  func(w http.ResponseWriter)
		status int
		body   string
	}{
		{"value", func(w http.ResponseWriter) { Write(w, http.StatusCreated, map[string]int{"n": 1}) }, 201, `{"n":1}`},
		{"error", func(w http.ResponseWriter) { Error(w, http.StatusNotFound, "not_found", "no such rule") }, 404,
			`{"error":{"code":"not_found","message":"no such rule"}}`},
		{"unencodable", func(w http.ResponseWriter) { Write(w, http.StatusOK, math.Inf(1)) }, 500,
			`{"error":{"code":"internal","message":"encode response"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.write(rec)
			require.Equal(t, tc.status, rec.Code)
			require.JSONEq(t, tc.body, rec.Body.String())
			require.True(t, json.Valid(rec.Body.Bytes()))
			if tc.status != 500 {
				require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
				require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			}
		})
	}
}

func TestFit(t *testing.T) {
	items := []string{"aaaa", "bbbb", "cccc"} // 6 bytes encoded, 7 with a separator
	for _, tt := range []struct {
		max  int
		want int
		full bool
	}{
		{100, 3, true},
		{21, 3, true},
		{20, 2, false},
		{14, 2, false},
		{13, 1, false},
		{1, 1, false}, // the first item always goes, so paging makes progress
	} {
		out, full, err := Fit(items, tt.max)
		require.NoError(t, err)
		require.Len(t, out, tt.want, "max %d", tt.max)
		require.Equal(t, tt.full, full, "max %d", tt.max)
	}
	out, full, err := Fit([]string(nil), 10)
	require.NoError(t, err)
	require.Empty(t, out)
	require.True(t, full)
}
