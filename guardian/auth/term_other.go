//go:build !linux && !darwin

package auth

import "errors"

// isTerminal is false where echo cannot be turned off here: passwords are then read from
// standard input like a pipe's.
func isTerminal(int) bool { return false }

func readPasswordNoEcho(int) ([]byte, error) {
	return nil, errors.New("reading a password from the terminal is not supported on this system")
}
