package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// A broker's drain, behind /v1/admin/drain (httpapi.Drainer):
//
//  1. it stops taking slots and hands those it holds off, so that it owns
//     none of the streams and every request it receives is proxied;
//  2. the metadata leader's repair room copies every object whose replica
//     set names it to a broker that stays and commits the new set
//     (broker/repair: a leaving member's copies do not count);
//  3. holding no slot, no open stream and no copy, it records in its data
//     directory that it drained and asks the cluster to remove it; the
//     leader then takes it out of the metadata log's configuration,
//     handing over leadership first if it led, and a replacement voter
//     promoted first when one is needed;
//  4. removed, it reports Drained: the operator may delete its pod. Its
//     claim, if kept, is recognised at the next start by the record of
//     step 3, and the data set aside: the broker joins as a new member.

// StartDrain implements httpapi.Drainer: the slot Lease manager's fair share
// becomes 0 (it takes no slot, hands off those it holds) and the member
// Lease says so, so that the others take the slots at once and no new
// object is copied here. It is refused when the members that stay could
// not hold the replication factor's copies of new objects: every append
// writing a file would fail. Asked again while draining, it changes
// nothing, but that a drain with stay asked to leave now leaves (the
// other way, cancel first).
func (c *Cluster) StartDrain(ctx context.Context, o wire.DrainOptions) error {
	if c.owners.Status().Draining {
		if !o.Stay && !c.leaving.Load() {
			c.leaving.Store(true)
			if err := c.owners.SetLeaving(ctx, true); err != nil {
				c.log.Warn("draining to leave: the member Lease is not written yet", "err", err)
			}
			c.log.Info("draining: now to leave the cluster")
		}
		return nil
	}
	if err := c.drainAllowed(); err != nil {
		return err
	}
	c.leaving.Store(!o.Stay)
	if !o.Stay {
		if err := c.owners.SetLeaving(ctx, true); err != nil {
			c.log.Warn("draining to leave: the member Lease is not written yet", "err", err)
		}
	}
	if err := c.owners.SetDraining(ctx, true); err != nil {
		// The flag is set whatever the API server said; the loop writes
		// the member Lease again every period.
		c.log.Warn("draining: the member Lease is not written yet", "err", err)
	}
	c.log.Info("draining: taking no slot, handing off those held", "slotsHeld", c.owners.Status().SlotsHeld)
	return nil
}

// drainAllowed refuses a drain that would leave too few members (see
// drainRefusal), counted from the member Leases and the metadata log.
func (c *Cluster) drainAllowed() error {
	self := c.member.Identity().ID()
	others := 0
	for _, p := range c.liveMembers() {
		if p.ID != self {
			others++
		}
	}
	staying := -1 // unknown before the log opens: not checked
	if b := c.broker(); b != nil {
		staying = 0
		for _, m := range b.Members() {
			if m.Removed.IsZero() && m.ID != self {
				staying++
			}
		}
	}
	return drainRefusal(others, staying, c.cfg.ReplicationFactor)
}

// drainRefusal is the rule of drainAllowed, pure: a drain is refused when
// fewer other live members, not draining themselves, than the replication
// factor asks (or none at all, to hand the slots to) would stay, or when
// the live ones are no majority of the members that would stay (staying;
// negative: unknown). The leaver goes out of the configuration, and with
// a majority of the rest down they could not commit — nor the drain
// finish.
func drainRefusal(liveOthers, staying, replicationFactor int) error {
	need := max(1, replicationFactor)
	if liveOthers < need {
		return wire.DrainRefused.With("liveOthers", liveOthers, "replicationFactor", replicationFactor,
			"reason", fmt.Sprintf("%d other live members not draining, and objects need %d copies on the members that stay: scale up first, or lower the replication factor", liveOthers, need))
	}
	if staying >= 0 && 2*liveOthers <= staying {
		return wire.DrainRefused.With("liveOthers", liveOthers, "staying", staying,
			"reason", fmt.Sprintf("only %d of the %d members that would stay are live: without a majority of them running the cluster could not commit once this broker left; bring the others back first", liveOthers, staying))
	}
	return nil
}

