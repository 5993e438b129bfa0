// Package goinstall proves that `go install github.com/vigil-guardian/vigil@latest` gives the
// whole console. It builds a module proxy from the working tree (the files git tracks or would
// track, zipped as the real proxy would), installs from it into an empty GOPATH and module
// cache, starts the installed binary and fetches the console from it. Opt-in
// (VIGIL_GOINSTALL=1, `make test-goinstall`): it runs the go command and builds the module.
package goinstall

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

const modulePath = "github.com/vigil-guardian/vigil"

func TestGoInstallServesConsole(t *testing.T) {
	if os.Getenv("VIGIL_GOINSTALL") != "1" {
		t.Skip("set VIGIL_GOINSTALL=1 (make test-goinstall) to install the module from a local proxy and check its console")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)

	files, sum := moduleFiles(t, root)
	// The same tree gets the same version (the last commit's time and a hash of the files),
	// as a proxy would serve the same commit, so a rerun reuses the build cache.
	version := module.PseudoVersion("v0", "", commitTime(t, root), sum[:12])
	proxy := t.TempDir()
	zipBytes := writeProxy(t, proxy, root, module.Version{Path: modulePath, Version: version}, files)
	t.Logf("module %s@%s: %d files, zip %d bytes", modulePath, version, len(files), zipBytes)

	// Every other module comes from this machine's module cache (itself a valid proxy) when
	// it is there, else from the default proxy; only this module skips the checksum database.
	proxies := []string{fileURL(proxy)}
	if out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output(); err == nil {
		if dl := filepath.Join(strings.TrimSpace(string(out)), "cache", "download"); isDir(dl) {
			proxies = append(proxies, fileURL(dl))
		}
	}
	proxies = append(proxies, "https://proxy.golang.org")
	// A fixed place per checkout, emptied first: the build cache keys packages by their
	// directory, so a new directory each run would compile every dependency again (a minute
	// more). Named after the checkout so that two checkouts on one machine do not collide.
	rootSum := sha256.Sum256([]byte(root))
	gopath := filepath.Join(os.TempDir(), "vigil-goinstall-"+hex.EncodeToString(rootSum[:4]))
	require.NoError(t, os.RemoveAll(gopath))
	t.Cleanup(func() { _ = os.RemoveAll(gopath) })
	gobin := filepath.Join(gopath, "bin")
	env := append(os.Environ(),
		"GOPATH="+gopath,
		"GOMODCACHE="+filepath.Join(gopath, "pkg", "mod"),
		"GOBIN="+gobin,
		"GOPROXY="+strings.Join(proxies, ","),
		// The checksum database (reached through the default proxy) still checks every other
		// module, as it does for a user.
		"GONOSUMDB="+modulePath,
		"GONOPROXY=", "GOPRIVATE=", "GOINSECURE=",
		// -modcacherw: the temporary module cache can be removed when the test ends.
		"GOFLAGS=-mod=mod -modcacherw",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	)
	start := time.Now()
	install := exec.CommandContext(ctx, "go", "install", modulePath+"@latest")
	install.Dir = t.TempDir() // outside any module, as a user would run it
	install.Env = env
	out, err := install.CombinedOutput()
	require.NoError(t, err, "go install: %s", out)
	bin := filepath.Join(gobin, "vigil")
	st, err := os.Stat(bin)
	require.NoError(t, err)
	t.Logf("go install %s@latest: %v, binary %d bytes (%.1f MiB)", modulePath, time.Since(start).Round(time.Millisecond), st.Size(), float64(st.Size())/(1<<20))
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	require.Equal(t, modulePath, info.Main.Path)
	require.Equal(t, version, info.Main.Version, "@latest resolved to the local proxy's version")

	base := serve(ctx, t, bin)
	want, err := os.ReadFile(filepath.Join(root, "ui", "dist", "index.html"))
	require.NoError(t, err)
	index := get(t, base+"/")
	require.NotContains(t, string(index), "not built into this binary")
	require.Equal(t, string(want), string(index), "/ is the committed console's index.html")
	m := regexp.MustCompile(`src="\./(assets/index-[^"]+\.js)"`).FindSubmatch(index)
	require.NotNil(t, m, "index.html loads a hashed script:\n%s", index)
	asset := string(m[1])
	wantAsset, err := os.ReadFile(filepath.Join(root, "ui", "dist", filepath.FromSlash(asset)))
	require.NoError(t, err)
	require.Equal(t, wantAsset, get(t, base+"/"+asset), asset)
}

// moduleFiles lists what a commit of the working tree would hold: tracked files plus untracked
// ones git does not ignore, minus deleted ones (so frontend/node_modules is left out, as it is
// from the repository). It also returns a hash of their paths and contents.
func moduleFiles(t *testing.T, root string) ([]modzip.File, string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "git ls-files (the proof needs a git checkout)")
	h := sha256.New()
	var files []modzip.File
	for p := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		full := filepath.Join(root, filepath.FromSlash(p))
		b, err := os.ReadFile(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree, not yet in git's index
		}
		require.NoError(t, err)
		h.Write([]byte(p + "\x00"))
		h.Write(b)
		files = append(files, dirFile{rel: p, full: full})
	}
	return files, hex.EncodeToString(h.Sum(nil))
}

func commitTime(t *testing.T, root string) time.Time {
	t.Helper()
	cmd := exec.Command("git", "log", "-1", "--format=%ct")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err)
	return time.Unix(sec, 0).UTC()
}

// writeProxy lays the module out as a GOPROXY serves it (the file:// layout is the same as
// the HTTP one) and returns the zip's size.
func writeProxy(t *testing.T, proxy, root string, v module.Version, files []modzip.File) int {
	t.Helper()
	dir := filepath.Join(proxy, filepath.FromSlash(v.Path), "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var z bytes.Buffer
	require.NoError(t, modzip.Create(&z, v, files))
	// The zip must carry the committed console, else the install would serve no UI.
	zr, err := zip.NewReader(bytes.NewReader(z.Bytes()), int64(z.Len()))
	require.NoError(t, err)
	var hasUI bool
	for _, f := range zr.File {
		hasUI = hasUI || f.Name == v.Path+"@"+v.Version+"/ui/dist/index.html"
	}
	require.True(t, hasUI, "the module zip holds ui/dist/index.html")
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	info, err := json.Marshal(map[string]any{"Version": v.Version, "Time": time.Now().UTC().Format(time.RFC3339)})
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		v.Version + ".zip":  z.Bytes(),
		v.Version + ".mod":  gomod,
		v.Version + ".info": info,
		"list":              []byte(v.Version + "\n"),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	// @latest answers for a module with no release tags, as the real proxy does.
	require.NoError(t, os.WriteFile(filepath.Join(proxy, filepath.FromSlash(v.Path), "@latest"), info, 0o644))
	return z.Len()
}

// serve starts `bin serve` on a free loopback port and returns its URL once it listens.
func serve(ctx context.Context, t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "vigil.db"))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		t.Fatalf("vigil serve did not say where it listens; stderr:\n%s", stderr.String())
		return ""
	}
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", u, b)
	return b
}

func fileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// dirFile is a file of the working tree, as golang.org/x/mod/zip reads it.
type dirFile struct{ rel, full string }

func (f dirFile) Path() string                 { return f.rel }
func (f dirFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.full) }
func (f dirFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }
