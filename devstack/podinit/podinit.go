// Package podinit turns a plain process into something close to a
// container for the local stack's node agent: the agent starts the
// container's process through this helper (the picomq binary's hidden
// `dev pod-init` command) in a new mount and UTS namespace, and the helper
// mounts the pod's volumes where the pod asks for them, gives the pod its
// own /dev, /etc/hosts, /etc/resolv.conf and host name, makes the root
// read-only when the container asks, takes the pod's user and groups with
// no new privileges, and then executes the container's command.
//
// Every mount is private to the container's namespace: the host sees
// none of them. The one trace on the host is a mount point the host lacks
// (/var/lib/picomq), created empty, since a bind mount needs a target.
// The network namespace is the pod's, which the agent made and which
// every container of the pod joins.
package podinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spec is one container's start, written by the agent as JSON.
type Spec struct {
	// Exe is the host path of the binary to run; Args its argv, Args[0]
	// being the command as the pod names it.
	Exe  string   `json:"exe"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// WorkingDir is the directory the command starts in ("/" if empty).
	WorkingDir string `json:"workingDir,omitempty"`
	// NetNS is the pod's network namespace (a /run/netns path), which
	// every container of the pod joins, as containers share their pod's.
	NetNS string `json:"netns,omitempty"`
	// Hostname is the pod's host name (spec.hostname or its name).
	Hostname string `json:"hostname"`
	// Mounts are applied in order, after /dev is set up.
	Mounts []Mount `json:"mounts"`
	// ReadOnlyRoot remounts / read-only (securityContext.readOnlyRootFilesystem).
	ReadOnlyRoot bool `json:"readOnlyRoot,omitempty"`
	// UID and GID, when set, are taken before the exec, with Groups as the
	// supplementary groups (the pod's fsGroup and supplementalGroups).
	UID    *int64  `json:"uid,omitempty"`
	GID    *int64  `json:"gid,omitempty"`
	Groups []int64 `json:"groups,omitempty"`
	// NoNewPrivs is allowPrivilegeEscalation: false.
	NoNewPrivs bool `json:"noNewPrivs,omitempty"`
}

// Mount binds the host path Source onto Target inside the container.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Command returns the command that runs spec through the helper: self is
// the helper's argv prefix (the picomq binary and its hidden command), and
// specFile where the spec is written. The process gets new mount and UTS
// namespaces and a process group of its own, so that the agent signals
// the container's whole tree.
func Command(self []string, spec Spec, specFile string) (*exec.Cmd, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(specFile, raw, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(self[0], append(self[1:], specFile)...)
	cmd.Env = []string{} // the container's environment is in the spec
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		Setpgid:    true,
	}
	return cmd, nil
}

// Main is the helper's body: it reads the spec at path, prepares the
// namespace and executes the command. It returns only on failure.
func Main(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("pod-init: spec %s: %w", path, err)
	}
	return s.run()
}

func (s Spec) run() error {
	// setns changes only the calling thread's network namespace: this
	// goroutine keeps its thread until the exec, which hands that
	// namespace to the command.
	runtime.LockOSThread()
	if s.NetNS != "" {
		ns, err := os.Open(s.NetNS)
		if err != nil {
			return fmt.Errorf("pod-init: the pod's network: %w", err)
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("pod-init: join %s: %w", s.NetNS, err)
		}
		ns.Close()
	}
	// Nothing mounted here may reach the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("pod-init: make mounts private: %w", err)
	}
	// Open the binary and every source before mounting anything: a mount
	// may hide them (the pod's /tmp hides a state directory under /tmp).
	exe, err := os.Open(s.Exe)
	if err != nil {
		return fmt.Errorf("pod-init: %w", err)
	}
	sources := make([]*os.File, len(s.Mounts))
	for i, m := range s.Mounts {
		f, err := os.OpenFile(m.Source, unix.O_PATH, 0)
		if err != nil {
			return fmt.Errorf("pod-init: volume for %s: %w", m.Target, err)
		}
		sources[i] = f
	}
	if err := privateDev(); err != nil {
		return err
	}
	// The command runs through the descriptor: its path may be hidden, or
	// not searchable by the pod's user. A link named after the binary (made
	// while still root) points at it, so that the process's name (ps, top)
	// is "broker", not the descriptor's number.
	exePath := fmt.Sprintf("/proc/self/fd/%d", exe.Fd())
	if err := os.Mkdir("/dev/.exec", 0o755); err == nil {
		link := "/dev/.exec/" + filepath.Base(s.Exe)
		if err := os.Symlink(exePath, link); err == nil {
			exePath = link
		}
	}
	// Mount points the host lacks are created while / is still writable
	// (after the private /dev, so /dev/termination-log lands there).
	for i, m := range s.Mounts {
		if err := mountPoint(m.Target, sources[i]); err != nil {
			return err
		}
	}
	for i, m := range s.Mounts {
		src := fmt.Sprintf("/proc/self/fd/%d", sources[i].Fd())
		if err := unix.Mount(src, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("pod-init: mount %s on %s: %w", m.Source, m.Target, err)
		}
		if m.ReadOnly {
			if err := unix.Mount("", m.Target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("pod-init: read-only %s: %w", m.Target, err)
			}
		}
	}
	// Last: a bind mount copies its source mount's read-only flag, and the
	// volumes live on the root's file system.
	if s.ReadOnlyRoot {
		if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("pod-init: read-only root: %w", err)
		}
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("pod-init: host name: %w", err)
		}
	}
	if s.GID != nil {
		groups := make([]int, 0, len(s.Groups))
		for _, g := range s.Groups {
			groups = append(groups, int(g))
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("pod-init: groups: %w", err)
		}
		if err := syscall.Setgid(int(*s.GID)); err != nil {
			return fmt.Errorf("pod-init: gid %d: %w", *s.GID, err)
		}
	}
	if s.UID != nil {
		if err := syscall.Setuid(int(*s.UID)); err != nil {
			return fmt.Errorf("pod-init: uid %d: %w", *s.UID, err)
		}
	}
	if s.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("pod-init: no new privileges: %w", err)
		}
	}
	dir := s.WorkingDir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("pod-init: working directory: %w", err)
	}
	argv := s.Args
	if len(argv) == 0 {
		argv = []string{s.Exe}
	}
	err = unix.Exec(exePath, argv, s.Env)
	return fmt.Errorf("pod-init: exec %s: %w", s.Exe, err)
}

// mountPoint creates target like the source (a directory, or an empty file
// for a file), unless it exists.
func mountPoint(target string, source *os.File) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(source.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pod-init: mount point %s: %w", target, err)
	}
	return f.Close()
}

// devices are the nodes a container's /dev holds, bound from the host's.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// privateDev gives the container a /dev of its own (a tmpfs with the usual
// devices bound in), as container runtimes do, so that files the pod
// mounts there (/dev/termination-log) never touch the host's /dev.
func privateDev() error {
	held := map[string]*os.File{}
	for _, d := range devices {
		f, err := os.OpenFile("/dev/"+d, unix.O_PATH, 0)
		if err != nil {
			continue // a host without it: the container goes without
		}
		held[d] = f
	}
	var shm *os.File
	if f, err := os.OpenFile("/dev/shm", unix.O_PATH, 0); err == nil {
		shm = f
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("pod-init: /dev: %w", err)
	}
	for d, f := range held {
		target := "/dev/" + d
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pod-init: %s: %w", target, err)
		}
		f.Close()
	}
	if shm != nil {
		if err := os.Mkdir("/dev/shm", 0o1777); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=65536k"); err != nil {
			return fmt.Errorf("pod-init: /dev/shm: %w", err)
		}
		shm.Close()
	}
	for name, to := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, "/dev/"+name); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}
