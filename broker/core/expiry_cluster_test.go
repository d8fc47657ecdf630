package core

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// openMember opens a one-member cluster's broker on dir: a metadata log
// over a loopback peer port, bootstrapped with this member alone.
func openMember(t *testing.T, dir string, mod ...func(*Config)) *Broker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	return openTest(t, dir, append([]func(*Config){func(c *Config) {
		c.NodeID = "m-0"
		c.Cluster = &ClusterConfig{
			MemberID: "m-0~test", Bootstrap: true,
			Network: &metalog.Network{Listener: ln, Advertise: addr, Dial: func(ctx context.Context, a string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", a)
			}},
			HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		}
	}}, mod...)...)
}

// TestClusterOwnerExpiresStreams: in a cluster the owner of a stream's
// first partition expires it, not the metadata leader: the accesses the
// owner served extend a sliding TTL in its memory only, so the leader's
// view of them may be behind. Here the member is the leader; while
// another owns the stream, its TTL running out expires nothing.
func TestClusterOwnerExpiresStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	own := &testOwnership{refuse: map[uint64]bool{}}
	b := openMember(t, t.TempDir(), func(c *Config) { c.Clock, c.Ownership = clock.Now, own })
	defer b.Close()
	mustCreate(t, b, "ttl", node.CreateOptions{TTL: 10 * time.Second})
	e, err := b.Get("ttl")
	if err != nil {
		t.Fatal(err)
	}
	own.mu.Lock()
	own.refuse[e.Partitions[0]] = true
	own.mu.Unlock()
	clock.Add(11 * time.Second)
	b.maintain(ctx)
	if _, ok := b.fsm.Entry("ttl"); !ok {
		t.Fatalf("the leader expired a stream another member owns")
	}
	// This member's view calls it expired; routing still locates it, for
	// its owner to judge.
	if _, err := b.Get("ttl"); err == nil {
		t.Fatalf("Get found a stream past its TTL in this member's view")
	}
	if l, err := b.Locate("ttl"); err != nil || l.Partitions[0] != e.Partitions[0] {
		t.Fatalf("Locate = %+v, %v", l, err)
	}
	own.mu.Lock()
	own.refuse[e.Partitions[0]] = false
	own.mu.Unlock()
	b.maintain(ctx)
	if _, ok := b.fsm.Entry("ttl"); ok {
		t.Fatalf("the owner did not expire its stream past its TTL")
	}
}

// TestReleasePersistsLastAccesses: a hand-off persists the last accesses
// held in memory first, so that the next owner, which judges sliding TTLs
// from the persisted ones, does not find a stream read a moment ago idle.
func TestReleasePersistsLastAccesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	b := openMember(t, t.TempDir(), func(c *Config) { c.Clock = clock.Now })
	defer b.Close()
	mustCreate(t, b, "ttl", node.CreateOptions{TTL: 10 * time.Second})
	if _, err := b.Append(ctx, "ttl", recs("x"), node.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Add(5 * time.Second)
	readAll(t, b, "ttl", 0) // a touch, in memory
	read := clock.Now().UnixNano()
	if e, _ := b.fsm.Entry("ttl"); e.LastAccess >= read {
		t.Fatalf("the read was persisted at once (%d): the test shows nothing", e.LastAccess)
	}
	if err := b.Release(ctx, func(uint64) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if e, _ := b.fsm.Entry("ttl"); e.LastAccess != read {
		t.Fatalf("after the hand-off the persisted last access is %d, want the read's %d", e.LastAccess, read)
	}
}

// TestPlacedByIsTheStreamsFirstPartition: every partition of a stream,
// those a policy update adds included, is placed by its first, so that one
// owner writes the whole stream; an unknown id by itself.
func TestPlacedByIsTheStreamsFirstPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{Policy: stream.PolicyValue{Partitions: 3}})
	mustCreate(t, b, "b", node.CreateOptions{})
	if _, err := b.UpdatePolicy(ctx, "a", stream.PolicyValue{Partitions: 5}); err != nil {
		t.Fatal(err)
	}
	a, _ := b.Get("a")
	for _, id := range a.Partitions {
		if got := b.PlacedBy(id); got != a.Partitions[0] {
			t.Errorf("partition %d of a placed by %d, want %d", id, got, a.Partitions[0])
		}
	}
	e, _ := b.Get("b")
	if got := b.PlacedBy(e.Partitions[0]); got != e.Partitions[0] {
		t.Errorf("b placed by %d", got)
	}
	if got := b.PlacedBy(1 << 40); got != 1<<40 {
		t.Errorf("an unknown id placed by %d", got)
	}
}
