//go:build !no_ui

// Package ui holds the operator console, built by Vite from frontend/ into ui/dist. The built
// files are committed so that a plain `go build` or `go install` (no Node) embeds the real
// console; `make ui-check` fails when they are not what the sources build to. The no_ui build
// tag leaves them out for a bare guardian.
package ui

import (
	"embed"
	"io/fs"
)

// all: keeps files whose names start with "_" or ".", which bundlers may emit.
//
//go:embed all:dist
var dist embed.FS

// FS returns the console's files (index.html at the root), or nil in a no_ui build.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// Unreachable: "dist" is a valid path and embedded above.
		return nil
	}
	return sub
}
