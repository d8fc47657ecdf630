package podnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary, run in the router namespace with PODNET_ADD=id=ip,...,
// adds those pods: AddPod runs where the agent runs.
func TestMain(m *testing.M) {
	if id := os.Getenv("PODNET_SERVE"); id != "" {
		// A pod's server: answers id on port 4437 of every address.
		ln, err := net.Listen("tcp", ":4437")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			conn, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			conn.Write([]byte(id + "\n"))
			conn.Close()
		}
	}
	if addr := os.Getenv("PODNET_DIAL"); addr != "" {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		buf := make([]byte, 64)
		n, _ := conn.Read(buf)
		os.Stdout.Write(buf[:n])
		os.Exit(0)
	}
	if spec := os.Getenv("PODNET_ADD"); spec != "" {
		for _, p := range strings.Split(spec, ",") {
			id, addr, _ := strings.Cut(p, "=")
			if err := AddPod(Pod{ID: id, IP: netip.MustParseAddr(addr)}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPodsReachEachOtherAndTheHost makes a router and two pods on an
// address range of the test's own, listens in each pod on the same port,
// and checks that the host reaches both, that one pod reaches the other
// and the host, and that each pod's localhost is its own.
func TestPodsReachEachOtherAndTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("makes network namespaces: not a unit test")
	}
	if err := Check(); err != nil {
		t.Skip(err)
	}
	c := Config{
		Router: "pmqtest-router", HostLink: "pmqtest0",
		HostIP: netip.MustParseAddr("198.19.200.1"), RouterIP: netip.MustParseAddr("198.19.200.2"),
		Pods: netip.MustParsePrefix("198.19.201.0/24"),
	}
	if err := c.SetUp(); err != nil {
		t.Fatal(err)
	}
	a := Pod{ID: "t0000001", IP: netip.MustParseAddr("198.19.201.1")}
	b := Pod{ID: "t0000002", IP: netip.MustParseAddr("198.19.201.2")}
	t.Cleanup(func() {
		for _, p := range []Pod{a, b} {
			RemovePod(p)
		}
		c.TearDown()
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	add := exec.Command("nsenter", "--net="+c.RouterPath(), self)
	add.Env = append(os.Environ(), "PODNET_ADD="+a.ID+"="+a.IP.String()+","+b.ID+"="+b.IP.String())
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("add pods: %v: %s", err, out)
	}
	// A host listener on HostIP stands for the API server.
	hostLn, err := net.Listen("tcp", c.HostIP.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			conn, err := hostLn.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("host\n"))
			conn.Close()
		}
	}()
	// Each pod answers its own name on port 4437, bound to all addresses.
	for _, p := range []Pod{a, b} {
		srv := exec.Command("ip", "netns", "exec", p.NS(), self)
		srv.Env = append(os.Environ(), "PODNET_SERVE="+p.ID)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	}
	read := func(dial func() (net.Conn, error)) string {
		deadline := time.Now().Add(10 * time.Second)
		for {
			conn, err := dial()
			if err == nil {
				conn.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 64)
				n, _ := conn.Read(buf)
				conn.Close()
				if n > 0 {
					return strings.TrimSpace(string(buf[:n]))
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no answer: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, p := range []Pod{a, b} {
		if got := read(func() (net.Conn, error) { return net.DialTimeout("tcp", p.IP.String()+":4437", time.Second) }); got != p.ID {
			t.Errorf("host to pod %s: %q", p.ID, got)
		}
	}
	inPod := func(p Pod, addr string) string {
		dial := exec.Command("ip", "netns", "exec", p.NS(), self)
		dial.Env = append(os.Environ(), "PODNET_DIAL="+addr)
		out, err := dial.CombinedOutput()
		if err != nil {
			t.Errorf("in %s: dial %s: %v: %s", p.ID, addr, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := inPod(a, b.IP.String()+":4437"); got != b.ID {
		t.Errorf("pod a to pod b: %q", got)
	}
	if got := inPod(b, "127.0.0.1:4437"); got != b.ID {
		t.Errorf("pod b's localhost: %q", got)
	}
	if got := inPod(a, hostLn.Addr().String()); got != "host" {
		t.Errorf("pod a to the host: %q", got)
	}
}
