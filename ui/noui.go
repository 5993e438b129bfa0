//go:build no_ui

package ui

import "io/fs"

// FS returns nil: this binary was built with the no_ui tag, and the guardian answers / with a
// short page saying so.
func FS() fs.FS { return nil }
