//go:build !unix

package pgtest

import "os"

// fileUID is 0 where files have no unix owner; the servers run as the tests' own user.
func fileUID(os.FileInfo) uint32 { return 0 }
