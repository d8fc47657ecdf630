package metalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Membership: the changes of the replicated configuration a cluster makes
// as brokers come and go (DESIGN.md, "Cluster mode"): a joiner is added as
// a non-voter, promoted once it has caught up, demoted and removed when it
// leaves; leadership is handed over before the leader goes. These calls
// speak metalog's types, not raft's, so the cluster code depends on this
// package alone.
//
// Every change is proposed to the leader and returns once the
// configuration entry is committed; on any other node it fails with
// ErrNotLeader (wrapped), appending nothing. raft applies one change at a
// time: a change proposed while another is uncommitted waits for it,
// bounded by ctx.

// ErrUnknownServer is returned (wrapped) by Promote and TransferLeadership
// when the server named is not in the configuration.
var ErrUnknownServer = errors.New("metalog: no such server in the configuration")

// ErrNotVoter is returned (wrapped) by TransferLeadership when the server
// named is not a voter, or, asked for any server, when no server but this
// one votes: leadership can only go to a voter.
var ErrNotVoter = errors.New("metalog: not a voter")

// Suffrage is whether a server of the configuration votes.
type Suffrage int

const (
	// Voter votes in elections and counts towards the quorum that commits
	// an entry.
	Voter Suffrage = iota + 1
	// Nonvoter receives and applies the log but neither votes nor counts
	// towards the quorum: a joining node catching up before its promotion,
	// or a leaving one after its demotion.
	Nonvoter
)

func (s Suffrage) String() string {
	switch s {
	case Voter:
		return "voter"
	case Nonvoter:
		return "non-voter"
	}
	return fmt.Sprintf("Suffrage(%d)", int(s))
}

// Server is one member of the configuration.
type Server struct {
	// ID is the server's NodeID (Config.NodeID).
	ID string
	// Address is where the others dial it (its transport's address).
	Address string
	// Suffrage says whether it votes.
	Suffrage Suffrage
}

// Configuration is the cluster's membership as this node knows it: the
// latest configuration in its log, committed or not (raft acts on a
// configuration from the moment it is appended).
type Configuration struct {
	// Servers lists the members in the configuration's order.
	Servers []Server
	// Index is the index of the log entry that set this configuration (or
	// of the snapshot's configuration when the entry was compacted away);
	// 0 for a node that has none yet (started without Bootstrap and not
	// yet added).
	Index uint64
}

// Server returns the member id, and whether there is one.
func (c Configuration) Server(id string) (Server, bool) {
	for _, s := range c.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return Server{}, false
}

