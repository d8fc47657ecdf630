package clusterharness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Broker is one broker of a Cluster: a name, a data directory and a log
// that outlive its processes, and the process of the moment, if any.
type Broker struct {
	Index   int
	Name    string // broker-<i>: the ordinal is the numeric suffix
	DataDir string
	LogPath string

	mu         sync.Mutex
	clientAddr string // where it listens for clients, direct
	https      bool   // the client port serves TLS (Security.TLS)
	peerAddr   string // where it listens for peers
	proc       *process
	starts     int
}

// process is one run of the binary.
type process struct {
	cmd    *exec.Cmd
	log    *os.File
	done   chan struct{} // closed once Wait returned
	err    error         // Wait's result, once done is closed
	paused bool          // SIGSTOPped
}

func brokerName(i int) string { return fmt.Sprintf("broker-%d", i) }

// freeAddr returns a loopback address whose port was free a moment ago
// and that this process has not handed out before. The broker binds it
// itself, so the port is released first: a race with another process is
// possible and shows as a broker that fails to start. Within the process
// the kernel may hand the released port to the next listener — a link's
// proxy — so every port given to a broker stays reserved (listenFresh).
//
// The port is drawn below the kernel's ephemeral range: one from that
// range, free when checked, may meanwhile become the source port of some
// process's outgoing loopback connection (the tests make thousands) before
// the broker binds it, as a CI run saw ("bind: address already in use").
// Harness processes (test packages run in parallel) claim each such port
// through a lock file (claimPort), so they do not draw the same one; only
// a process outside the harness picking the port by chance can collide.
func freeAddr() (string, error) {
	if addr := quietAddr(); addr != "" {
		return addr, nil
	}
	l, err := listenFresh()
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// quietAddr draws a free port below the ephemeral range that this process
// has not handed out, and reserves it; "" when none was found.
func quietAddr() string {
	lo, _ := ephemeralRange()
	if lo <= quietPortsFrom+1000 {
		return ""
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := quietPortsFrom + rand.IntN(lo-quietPortsFrom)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		addr := l.Addr().String()
		l.Close()
		handedOut.ports[port] = true
		if !claimPort(port) {
			continue // another harness process's, its broker not bound yet or down
		}
		return addr
	}
	return ""
}

// portClaims is where harness processes claim quiet ports: one lock file
// per port, locked for the claiming process's life.
var portClaims = filepath.Join(os.TempDir(), "picomq-harness-ports")

// claimed holds the claims' files open: the kernel drops a flock when its
// file is closed, or when the process exits, however it exits.
var claimed []*os.File

// claimPort claims port for this process among every harness process on
// the machine, and reports whether it could. Each process has its own
// handedOut, and a port stays free between its draw and its broker's bind
// (seconds when the broker is down in a trial): a CI run's fault trial saw
// a broker fail "bind: address already in use" on a port another test
// package's harness had drawn too. Where the claims folder cannot be used
// the port is taken unclaimed, as before claims. Called under handedOut.
func claimPort(port int) bool {
	if err := os.MkdirAll(portClaims, 0o755); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(portClaims, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	claimed = append(claimed, f)
	return true
}

// quietPortsFrom is the lowest port freeAddr draws from: above the
// well-known and most registered services' ports.
const quietPortsFrom = 20000

// ephemeralRange is the kernel's range of ports for outgoing connections
// and port-0 listeners (Linux's ip_local_port_range; its default when it
// cannot be read).
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l <= 0 || h < l {
		return lo, hi
	}
	return l, h
}

// handedOut is every loopback port this process gave a broker or a proxy.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// listenFresh listens on a port of 127.0.0.1 that this process never
// handed out before, and reserves it. A port already handed out is kept
// open while the next is tried, so that the kernel offers another.
func listenFresh() (net.Listener, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var rejected []net.Listener
	defer func() {
		for _, l := range rejected {
			l.Close()
		}
	}()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return l, nil
		}
		rejected = append(rejected, l)
	}
	return nil, errors.New("clusterharness: no loopback port not handed out before after 100 tries")
}

