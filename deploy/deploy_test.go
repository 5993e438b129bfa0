// Package deploy holds the container and systemd files; its tests check them with the tools
// that exist on the machine.
package deploy

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with ExecStart pointing
// at a real executable (verify checks that it exists).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile("vigil.service")
	require.NoError(t, err)
	dir := t.TempDir()
	bin := filepath.Join(dir, "vigil")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/vigil", bin)
	path := filepath.Join(dir, "vigil.service")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", path).CombinedOutput()
	// Without a running systemd (a container, CI) verify still parses and checks the unit;
	// it can only complain about the manager itself, which is not the unit's fault.
	var problems []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.Contains(line, "Failed to connect to bus") ||
			strings.Contains(line, "System has not been booted with systemd") ||
			strings.Contains(line, "Cannot find unit for") {
			continue
		}
		problems = append(problems, line)
	}
	require.Empty(t, problems, "systemd-analyze verify: %v\n%s", err, out)

	for _, want := range []string{"User=vigil", "StateDirectory=vigil", "NoNewPrivileges=yes",
		"ProtectSystem=strict", "ExecReload=/bin/kill -HUP $MAINPID", "UMask=0077"} {
		require.Contains(t, string(unit), want)
	}
}

// TestDockerfile checks the image's promises (multi-stage, static, non-root, /data) and,
// where a Docker daemon runs and can fetch the base images, builds it.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	text := string(b)
	require.Equal(t, 3, strings.Count(text, "\nFROM ")+boolInt(strings.HasPrefix(text, "FROM ")), "three stages")
	for _, want := range []string{"CGO_ENABLED=0", "USER 65532:65532", "VOLUME /data",
		"VIGIL_DB=/data/vigil.db", `ENTRYPOINT ["/vigil"]`, `CMD ["serve"]`, "npm ci", "npm run build"} {
		require.Contains(t, text, want)
	}
	if os.Getenv("VIGIL_DOCKER_BUILD") != "1" {
		t.Skip("set VIGIL_DOCKER_BUILD=1 where a Docker daemon can pull node, golang and distroless to build the image")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "build", "-f", "deploy/Dockerfile", "-t", "vigil:test", ".")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
