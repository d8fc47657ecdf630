package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// Create creates a named stream, or returns the existing one (created false)
// unchanged: the caller compares configurations.
func (b *Broker) Create(ctx context.Context, name string, o node.CreateOptions) (*node.Entry, bool, error) {
	if err := node.ValidateName(name); err != nil {
		return nil, false, err
	}
	if err := o.Policy.Validate(); err != nil {
		return nil, false, err
	}
	if e, ok, err := b.existing(ctx, name); ok || err != nil {
		return e, false, err
	}
	if err := b.admitWrite(); err != nil {
		return nil, false, err
	}
	c := &meta.Create{Name: name, ContentType: o.ContentType, Policy: o.Policy, TTL: int64(o.TTL), Closed: o.Closed, Now: b.now().UnixNano()}
	if !o.ExpiresAt.IsZero() {
		c.ExpiresAt = o.ExpiresAt.UnixNano()
	}
	if len(o.Initial) > 0 {
		if _, err := stream.CheckBatch(stream.PolicyValue{MaxRecordBytes: o.Policy.MaxRecordBytes}, o.Initial); err != nil {
			return nil, false, err
		}
		obj, rs, err := b.writeInitial(0, o.Initial)
		if err != nil {
			return nil, false, err
		}
		c.Object, c.Size, c.Replicas, c.Initial = obj.id, obj.size, obj.replicas, rs
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpCreate, Create: c})
	if err != nil {
		return nil, false, err
	}
	return createResult(res, "create")
}

// createResult reads a create's or a fork's answer: an entry that lost a
// race to a soft-deleted one is gone.
func createResult(res any, op string) (*node.Entry, bool, error) {
	r, ok := res.(*meta.CreateResult)
	if !ok {
		return nil, false, meta.BadCommand.With("op", op, "reason", fmt.Sprintf("result %T", res))
	}
	if r.Entry.Deleted {
		return nil, false, meta.StreamGone.With("name", r.Entry.Name)
	}
	return entryOf(r.Entry), r.Created, nil
}

// existing returns the entry a create of name must answer with instead of
// creating: a live one (ok), or StreamGone for a soft-deleted one. An
// expired one is deleted first, so that the name is created anew.
func (b *Broker) existing(ctx context.Context, name string) (*node.Entry, bool, error) {
	e, ok := b.fsm.Entry(name)
	if !ok {
		return nil, false, nil
	}
	if e.Deleted {
		return nil, false, meta.StreamGone.With("name", name)
	}
	if !b.expired(e, b.now().UnixNano()) {
		return b.entryOf(e), true, nil
	}
	if err := b.deleteEntry(ctx, e); err != nil && !errors.Is(err, meta.StreamNotFound) {
		return nil, false, err
	}
	if e, ok := b.fsm.Entry(name); ok && e.Deleted {
		return nil, false, meta.StreamGone.With("name", name) // expired, but forks of it live
	}
	return nil, false, nil
}

// Delete removes a named stream: the name is reusable at once, its data is
// collected later.
func (b *Broker) Delete(ctx context.Context, name string) error {
	e, ok := b.lookup(name)
	if !ok {
		return meta.StreamNotFound.With("name", name)
	}
	return b.deleteEntry(ctx, e)
}

func (b *Broker) deleteEntry(ctx context.Context, e *meta.Entry) error {
	_, err := b.apply(ctx, &meta.Command{Op: meta.OpDelete, Delete: &meta.Delete{Name: e.Name, IfStreams: e.Streams}})
	if err != nil {
		return err
	}
	b.forget(e.Name)
	return nil
}

