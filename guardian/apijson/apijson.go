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