// CancelDrain implements httpapi.Drainer: the broker is a full member
// again and takes its share of the slots back.
func (c *Cluster) CancelDrain(ctx context.Context) error {
	c.leaveMu.Lock()
	defer c.leaveMu.Unlock()
	if c.left.Load() {
		// Too late to stay: the cluster removed this member for good. It
		// restarts, sets its drained directory aside and joins as a new
		// member, which takes its share of the slots.
		c.log.Info("drain cancelled after it completed: restarting to join as a new member")
		if c.restart != nil {
			time.AfterFunc(time.Second, c.restart) // after the answer
		}
		return nil
	}
	if !c.owners.Status().Draining {
		return nil
	}
	c.leaving.Store(false)
	if err := c.owners.SetLeaving(ctx, false); err != nil {
		c.log.Warn("drain cancelled: the member Lease is not written yet", "err", err)
	}
	if err := c.owners.SetDraining(ctx, false); err != nil {
		c.log.Warn("drain cancelled: the member Lease is not written yet", "err", err)
	}
	c.log.Info("drain cancelled: taking this broker's share of the slots again")
	return nil
}

// DrainStatus implements httpapi.Drainer.
func (c *Cluster) DrainStatus() wire.DrainStatus {
	st := c.owners.Status()
	ds := wire.DrainStatus{SlotsHeld: st.SlotsHeld, OpenStreams: c.openStreams()}
	if b := c.broker(); b != nil {
		ds.EnsemblesNaming = b.EnsemblesNaming(c.member.Identity().ID())
	}
	ds.ObjectsHeld, ds.BytesHeld = c.heldObjects()
	if c.drained.Load() {
		ds.Phase = wire.DrainDrained
		ds.Message = "drained: removed from the cluster and its metadata log's configuration, holding nothing the others lack; the pod may be deleted"
		return ds
	}
	if c.left.Load() {
		ds.Phase = wire.DrainDraining
		ds.Message = "removed from the cluster, holding nothing the others lack; waiting for the metadata leader to take it out of the log's configuration (until then the voters still count it)"
		return ds
	}
	if !st.Draining {
		ds.Message = "not draining"
		return ds
	}
	ds.Phase = wire.DrainDraining
	ds.Stay = !c.leaving.Load()
	switch {
	case !c.leaving.Load():
		ds.Message = fmt.Sprintf("handing off %d slots, %d streams open here; staying a member (a drain with stay: cancel it to serve again)", ds.SlotsHeld, ds.OpenStreams)
	case ds.SlotsHeld > 0 || ds.OpenStreams > 0:
		ds.Message = fmt.Sprintf("handing off %d slots, %d streams open here; %d copies of objects (%d bytes) to move to the brokers that stay", ds.SlotsHeld, ds.OpenStreams, ds.ObjectsHeld, ds.BytesHeld)
	case ds.EnsemblesNaming > 0:
		ds.Message = fmt.Sprintf("owns no slot and no open stream; %d partitions of other owners still write to an ensemble naming it (they move to one without it)", ds.EnsemblesNaming)
	case ds.ObjectsHeld > 0:
		ds.Message = fmt.Sprintf("owns no slot and no open stream; %d copies of objects (%d bytes) still to move to the brokers that stay", ds.ObjectsHeld, ds.BytesHeld)
		if b := c.broker(); b != nil {
			if err := b.CanMoveReplicas(); err != nil {
				ds.Message += "; they cannot move yet: " + err.Error()
			}
		}
	default:
		ds.Message = "holds nothing the others lack: leaving the cluster"
		if why := c.held.Load(); why != nil {
			ds.Message = "holds nothing the others lack, but waits to leave: " + *why
		}
	}
	return ds
}

// heldObjects counts the committed objects whose replica set names this
// member, and their size.
func (c *Cluster) heldObjects() (n int, bytes int64) {
	b := c.broker()
	if b == nil {
		return 0, 0
	}
	self := c.member.Identity().ID()
	for _, o := range b.ReplicatedObjects() {
		if slices.Contains(o.Replicas, self) {
			n++
			bytes += o.Size
		}
	}
	return n, bytes
}

