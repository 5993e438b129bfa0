// Package apijson writes the console API's JSON responses, so every /api handler, whatever
// package it lives in, answers with the same headers and the same error shape.
package apijson

import (
	"encoding/json"
	"net/http"
)

// ErrorBody is the body of every console API error: {"error":{"code","message"}}.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Write writes v as a JSON response. It encodes before writing the status, so a value that
// cannot be encoded becomes a 500 instead of a half-written answer.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"code":"internal","message":"encode response"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client may have gone; nothing to do then
}

// Error writes a console API error.
func Error(w http.ResponseWriter, status int, code, message string) {
	var e ErrorBody
	e.Error.Code, e.Error.Message = code, message
	Write(w, status, e)
}

// MaxPageBytes bounds a list answer of the console API: items stop being added once their
// encoding passes it, and the answer's cursor continues after the last one sent. A client
// that never reads cannot make the guardian hold more than this per request, and a page of
// large steps still arrives in pieces a browser can handle.
const MaxPageBytes = 8 << 20

// MaxPageItems is the largest limit a list endpoint accepts.
const MaxPageItems = 500

// Fit encodes items in order until their total size passes maxBytes and returns the ones
// that fit; the first item is always kept, so a page always makes progress. full reports
// that every item fit.
func Fit[T any](items []T, maxBytes int) (out []json.RawMessage, full bool, err error) {
	out = make([]json.RawMessage, 0, len(items))
	total := 0
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, false, err
		}
		if len(out) > 0 && total+len(b)+1 > maxBytes {
			return out, false, nil
		}
		total += len(b) + 1
		out = append(out, b)
	}
	return out, true, nil
}
