// Package mcptest runs the npm MCP servers of test/mcp that tests reach over HTTP.
package mcptest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// boundMarker starts the line reportBound writes.
const boundMarker = "vigil-mcptest-bound "

// reportBound, preloaded into node, writes the address each server binds. Given PORT=0,
// server-everything binds a port the system picks (no other process can hold it) but prints
// only the 0 it was given. A free port picked here and passed in would leave a window in
// which a test running beside takes it.
const reportBound = `const net = require("node:net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  this.once("listening", () => process.stderr.write("` + boundMarker + `" + JSON.stringify(this.address()) + "\n"));
  return listen.apply(this, args);
};
`

// StartEverythingHTTP runs server-everything (its executable at bin) with its Streamable
// HTTP transport until the test ends, and returns its MCP endpoint.
func StartEverythingHTTP(t testing.TB, bin string) string {
	t.Helper()
	preload := filepath.Join(t.TempDir(), "report-bound.cjs")
	require.NoError(t, os.WriteFile(preload, []byte(reportBound), 0o600))
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT=0",
		"NODE_OPTIONS="+strings.TrimSpace(os.Getenv("NODE_OPTIONS")+` --require "`+preload+`"`))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	type bound struct {
		port int
		err  error
	}
	ready := make(chan bound, 1)
	go func() {
		var before strings.Builder // for the error when the server ends without listening
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), boundMarker)
			if !ok {
				before.WriteString(sc.Text() + "\n")
				continue
			}
			var addr struct {
				Port int `json:"port"`
			}
			if err := json.Unmarshal([]byte(line), &addr); err != nil || addr.Port == 0 {
				ready <- bound{err: fmt.Errorf("server-everything bound %q: %v", line, err)}
			} else {
				ready <- bound{port: addr.Port}
			}
			for sc.Scan() { // keep draining so the server never blocks on its output
			}
			return
		}
		ready <- bound{err: fmt.Errorf("server-everything ended without listening:\n%s", before.String())}
	}()
	select {
	case b := <-ready:
		require.NoError(t, b.err)
		return "http://127.0.0.1:" + strconv.Itoa(b.port) + "/mcp"
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not start")
		return ""
	}
}