// UpdatePolicy changes a stream's policy (partitions may only grow).
// Retention due under the policy being replaced is persisted first: a
// reader already saw those records trimmed (see retention.go), so a longer
// retention must not bring them back.
func (b *Broker) UpdatePolicy(ctx context.Context, name string, p stream.PolicyValue) (*node.Entry, error) {
	if n, err := b.stream(name); err == nil {
		n.mu.Lock()
		ids := slices.Clone(n.streams)
		n.mu.Unlock()
		for _, id := range ids {
			if err := b.persistRetention(ctx, n, id); err != nil {
				return nil, err
			}
		}
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpUpdatePolicy, UpdatePolicy: &meta.UpdatePolicy{Name: name, Policy: p}})
	if err != nil {
		return nil, err
	}
	e, ok := res.(*meta.Entry)
	if !ok {
		return nil, meta.BadCommand.With("op", "updatePolicy", "reason", fmt.Sprintf("result %T", res))
	}
	return b.entryOf(e), nil
}

// Get returns a named stream's entry; an expired one is not found, a
// soft-deleted one (kept for its forks) is StreamGone.
func (b *Broker) Get(name string) (*node.Entry, error) {
	e, ok := b.lookup(name)
	if !ok {
		return nil, meta.StreamNotFound.With("name", name)
	}
	if e.Deleted {
		return nil, meta.StreamGone.With("name", name)
	}
	return b.entryOf(e), nil
}

// Locate returns a named stream's entry whatever its lifetime says, for
// routing a request to the stream's owner: in a cluster, the owner judges a
// sliding TTL from the accesses it served, which it persists only lazily,
// so another node's view of the lifetime may be behind (and call a stream
// being read expired). Absent is StreamNotFound, soft-deleted StreamGone.
//
// The entry holds what a route is decided by — Name, Partitions, Policy —
// and nothing else: every request through a cluster member asks, and a
// whole entry (producers copied, the journal's tail overlaid) cost the
// append path a few percent of its CPU for fields no route reads.
func (b *Broker) Locate(name string) (*node.Entry, error) {
	var out *node.Entry
	var err error
	b.fsm.View(func(s *meta.State) {
		e, ok := s.Names[name]
		switch {
		case !ok:
			err = meta.StreamNotFound.With("name", name)
		case e.Deleted:
			err = meta.StreamGone.With("name", name)
		default:
			out = &node.Entry{Name: e.Name, Partitions: slices.Clone(e.Streams), Policy: e.Policy}
		}
	})
	return out, err
}

// PlacedBy returns the internal stream a cluster places internal stream id
// by: the first partition of its stream, so that a stream's partitions
// share one owner (the core keeps MaxBytes, producers, Stream-Seq and the
// closed flag for the whole stream, in the memory of the node writing it).
// An id this node does not know, or whose stream no longer lists it, is
// placed by itself.
func (b *Broker) PlacedBy(id uint64) uint64 {
	first := id
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[id]
		if !ok {
			return
		}
		if e, ok := s.Names[in.Name]; ok && len(e.Streams) > 0 && slices.Contains(e.Streams, id) {
			first = e.Streams[0]
		}
	})
	return first
}