// Voters returns the IDs of the voting members.
func (c Configuration) Voters() []string {
	var ids []string
	for _, s := range c.Servers {
		if s.Suffrage == Voter {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// Addr returns the address this node's transport is known by: the host:port
// it advertises over TCP, or its NodeID on the in-memory transport. It is
// the address to give AddNonvoter on the leader.
func (l *Log) Addr() string { return string(l.addr) }

// AddNonvoter adds the server id, reached at addr, as a non-voter: it
// starts receiving the log at once, without counting towards the quorum,
// so adding it cannot stall commits however far behind it is. Adding a
// member again only changes its address (a voter stays a voter). Leader
// only.
func (l *Log) AddNonvoter(ctx context.Context, id, addr string) error {
	const op = "add non-voter"
	if err := checkServer(op, id, addr); err != nil {
		return err
	}
	return l.change(ctx, op, func(timeout time.Duration) raft.Future {
		return l.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
}

// AddVoter adds the server id, reached at addr, as a voter, or makes a
// known member one (a non-voter is promoted, a voter re-addressed). A voter
// that has not caught up makes the quorum wait for it: add a new server
// with AddNonvoter, and Promote it once it has the log. Leader only.
func (l *Log) AddVoter(ctx context.Context, id, addr string) error {
	const op = "add voter"
	if err := checkServer(op, id, addr); err != nil {
		return err
	}
	return l.change(ctx, op, func(timeout time.Duration) raft.Future {
		return l.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
}

// Promote makes the member id a voter, at the address the configuration
// has for it (AddVoter on a known id). Whether it has caught up is the
// caller's judgement: raft does not say how far a follower is. Promoting a
// voter changes nothing. Leader only; ErrUnknownServer when id is not a
// member.
func (l *Log) Promote(ctx context.Context, id string) error {
	const op = "promote"
	s, err := l.member(ctx, op, id)
	if err != nil {
		return err
	}
	if s.Suffrage == Voter {
		return nil
	}
	return l.change(ctx, op, func(timeout time.Duration) raft.Future {
		return l.raft.AddVoter(raft.ServerID(s.ID), raft.ServerAddress(s.Address), 0, timeout)
	})
}

// DemoteVoter takes the vote of the member id, which goes on receiving the
// log as a non-voter; demoting the leader makes it step down once the
// change commits. raft refuses to demote the last voter. A server that is
// not a member is left as it is (the change is still appended, and
// succeeds), so a retried demotion succeeds. Leader only.
func (l *Log) DemoteVoter(ctx context.Context, id string) error {
	const op = "demote voter"
	if err := checkServer(op, id, "-"); err != nil {
		return err
	}
	return l.change(ctx, op, func(timeout time.Duration) raft.Future {
		return l.raft.DemoteVoter(raft.ServerID(id), 0, timeout)
	})
}

// RemoveServer removes the member id from the configuration; removing the
// leader makes it step down once the change commits. raft refuses to remove
// the last voter. Removing a server that is not a member succeeds (the
// change is still appended), so a retried removal succeeds. Leader only.
func (l *Log) RemoveServer(ctx context.Context, id string) error {
	const op = "remove server"
	if err := checkServer(op, id, "-"); err != nil {
		return err
	}
	return l.change(ctx, op, func(timeout time.Duration) raft.Future {
		return l.raft.RemoveServer(raft.ServerID(id), 0, timeout)
	})
}

// TransferLeadership hands leadership to the voter named to, or, when to is
// empty, to the voter whose log is the most up to date. It returns once
// this node has stepped down for the new leader's election (which the new
// leader wins at once, its log being complete); Leader may report no
// leader for that instant. Meanwhile this node refuses proposals with
// ErrNotLeader. Naming the leader itself changes nothing.
//
// Leader only; ErrUnknownServer when to is not a member, ErrNotVoter when
// it does not vote (or, to being empty, when no other server votes). If
// the target does not take over within ElectionTimeout, the error says so
// and this node stays the leader.
func (l *Log) TransferLeadership(ctx context.Context, to string) error {
	const op = "transfer leadership"
	var f raft.Future
	if to == "" {
		if err := l.leaderOnly(ctx, op); err != nil {
			return err
		}
		c, err := l.Configuration(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(c.Servers, func(s Server) bool { return s.Suffrage == Voter && s.ID != string(l.self) }) {
			return fmt.Errorf("%w: %s refused, no server but this one votes", ErrNotVoter, op)
		}
		f = l.raft.LeadershipTransfer()
	} else {
		s, err := l.member(ctx, op, to)
		if err != nil {
			return err
		}
		if s.Suffrage != Voter {
			return fmt.Errorf("%w: %s refused, %s is a %s", ErrNotVoter, op, to, s.Suffrage)
		}
		if s.ID == string(l.self) {
			return nil // already the leader
		}
		f = l.raft.LeadershipTransferToServer(raft.ServerID(s.ID), raft.ServerAddress(s.Address))
	}
	if err := l.wait(ctx, f); err != nil {
		if errors.Is(err, raft.ErrEnqueueTimeout) {
			// raft takes one transfer request at a time, and refuses
			// another at once rather than queue it.
			err = fmt.Errorf("%w: %w", raft.ErrLeadershipTransferInProgress, err)
		}
		return l.wrap(op, err)
	}
	return nil
}

// Configuration returns the latest configuration this node knows (see
// Configuration) and the index of the entry that set it. It works on every
// node; a follower's may trail the leader's.
func (l *Log) Configuration(ctx context.Context) (Configuration, error) {
	const op = "configuration"
	if err := l.usable(ctx); err != nil {
		return Configuration{}, l.wrap(op, err)
	}
	// raft v1.7's GetConfiguration answers the latest servers but index 0
	// (it reads a copy kept outside raft's main loop); the index is read
	// from the log, and the two must agree: raft and its log disagree for
	// an instant while a configuration is appended (the leader adopts it
	// before it writes it, a follower writes it before it adopts it).
	give := time.Now().Add(5 * time.Second)
	for {
		latest := l.raft.GetConfiguration().Configuration()
		entry, err := l.latestConfigEntry()
		if err != nil {
			return Configuration{}, l.wrap(op, err)
		}
		if slices.Equal(entry.servers, latest.Servers) {
			c := Configuration{Index: entry.index}
			for _, s := range latest.Servers {
				c.Servers = append(c.Servers, Server{ID: string(s.ID), Address: string(s.Address), Suffrage: suffrage(s.Suffrage)})
			}
			return c, nil
		}
		if time.Now().After(give) {
			return Configuration{}, fmt.Errorf("metalog: %s: the log's latest configuration (index %d, %v) still differs from raft's (%v)",
				op, entry.index, entry.servers, latest.Servers)
		}
		select {
		case <-ctx.Done():
			return Configuration{}, l.wrap(op, ctx.Err())
		case <-l.closed:
			return Configuration{}, l.wrap(op, ErrClosed)
		case <-time.After(time.Millisecond):
		}
	}
}

func suffrage(s raft.ServerSuffrage) Suffrage {
	if s == raft.Voter {
		return Voter
	}
	// raft.Nonvoter, and raft.Staging, which raft v1.7 never records and
	// treats as a non-voter.
	return Nonvoter
}

// configEntry is a configuration found in the log (or in the newest
// snapshot), and how far the log was read for it.
type configEntry struct {
	index   uint64
	servers []raft.Server
	// The log was read from its last entry, scannedTo of term scannedTerm,
	// down to index: no entry between them holds a configuration.
	scannedTo, scannedTerm uint64
}

// latestConfigEntry returns the newest configuration entry of the log, or
// the newest snapshot's configuration if that is newer (the entry was
// compacted away). Reading the log backwards, it stops at the first
// configuration entry, and at the entries a previous call read — unless
// the log was truncated and rewritten since (the term at scannedTo
// changed: by raft's log matching, the same index and term mean the same
// entries up to it).
func (l *Log) latestConfigEntry() (configEntry, error) {
	l.configMu.Lock()
	defer l.configMu.Unlock()
	first, err := l.logs.FirstIndex()
	if err != nil {
		return configEntry{}, fmt.Errorf("read the first index: %w", err)
	}
	last, err := l.logs.LastIndex()
	if err != nil {
		return configEntry{}, fmt.Errorf("read the last index: %w", err)
	}
	first = max(first, 1)
	prev := l.lastConfig
	var e raft.Log
	if prev.scannedTo >= first && prev.scannedTo <= last {
		if err := l.logs.GetLog(prev.scannedTo, &e); err == nil && e.Term == prev.scannedTerm {
			first = prev.scannedTo + 1 // known from here down
		} else {
			prev = configEntry{}
		}
	} else {
		prev = configEntry{}
	}
	found := prev
	for i := last; i >= first; i-- {
		if err := l.logs.GetLog(i, &e); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				break // compacted meanwhile: the snapshot holds what went
			}
			return configEntry{}, fmt.Errorf("read log entry %d: %w", i, err)
		}
		if e.Type == raft.LogConfiguration {
			found = configEntry{index: i, servers: raft.DecodeConfiguration(e.Data).Servers}
			break
		}
	}
	if last >= 1 {
		if err := l.logs.GetLog(last, &e); err == nil {
			found.scannedTo, found.scannedTerm = last, e.Term
		}
	}
	l.lastConfig = found

	snaps, err := l.snaps.List()
	if err != nil {
		return configEntry{}, fmt.Errorf("list snapshots: %w", err)
	}
	if len(snaps) > 0 && snaps[0].ConfigurationIndex > found.index {
		found.index, found.servers = snaps[0].ConfigurationIndex, snaps[0].Configuration.Servers
	}
	return found, nil
}

// change proposes a configuration change, made by start with raft's enqueue
// timeout, and waits for it to commit.
func (l *Log) change(ctx context.Context, op string, start func(timeout time.Duration) raft.Future) error {
	if err := l.usable(ctx); err != nil {
		return l.wrap(op, err)
	}
	if err := l.wait(ctx, start(enqueueTimeout(ctx))); err != nil {
		return l.wrap(op, err)
	}
	return nil
}

// leaderOnly refuses op unless this node is the leader now: for the calls
// that read the configuration before they propose, so that a follower
// answers ErrNotLeader as for every other change.
func (l *Log) leaderOnly(ctx context.Context, op string) error {
	if err := l.usable(ctx); err != nil {
		return l.wrap(op, err)
	}
	if l.raft.State() != raft.Leader {
		return l.wrap(op, raft.ErrNotLeader)
	}
	return nil
}

// member returns the member id of the configuration, on the leader.
func (l *Log) member(ctx context.Context, op, id string) (Server, error) {
	if err := checkServer(op, id, "-"); err != nil {
		return Server{}, err
	}
	if err := l.leaderOnly(ctx, op); err != nil {
		return Server{}, err
	}
	c, err := l.Configuration(ctx)
	if err != nil {
		return Server{}, err
	}
	s, ok := c.Server(id)
	if !ok {
		return Server{}, fmt.Errorf("%w: %s refused, %s is not a member (configuration at index %d)", ErrUnknownServer, op, id, c.Index)
	}
	return s, nil
}

func checkServer(op, id, addr string) error {
	if id == "" {
		return fmt.Errorf("metalog: %s: empty server ID", op)
	}
	if addr == "" {
		return fmt.Errorf("metalog: %s %s: empty address", op, id)
	}
	return nil
}