// URL is the broker's client URL, direct (not through any proxy).
func (b *Broker) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.https {
		return "https://" + b.clientAddr
	}
	return "http://" + b.clientAddr
}

// ClientAddr and PeerAddr are where the broker listens.
func (b *Broker) ClientAddr() string { b.mu.Lock(); defer b.mu.Unlock(); return b.clientAddr }
func (b *Broker) PeerAddr() string   { b.mu.Lock(); defer b.mu.Unlock(); return b.peerAddr }

// Running reports whether a process of the broker is alive (paused or not).
func (b *Broker) Running() bool {
	b.mu.Lock()
	p := b.proc
	b.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Serving reports whether the broker runs and is not paused.
func (b *Broker) Serving() bool {
	b.mu.Lock()
	p := b.proc
	b.mu.Unlock()
	return p != nil && b.Running() && !p.paused
}

// Pid is the process id of the broker's process, 0 when none runs.
func (b *Broker) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return 0
	}
	return b.proc.cmd.Process.Pid
}

// launch starts a process of the broker with args. It does not wait for
// readiness.
func (b *Broker) launch(bin string, args []string, env []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc != nil {
		select {
		case <-b.proc.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", b.Name, b.proc.cmd.Process.Pid)
		}
	}
	if err := os.MkdirAll(filepath.Dir(b.LogPath), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(b.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	b.starts++
	fmt.Fprintf(log, "=== harness: start #%d of %s at %s: %q\n", b.starts, b.Name, time.Now().Format(time.RFC3339Nano), args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	// If the test process dies without its cleanup (a panic, a SIGKILL of
	// go test), the kernel kills the broker too: no process is left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	b.proc = p
	return nil
}

// exited returns the channel closed when the current process ends (nil
// when there is none) and, once closed, its exit error.
func (b *Broker) exited() (<-chan struct{}, func() error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return nil, func() error { return nil }
	}
	p := b.proc
	return p.done, func() error { return p.err }
}

// signal sends sig to the running process.
func (b *Broker) signal(sig syscall.Signal) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return fmt.Errorf("%s: no process", b.Name)
	}
	select {
	case <-b.proc.done:
		return fmt.Errorf("%s: its process has exited (%v)", b.Name, b.proc.err)
	default:
	}
	if err := b.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %v: %w", b.Name, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		b.proc.paused = true
	case syscall.SIGCONT:
		b.proc.paused = false
	}
	return nil
}

// kill sends SIGKILL (no flush, no close, no goodbye) and waits for the
// process to end. No process is not an error.
func (b *Broker) kill() {
	done, _ := b.exited()
	if done == nil {
		return
	}
	_ = b.signal(syscall.SIGKILL)
	<-done
}

// terminate sends SIGTERM and waits up to timeout for a clean exit, then
// SIGKILLs. A paused process is continued first, or it could not exit.
func (b *Broker) terminate(timeout time.Duration) error {
	done, result := b.exited()
	if done == nil {
		return nil
	}
	_ = b.signal(syscall.SIGCONT)
	if err := b.signal(syscall.SIGTERM); err != nil {
		<-done
		return nil // it had exited already
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		var ee *exec.ExitError
		if err := result(); err != nil && !errors.As(err, &ee) {
			return err
		}
		if err := result(); err != nil {
			return fmt.Errorf("%s exited with %v after SIGTERM", b.Name, err)
		}
		return nil
	case <-t.C:
		b.kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM: killed", b.Name, timeout)
	}
}

// logTail returns the last n bytes of the broker's log.
func (b *Broker) logTail(n int) string {
	data, err := os.ReadFile(b.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(data[max(0, len(data)-n):])
}

// stoppedAll reports nil once every thread of process pid is stopped
// (state T in /proc/<pid>/task/<tid>/stat).
func stoppedAll(pid int) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) == 0 || (fields[0] != "T" && fields[0] != "t") {
			return fmt.Errorf("thread %s of %d is in state %v", task.Name(), pid, fields[:min(1, len(fields))])
		}
	}
	return nil
}
