// Package stack is `picomq dev`: the whole product on one machine. One
// supervisor process makes the pod network (devstack/podnet), starts the
// control plane (devstack/controlplane) and the node agent
// (devstack/nodeagent, in the network's router namespace), deploys the
// operator from config/default — it runs as a pod of the stack, like any
// cluster's — applies the samples (a StreamCluster and its Streams), waits
// until they are Ready, and serves the client Service on the host's
// loopback. Everything it starts stops with it; its state folder keeps
// etcd's data and the volumes, so the next start finds the cluster as it
// was.
package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configure the stack.
type Options struct {
	// StateDir holds everything the stack keeps (default: DefaultStateDir).
	StateDir string
	// Checkout is the source tree the binaries are built from (the
	// module's root).
	Checkout string
	// Brokers is the sample StreamCluster's size; Nodes how many nodes the
	// agent registers.
	Brokers, Nodes int
	// Port is the host's loopback port serving the client Service (0:
	// 4437 when free, else any).
	Port int
}

// DefaultStateDir is $XDG_STATE_HOME/picomq/dev, or ~/.local/state/picomq/dev.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "picomq", "dev")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "picomq-dev")
	}
	return filepath.Join(home, ".local", "state", "picomq", "dev")
}

func (o *Options) defaults() error {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return err
	}
	o.StateDir = abs
	if o.Brokers == 0 {
		o.Brokers = 3
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	switch {
	case o.Brokers < 1:
		return fmt.Errorf("--brokers %d: want at least 1", o.Brokers)
	case o.Nodes < 1 || o.Nodes > 16:
		return fmt.Errorf("--nodes %d: want 1 to 16", o.Nodes)
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("--port %d: not a port", o.Port)
	}
	return nil
}

// paths of the state folder.
type paths struct{ root string }

func (p paths) bin() string          { return filepath.Join(p.root, "bin") }
func (p paths) logs() string         { return filepath.Join(p.root, "logs") }
func (p paths) controlPlane() string { return filepath.Join(p.root, "controlplane") }
func (p paths) agent() string        { return filepath.Join(p.root, "agent") }
func (p paths) pidFile() string      { return filepath.Join(p.root, "supervisor.pid") }
func (p paths) agentPID() string     { return filepath.Join(p.root, "agent.pid") }
func (p paths) stateFile() string    { return filepath.Join(p.root, "stack.json") }
func (p paths) kubeconfig() string   { return filepath.Join(p.controlPlane(), "kubeconfig") }

// State is what a running stack publishes in stack.json.
type State struct {
	PID        int    `json:"pid"`
	Phase      string `json:"phase"` // starting, ready, stopping
	Message    string `json:"message,omitempty"`
	Kubeconfig string `json:"kubeconfig"`
	URL        string `json:"url,omitempty"`
	// ServiceURL is the client Service at its ClusterIP, which the host
	// routes to the stack too.
	ServiceURL string    `json:"serviceURL,omitempty"`
	Kubectl    string    `json:"kubectl,omitempty"`
	Brokers    int       `json:"brokers"`
	Nodes      int       `json:"nodes"`
	Since      time.Time `json:"since"`
}

// Exports are the shell lines that point kubectl and the CLI at the stack.
func (s State) Exports() string {
	return fmt.Sprintf("export KUBECONFIG=%s\nexport PICOMQ_URL=%s\n", s.Kubeconfig, s.URL)
}

func writeState(p paths, s State) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.stateFile() + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.stateFile())
}

// ReadState reads the stack's published state; ok is false when no
// supervisor runs for that folder (none started, or it died).
func ReadState(stateDir string) (s State, ok bool, err error) {
	p := paths{stateDir}
	raw, err := os.ReadFile(p.stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, false, fmt.Errorf("%s: %w", p.stateFile(), err)
	}
	return s, alive(supervisorPID(p)), nil
}

// supervisorPID is the pid the pid file names (0 when none).
func supervisorPID(p paths) int {
	raw, err := os.ReadFile(p.pidFile())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie is not alive.
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// lockPID takes the supervisor's pid file, refusing when a live
// supervisor holds it (a dead one's is taken over: the stack recovers).
func lockPID(p paths) error {
	if pid := supervisorPID(p); pid != 0 && pid != os.Getpid() && alive(pid) {
		return fmt.Errorf("a stack already runs from %s (supervisor pid %d): `picomq dev down` stops it", p.root, pid)
	}
	return os.WriteFile(p.pidFile(), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// FindCheckout is the PicoMQ source tree holding dir (or one of its
// parents).
func FindCheckout(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		raw, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(raw), "module github.com/picomq/picomq\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no PicoMQ checkout at or above %s: run `picomq dev` from the source tree (it builds the brokers from it)", dir)
		}
	}
}
