// Package podnet is the local stack's pod network, made of Linux network
// namespaces and veth pairs with the `ip` command (iproute2):
//
//	host netns              router netns (the agent's)        pod netns (one per pod)
//	pmq0 198.18.0.1/30 ──── eth0 198.18.0.2/30
//	routes 198.18.16.0/20   forwarding on; ClusterIPs on lo;
//	(pods), 198.18.8.0/22   per pod:
//	(services) via .0.2     pmqh<id> ─ route <podIP>/32 ────── eth0 <podIP>/32
//	                        (proxy ARP)                        default via 169.254.1.1
//
// Each pod has a network namespace of its own, as in a cluster: its
// containers share it, bind any port they like, and reach each other over
// localhost; pods reach one another and the host's API server through the
// router namespace, which forwards between them. The host reaches every
// pod address through pmq0, and nothing of the host's own network
// configuration changes beyond that link and its route: forwarding is on
// in the router namespace only. Everything needs root (CAP_NET_ADMIN).
package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Config names the network's pieces.
type Config struct {
	// Router is the router namespace's name (/run/netns/<Router>).
	Router string
	// HostLink is the host's end of the link to the router.
	HostLink string
	// HostIP and RouterIP are the two ends of that link (a /30); the API
	// server listens on HostIP for the pods.
	HostIP, RouterIP netip.Addr
	// Pods is the range pod addresses come from, and Services the
	// Services' ClusterIP range (the agent serves those addresses in the
	// router namespace); the host routes both through the router.
	Pods, Services netip.Prefix
}

// DefaultConfig is the stack's network: 198.18.0.0/15 is reserved for
// benchmarking (RFC 2544), so it collides with no real network.
func DefaultConfig() Config {
	return Config{
		Router:   "picomq-dev",
		HostLink: "pmq0",
		HostIP:   netip.MustParseAddr("198.18.0.1"),
		RouterIP: netip.MustParseAddr("198.18.0.2"),
		Pods:     netip.MustParsePrefix("198.18.16.0/20"),
		Services: netip.MustParsePrefix("198.18.8.0/22"),
	}
}

// ErrNoPrivilege says the stack's network cannot be made here.
var ErrNoPrivilege = errors.New("the local stack's pod network needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN, for network namespaces and veth links) and iproute2's ip command")

// Check says whether the network can be made on this host.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: running as uid %d", ErrNoPrivilege, os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoPrivilege, err)
	}
	return nil
}

// RouterPath is the router namespace's file, which processes join.
func (c Config) RouterPath() string { return filepath.Join("/run/netns", c.Router) }

// SetUp makes the router namespace and its link to the host, first
// removing whatever an earlier stack left of them.
func (c Config) SetUp() error {
	if err := Check(); err != nil {
		return err
	}
	c.TearDown()
	r := c.Router
	steps := [][]string{
		{"netns", "add", r},
		{"link", "add", c.HostLink, "type", "veth", "peer", "name", "eth0", "netns", r},
		{"addr", "add", c.HostIP.String() + "/30", "dev", c.HostLink},
		{"link", "set", c.HostLink, "up"},
		{"-n", r, "link", "set", "lo", "up"},
		{"-n", r, "addr", "add", c.RouterIP.String() + "/30", "dev", "eth0"},
		{"-n", r, "link", "set", "eth0", "up"},
		{"-n", r, "route", "add", "default", "via", c.HostIP.String()},
		{"route", "add", c.Pods.String(), "via", c.RouterIP.String(), "dev", c.HostLink},
	}
	if c.Services.IsValid() {
		steps = append(steps, []string{"route", "add", c.Services.String(), "via", c.RouterIP.String(), "dev", c.HostLink})
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			c.TearDown()
			return err
		}
	}
	if err := run("ip", "netns", "exec", r, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		c.TearDown()
		return err
	}
	return nil
}

// TearDown removes the router namespace and the host's link (the pods'
// namespaces go with RemoveStalePods). Missing pieces are no error.
func (c Config) TearDown() {
	_ = ip("link", "del", c.HostLink) // also removes the router's end and the route
	_ = ip("netns", "del", c.Router)
}

// Pod is one pod's network: its namespace and the router's end of its link.
type Pod struct {
	ID string
	IP netip.Addr
}

// NS is the pod's namespace name; Path its file.
func (p Pod) NS() string   { return "pmq-" + p.ID }
func (p Pod) Path() string { return filepath.Join("/run/netns", p.NS()) }
func (p Pod) link() string { return "pmqh" + p.ID }

// PodID shortens a pod's UID to the 8 characters its names carry
// (interface names have at most 15).
func PodID(uid string) string {
	id := strings.ReplaceAll(uid, "-", "")
	if len(id) > 8 {
		id = id[:8]
	}
	return id
}

// AddPod makes p's namespace and link. It runs in the router namespace
// (the agent's), replacing what an earlier attempt left.
func AddPod(p Pod) error {
	RemovePod(p)
	ns, link := p.NS(), p.link()
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", link, "up"},
		{"route", "add", p.IP.String() + "/32", "dev", link},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", p.IP.String() + "/32", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		// The pod's gateway is an address nobody has: the router's end
		// answers for it (proxy ARP), as Calico does.
		{"-n", ns, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link"},
		{"-n", ns, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			RemovePod(p)
			return err
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+link+"/proxy_arp", []byte("1"), 0o644); err != nil {
		RemovePod(p)
		return fmt.Errorf("podnet: proxy ARP on %s: %w", link, err)
	}
	return nil
}

// AddLocalAddress puts ip on the loopback of the namespace the caller
// runs in (the router's: a Service's ClusterIP the agent serves).
func AddLocalAddress(addr netip.Addr) error {
	err := ip("addr", "add", addr.String()+"/32", "dev", "lo")
	if err != nil && strings.Contains(err.Error(), "File exists") {
		return nil
	}
	return err
}

// RemovePod removes p's namespace (which takes its link and route along).
func RemovePod(p Pod) {
	_ = ip("link", "del", p.link())
	_ = ip("netns", "del", p.NS())
}

// RemoveStalePods removes every pod namespace, as an agent does at start
// before it runs the pods again.
func RemoveStalePods() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), "pmq-"); ok {
			RemovePod(Pod{ID: id})
		}
	}
}

func ip(args ...string) error { return run("ip", args...) }

func run(name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("podnet: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
