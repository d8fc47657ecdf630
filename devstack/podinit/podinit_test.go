package podinit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

// The test binary doubles as the helper: run with PODINIT_SPEC it is
// `picomq dev pod-init`.
func TestMain(m *testing.M) {
	if spec := os.Getenv("PODINIT_SPEC"); spec != "" {
		err := Main(spec)
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(111)
	}
	os.Exit(m.Run())
}

// TestContainerSeesItsMountsAndUser runs a shell through the helper as a
// pod would run its container: a volume bound on a path the host lacks, a
// read-only volume, a private /dev with a termination-log file, a
// read-only root, the pod's host name and an unprivileged user — and
// checks that the host sees none of the mounts.
func TestContainerSeesItsMountsAndUser(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root and mount namespaces: not a unit test")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount and UTS namespaces)")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	// The pod's user must reach the mount point through the test's folders.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "conf")
	for _, d := range []string{data, conf} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(data, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "key"), []byte("value"), 0o644); err != nil {
		t.Fatal(err)
	}
	termLog := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(termLog, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(termLog, 0o666); err != nil {
		t.Fatal(err)
	}
	// A mount point under a directory of the test's own, so the test
	// leaves nothing on the host.
	target := filepath.Join(dir, "absent", "mnt")
	confTarget := filepath.Join(dir, "absent", "conf")
	script := `set -e
echo hello > ` + target + `/file
cat ` + confTarget + `/key; echo
if echo x > ` + confTarget + `/other 2>/dev/null; then echo conf-writable; fi
if touch /podinit-root-file 2>/dev/null; then echo root-writable; fi
echo bye > /dev/termination-log
hostname
id -u; id -G
cat /proc/$$/comm
`
	spec := Spec{
		Exe: sh, Args: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
		Hostname: "broker-0",
		Mounts: []Mount{
			{Source: data, Target: target},
			{Source: conf, Target: confTarget, ReadOnly: true},
			{Source: termLog, Target: "/dev/termination-log"},
		},
		ReadOnlyRoot: true,
		UID:          ptr.To[int64](65532), GID: ptr.To[int64](65532), Groups: []int64{65532, 4242},
		NoNewPrivs: true,
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := Command([]string{self}, spec, filepath.Join(dir, "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = []string{"PODINIT_SPEC=" + filepath.Join(dir, "spec.json")}
	cmd.Args = cmd.Args[:1]
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("container: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	got := out.String()
	for _, want := range []string{"value\n", "broker-0\n", "65532\n", "65532 4242", "\nsh\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output %q lacks %q", got, want)
		}
	}
	for _, bad := range []string{"conf-writable", "root-writable"} {
		if strings.Contains(got, bad) {
			t.Errorf("output %q: %s", got, bad)
		}
	}
	if b, err := os.ReadFile(filepath.Join(data, "file")); err != nil || string(b) != "hello\n" {
		t.Errorf("volume file: %q, %v", b, err)
	}
	if b, err := os.ReadFile(termLog); err != nil || string(b) != "bye\n" {
		t.Errorf("termination log: %q, %v", b, err)
	}
	if _, err := os.Stat("/dev/termination-log"); err == nil {
		t.Error("the host's /dev got a termination-log")
	}
	if _, err := os.Stat(filepath.Join(target, "file")); err == nil {
		t.Error("the host sees the container's mount")
	}
}