// finishDrain is the drain's last step, run every drainCheck: a draining
// member that holds no slot, no open stream and no copy records that it
// drained, then asks to be removed.
func (c *Cluster) finishDrain(ctx context.Context) {
	if c.drained.Load() {
		return
	}
	if c.left.Load() {
		// The last step is the leader's: reported Drained only once the
		// configuration no longer names this member, so that deleting its
		// pod never takes a voter the quorum still counts.
		if c.member.OutOfConfiguration(ctx) {
			c.drained.Store(true)
			c.log.Info("drained: out of the metadata log's configuration; the pod may be deleted", "member", c.member.Identity().ID())
		}
		return
	}
	if !c.leaving.Load() || !c.owners.Status().Draining {
		return
	}
	ds := c.DrainStatus()
	if ds.SlotsHeld == 0 && ds.OpenStreams > 0 {
		// Holding no slot, it writes none of them: streams still open in
		// its name were opened by an earlier process of it (killed, then
		// restarted), which no hand-off of this one closes.
		if n, err := c.broker().CloseLeftOpen(ctx); err != nil {
			c.log.Warn("drain: closing the streams an earlier process left open", "err", err)
		} else if n > 0 {
			c.log.Info("drain: closed the streams an earlier process of this broker left open", "streams", n)
		}
		return
	}
	if ds.SlotsHeld > 0 || ds.OpenStreams > 0 || ds.ObjectsHeld > 0 || ds.EnsemblesNaming > 0 {
		return
	}
	// Leaving is for good (a cancel after it restarts the broker as a
	// new member), and once out the others must commit without it: not
	// while a voter that stays is silent — a member whose Lease has not
	// yet run out may be dead, and the drain was let start by its Lease.
	if err := c.member.CheckLeaveKeepsQuorum(ctx); err != nil {
		why := err.Error()
		if prev := c.held.Swap(&why); prev == nil {
			c.log.Warn("drain: holding its last step until the voters that stay answer", "err", err)
		}
		return
	}
	if c.held.Swap(nil) != nil {
		c.log.Info("drain: the voters that stay answer again; leaving")
	}
	// Checked again under the lock a cancel takes: cancelled meanwhile,
	// the member stays.
	c.leaveMu.Lock()
	defer c.leaveMu.Unlock()
	if !c.leaving.Load() || !c.owners.Status().Draining {
		return
	}
	self := c.member.Identity().ID()
	if err := writeDrainedMark(c.dataDir, self); err != nil {
		c.log.Error("drain: cannot record that this broker drained; not leaving", "err", err)
		return
	}
	if err := c.broker().RemoveMember(ctx, self); err != nil {
		c.log.Warn("drain: asking to be removed", "err", err)
		return
	}
	c.left.Store(true)
	c.log.Info("drain: removed from the cluster; the leader takes this broker out of the metadata log's configuration", "member", self)
}

// drainCheck is how often a draining broker looks whether it is done.
const drainCheck = time.Second

// drainedMark is the file a drained broker leaves in its data directory:
// the member id that drained. A broker starting on that directory that the
// cluster says was removed sets the data aside and joins as a new member,
// instead of refusing to start as a removed member's directory otherwise
// makes it (a member lost and removed may hold data nobody else has; a
// drained one holds nothing the others lack).
const drainedMark = "DRAINED"

func writeDrainedMark(dataDir, member string) error {
	path := filepath.Join(dataDir, drainedMark)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(member+"\n"), 0o600); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dataDir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// DrainedHere says whether dataDir is a drained member's.
func DrainedHere(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, drainedMark))
	return err == nil
}

// SetAsideDrained moves a drained member's data directory out of the way
// (beside it, named .drained-<time>) and removes it, so that the broker
// starts on an empty directory and joins as a new member.
func SetAsideDrained(dataDir string, now time.Time) error {
	aside := fmt.Sprintf("%s.drained-%d", strings.TrimSuffix(dataDir, "/"), now.UnixNano())
	if err := os.Rename(dataDir, aside); err != nil {
		return err
	}
	return os.RemoveAll(aside)
}

// openStreams counts the internal streams the metadata log has open with
// this broker as their writer.
func (c *Cluster) openStreams() int {
	b := c.broker()
	if b == nil {
		return 0
	}
	self := c.member.Identity().ID()
	n := 0
	for _, e := range b.List() {
		for _, id := range e.Partitions {
			if p, ok := b.Partition(id); ok && p.Open && p.Owner == self {
				n++
			}
		}
	}
	return n
}

// RefuseOnceDrained answers the client API's requests with 503 NOT_READY
// (retriable: another broker serves them) once this broker drained and
// left the cluster: its view of the metadata stops there, so it neither
// serves nor routes. Probes, metrics, the drain's and the node's status
// still answer.
func (c *Cluster) RefuseOnceDrained(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.left.Load() {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics", wire.DrainPath, wire.NodePath:
			default:
				frontend.WriteProblem(w, r, log, wire.NotReady.With("reason", "drained: this broker left the cluster; send requests to another"), http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// StillConfigured says whether a MEMBER_REMOVED refusal says the member is
// still in the configuration (or could not say).
func StillConfigured(err error) bool {
	coded, ok := errs.As(err)
	if !ok {
		return true
	}
	v, ok := coded.Field("configured")
	if !ok {
		return true
	}
	b, ok := v.(bool)
	return !ok || b
}
