//go:build linux || darwin

package auth

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	return err == nil
}

// readPasswordNoEcho reads one line from the terminal fd with echo turned off, restoring
// the terminal afterwards.
func readPasswordNoEcho(fd int) ([]byte, error) {
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, fmt.Errorf("read terminal settings: %w", err)
	}
	t := *old
	t.Lflag &^= unix.ECHO
	t.Lflag |= unix.ICANON | unix.ISIG
	t.Iflag |= unix.ICRNL
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &t); err != nil {
		return nil, fmt.Errorf("turn off echo: %w", err)
	}
	defer func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }()
	var (
		line []byte
		b    [1]byte
	)
	for {
		n, err := unix.Read(fd, b[:])
		if n == 1 {
			if b[0] == '\n' {
				return line, nil
			}
			line = append(line, b[0])
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read password: %w", err)
		}
		// End of input.
		return line, nil
	}
}
