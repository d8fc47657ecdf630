package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/membership"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/peer"
	"github.com/picomq/picomq/broker/settings"
)

// cluster is a clustered broker's rooms around its core: the peer port,
// its membership in the metadata log, and what runs beside the core.
type cluster struct {
	cfg    settings.Cluster
	log    *slog.Logger
	mux    *peer.Mux
	addrs  peer.Addresses
	dialer peer.Dialer
	client *peer.Client
	member *membership.Member
	srv    *peer.Server

	stop func()
	wg   sync.WaitGroup
}

// prepareCluster opens the peer port and takes this broker's place in the
// cluster's metadata log (bootstrap or join), before the core opens.
func prepareCluster(ctx context.Context, s settings.Settings, logger *slog.Logger) (*cluster, error) {
	c := &cluster{cfg: s.Cluster, log: logger}
	_, peerPort, err := net.SplitHostPort(s.Cluster.PeerListen)
	if err != nil {
		return nil, fmt.Errorf("--peer-listen %q: %w", s.Cluster.PeerListen, err)
	}
	_, clientPort, err := net.SplitHostPort(s.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", s.Listen, err)
	}
	c.addrs = peer.Addresses{Service: s.Cluster.PeerService, PeerPort: peerPort, ClientPort: clientPort}
	var names []string
	if len(s.Cluster.Peers) > 0 {
		c.addrs.Static = map[string]peer.Static{}
		for _, p := range s.Cluster.Peers {
			c.addrs.Static[p.Name] = peer.Static{Peer: p.PeerAddr, Client: p.ClientAddr}
			names = append(names, p.Name)
		}
	}
	c.dialer = peer.Dialer{Addresses: c.addrs}
	c.client = peer.NewClient(c.dialer)
	if c.mux, err = peer.Listen(s.Cluster.PeerListen); err != nil {
		return nil, err
	}
	c.member, err = membership.Prepare(ctx, membership.Config{
		DataDir: s.DataDir, Node: s.NodeID, ClusterID: s.Cluster.ID,
		Addresses: c.addrs, Client: c.client, Peers: names, Logger: logger,
	})
	if err != nil {
		c.mux.Close()
		return nil, err
	}
	return c, nil
}

// coreConfig is how the core reaches the cluster's metadata log.
func (c *cluster) coreConfig() *core.ClusterConfig {
	id := c.member.Identity()
	return &core.ClusterConfig{
		MemberID: id.ID(),
		Network: &metalog.Network{
			Listener: c.mux.Raft(), Dial: c.dialer.DialRaft, Advertise: c.member.Advertise(),
		},
		Forward:   c.member.Forward,
		Bootstrap: c.member.Bootstrap(),
		Number:    id.Number,
	}
}

// start serves the peer API and runs the membership duties beside b.
func (c *cluster) start(ctx context.Context, b *core.Broker) error {
	c.srv = peer.NewServer(c.log)
	if err := c.member.Attach(ctx, b, c.srv); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		if err := c.srv.Serve(c.mux.HTTP()); err != nil {
			c.log.Error("the peer API stopped", "err", err)
		}
	}()
	go func() { defer c.wg.Done(); c.member.Run(ctx) }()
	c.log.Info("cluster member running", "member", c.member.Identity().ID(), "peer", c.mux.Addr().String(), "advertise", c.member.Advertise())
	return nil
}

// close stops the cluster's rooms, after the core has closed (its last
// commands may still go to the leader through the peer port).
func (c *cluster) close() {
	if c.stop != nil {
		c.stop()
	}
	if c.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.srv.Shutdown(ctx)
		cancel()
	}
	c.mux.Close()
	c.wg.Wait()
}