// List returns every live named stream's entry, sorted by name.
func (b *Broker) List() []*node.Entry {
	var out []*node.Entry
	now := b.now().UnixNano()
	views := b.loadedViews()
	b.fsm.View(func(s *meta.State) {
		for name, e := range s.Names {
			if !e.Deleted && !lifetimeOver(views[name], e.TTL, e.ExpiresAt, e.LastAccess, now) {
				out = append(out, b.entryOf(e))
			}
		}
	})
	slices.SortFunc(out, func(a, b *node.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Partition returns an internal stream's state (status reporting).
func (b *Broker) Partition(id uint64) (node.PartitionState, bool) {
	var ps node.PartitionState
	found := false
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[id]
		if !ok {
			return
		}
		found, ps = true, partitionStateOf(s, in)
		// The journal's acknowledged tail, not checkpointed yet, counts.
		past, end := b.tail.past(in)
		ps.End, ps.Ranges = end, ps.Ranges+len(past)
		for _, r := range past {
			ps.Bytes += r.Bytes
			ps.LocalBytes += r.Len
		}
	})
	return ps, found
}

// TailOf returns the entry of name and its partition's bounds, read
// together: a reader deciding whether it reached a closed stream's final
// offset compares against the End of the same state that says Closed. It
// does not count as an access (HEAD must not extend a sliding TTL).
func (b *Broker) TailOf(name string, partition int) (node.Tail, error) {
	var t node.Tail
	var e *meta.Entry
	var err error
	now := b.now().UnixNano()
	b.fsm.View(func(s *meta.State) {
		var ok bool
		e, ok = s.Names[name]
		if !ok {
			err = meta.StreamNotFound.With("name", name)
			return
		}
		if e.Deleted {
			err = meta.StreamGone.With("name", name)
			return
		}
		if partition < 0 || partition >= len(e.Streams) {
			err = stream.UnknownPartition.With("partition", partition, "partitions", len(e.Streams))
			return
		}
		in := s.Streams[e.Streams[partition]]
		past, _ := b.tail.past(in)
		start := max(in.Start, retentionStart(in, past, e.Policy, now))
		t = node.Tail{Entry: b.entryOf(e), Start: start, End: b.tail.ackedEnd(in)}
		e = nil // the state's own: not to be used outside the View
	})
	if err != nil {
		return node.Tail{}, err
	}
	if b.expiredAt(name, int64(t.Entry.TTL), expiresAtNs(t.Entry), t.Entry.LastAccess.UnixNano(), now) {
		return node.Tail{}, meta.StreamNotFound.With("name", name, "reason", "expired")
	}
	return t, nil
}

func expiresAtNs(e *node.Entry) int64 {
	if e.ExpiresAt.IsZero() {
		return 0
	}
	return e.ExpiresAt.UnixNano()
}

// lookup returns the entry of name: not found when absent or expired. A
// soft-deleted entry is returned: callers refuse it with StreamGone.
func (b *Broker) lookup(name string) (*meta.Entry, bool) {
	e, ok := b.fsm.Entry(name)
	if !ok {
		return nil, false
	}
	if b.expired(e, b.now().UnixNano()) {
		return nil, false
	}
	return e, true
}

// expired reports whether a stream's lifetime is over at now.
func (b *Broker) expired(e *meta.Entry, now int64) bool {
	return b.expiredAt(e.Name, e.TTL, e.ExpiresAt, e.LastAccess, now)
}

// expiredAt is expired on the entry's lifetime fields: an absolute expiry
// passed, or a TTL since the later of the persisted and the in-memory last
// access. It takes b.mu, so it must not run inside a state machine View:
// there, use lifetimeOver with a snapshot of the views (loadedViews).
func (b *Broker) expiredAt(name string, ttl, expiresAt, lastAccess, now int64) bool {
	b.mu.Lock()
	n := b.named[name]
	b.mu.Unlock()
	return lifetimeOver(n, ttl, expiresAt, lastAccess, now)
}

// lifetimeOver is expiredAt's rule, taking no lock: n, the stream's loaded
// view or nil, supplies the in-memory last access.
func lifetimeOver(n *named, ttl, expiresAt, lastAccess, now int64) bool {
	if expiresAt > 0 && now >= expiresAt {
		return true
	}
	if ttl > 0 {
		if n != nil {
			lastAccess = max(lastAccess, n.lastAccess.Load())
		}
		return now-lastAccess >= ttl
	}
	return false
}

// loadedViews copies the map of loaded stream views. Passes that walk the
// registry inside a View read it instead of taking b.mu there: a View
// holds the state machine's read lock, and a goroutine holding b.mu may be
// waiting, through n.mu, on a command that needs the write lock.
func (b *Broker) loadedViews() map[string]*named {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.named)
}

// Touch records an access for the sliding TTL, in memory: the maintenance
// loop persists it lazily.
func (b *Broker) Touch(name string) {
	if n, err := b.stream(name); err == nil {
		n.lastAccess.Store(max(n.lastAccess.Load(), b.now().UnixNano()))
	}
}
