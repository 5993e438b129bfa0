//go:build !unix

package main

// openFileLimit is unknown here: the connection bound falls back to its cap.
func openFileLimit() uint64 { return 0 }
