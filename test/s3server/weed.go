package s3server

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const (
	// WeedEnv names a weed binary to run instead of hack/seaweedfs.sh's.
	WeedEnv = "PICOMQ_WEED"
	// RequireEnv=1 (or CI=true) makes a missing weed a failure, not a skip:
	// where the tiered-storage tests must run, a skip would hide them.
	RequireEnv = "PICOMQ_REQUIRE_S3"
)

var weed struct {
	once sync.Once
	path string
	err  error
}

// Weed returns the path of the weed binary: $PICOMQ_WEED, else the one
// hack/seaweedfs.sh provides (built once per machine, looked up once per
// test binary).
func Weed() (string, error) {
	weed.once.Do(func() { weed.path, weed.err = findWeed() })
	return weed.path, weed.err
}

func findWeed() (string, error) {
	if p := os.Getenv(WeedEnv); p != "" {
		p, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", WeedEnv, err)
		}
		return p, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack/seaweedfs.sh"))
	cmd.Dir = root
	cmd.Stderr = os.Stderr // the first build takes minutes: show its progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/seaweedfs.sh: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "weed")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("hack/seaweedfs.sh: %w", err)
	}
	return p, nil
}

// repoRoot walks up from the working directory (a test's package folder)
// to the folder holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("s3server: no go.mod above the working directory (set " + WeedEnv + ")")
		}
		dir = parent
	}
}

// required reports whether a missing weed must fail the test (CI, or
// PICOMQ_REQUIRE_S3=1) rather than skip it.
func required() bool {
	ci := os.Getenv("CI")
	return (ci != "" && ci != "false" && ci != "0") || os.Getenv(RequireEnv) == "1"
}

// Require returns the weed binary's path. It skips t under -short (a real
// server process is not a unit test), and when weed cannot be had, unless
// CI or PICOMQ_REQUIRE_S3=1 is set, where it fails t instead.
func Require(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped under -short: runs a SeaweedFS S3 server process (hack/seaweedfs.sh builds weed); go test without -short runs it")
	}
	p, err := Weed()
	if err != nil {
		if required() {
			t.Fatalf("no SeaweedFS weed (CI or %s=1: the S3 tests must run, not skip): %v", RequireEnv, err)
		}
		t.Skipf("no SeaweedFS weed: %v (CI or %s=1 makes this a failure)", err, RequireEnv)
	}
	return p
}
