package metalog

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// Network is the peer network a clustered node's raft speaks over: the
// connections its peer port accepted for raft, and a dialer to the others.
// Addresses in the replicated configuration are whatever Advertise says —
// in a StatefulSet the pod's stable DNS name, "<pod>.<headless>:<port>" —
// and Dial resolves them at each dial, so a pod that comes back with a new
// IP, or a whole cluster restarted on new IPs, keeps working: an IP in the
// configuration wedges a cluster whose pods move (Vault, Consul, dkron and
// rqlite each learned this; see reference/cluster.md).
type Network struct {
	// Listener yields the raft connections accepted on this node's peer
	// port (the peer port's mux hands them over).
	Listener net.Listener
	// Dial connects to a peer's raft, addr being an address of the
	// configuration; it must mark the connection as raft's for the peer's
	// mux, and resolve addr anew each time.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Advertise is the address this node is known by in the configuration.
	Advertise string
}

// streamLayer is raft's view of a Network.
type streamLayer struct {
	n Network
}

var _ raft.StreamLayer = streamLayer{}

func (s streamLayer) Accept() (net.Conn, error) { return s.n.Listener.Accept() }
func (s streamLayer) Close() error              { return s.n.Listener.Close() }
func (s streamLayer) Addr() net.Addr            { return advertised(s.n.Advertise) }

func (s streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.n.Dial(ctx, string(address))
}

// advertised is an address that is a name, not an IP: raft takes the
// transport's address from Addr().String().
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

func (n *Network) check() error {
	switch {
	case n.Listener == nil:
		return errors.New("metalog: Config.Network.Listener is required")
	case n.Dial == nil:
		return errors.New("metalog: Config.Network.Dial is required")
	case n.Advertise == "":
		return errors.New("metalog: Config.Network.Advertise is required")
	}
	return nil
}
