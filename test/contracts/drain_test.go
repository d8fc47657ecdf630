package contracts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestCordonHandsEverySlotOff: a drain with stay (a cordon). The broker
// ends with no slot and no stream open, the others hold every slot between
// them, the streams it owned are served by them with everything that was
// acknowledged, and it never reports Drained (it stays a member, keeping
// its copies). A drain that would leave fewer members than R is refused;
// cancelling gives the broker its share back.
func TestCordonHandsEverySlotOff(t *testing.T) {
	needCluster(t)
	o := options()
	c := clusterharness.Start(t, o)
	ctx := t.Context()

	// A stream on every slot (internal ids are consecutive, a stream's
	// slot is its first partition's id mod 16), each opened by an append,
	// so that the broker to drain owns some of them.
	cl, err := client.New(c.URL(drained))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	streams := make([]*client.Stream, o.Slots)
	for i := range streams {
		name := fmt.Sprintf("drain/s-%02d", i)
		if streams[i], err = cl.Open(ctx, name, client.StreamConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	appendEach := func(round string) {
		t.Helper()
		for i, s := range streams {
			rec := stream.RecordValue{Payload: []byte(fmt.Sprintf("%s-%d", round, i))}
			if _, err := s.Append(ctx, []stream.RecordValue{rec}); err != nil {
				t.Fatalf("append %s to %s through broker-%d: %v", round, s.Name(), drained, err)
			}
		}
	}
	appendEach("before")
	owned := 0
	for _, s := range streams {
		if owner, err := c.Owner(ctx, s.Name(), 0); err != nil {
			t.Fatal(err)
		} else if owner == drained {
			owned++
		}
	}
	if owned == 0 {
		t.Fatalf("broker-%d owns none of %d streams before the drain: nothing to hand off", drained, len(streams))
	}
	ds, err := c.DrainStatus(ctx, drained)
	if err != nil || ds.Phase != wire.DrainNone || ds.SlotsHeld == 0 || ds.OpenStreams != owned {
		t.Fatalf("before the drain: %+v, %v; want no phase, slots held and %d streams open", ds, err, owned)
	}

	// Drained of its slots: watched all along, it never says Drained.
	stopWatch := watchNeverDrained(t, c, drained)
	if ds, err = c.Cordon(ctx, drained); err != nil || ds.Phase != wire.DrainDraining || !ds.Stay {
		t.Fatalf("POST drain with stay: %+v, %v (want Draining, stay)", ds, err)
	}
	if ds2, err := c.Cordon(ctx, drained); err != nil || ds2.Phase != wire.DrainDraining {
		t.Fatalf("POST drain with stay again: %+v, %v", ds2, err)
	}
	if err := c.CordonAndWait(drained, drainTimeout); err != nil {
		t.Fatal(err)
	}
	ds, err = c.DrainStatus(ctx, drained)
	if err != nil || ds.Phase != wire.DrainDraining || ds.SlotsHeld != 0 || ds.OpenStreams != 0 ||
		!strings.Contains(ds.Message, "staying a member") {
		t.Fatalf("cordoned: %+v, %v; want Draining, 0 slots and 0 streams, and a message saying it stays", ds, err)
	}
	n, err := c.Node(drained)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(n.Raw), `"drain":{"phase":"Draining"`) {
		t.Errorf("GET /v1/admin/node does not report the drain (the operator reads it there): %s", n.Raw)
	}
	held := 0
	for i := range c.N() {
		node, err := c.Node(i)
		if err != nil {
			t.Fatal(err)
		}
		count, _, _ := node.Slots()
		if i == drained && count != 0 {
			t.Errorf("broker-%d holds %d slots once drained", i, count)
		}
		held += count
	}
	if held != o.Slots {
		t.Errorf("the brokers hold %d slots, want %d", held, o.Slots)
	}

	// Its streams are served by the others, whole, through it.
	appendEach("during")
	for i, s := range streams {
		owner, err := c.Owner(ctx, s.Name(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if owner == drained {
			t.Errorf("%s is still owned by the drained broker-%d", s.Name(), drained)
		}
		es, err := s.Read(ctx, 0, 0, 10)
		if err != nil || len(es) != 2 || string(es[0].Record.Payload) != fmt.Sprintf("before-%d", i) || string(es[1].Record.Payload) != fmt.Sprintf("during-%d", i) {
			t.Errorf("%s through broker-%d: %v, %v", s.Name(), drained, payloadsOf(es), err)
		}
	}

	// Draining a second broker would leave one member for R=2: refused,
	// and that broker stays a full member.
	if ds, err := c.Cordon(ctx, 1); err == nil || !strings.Contains(err.Error(), "DRAIN_REFUSED") {
		t.Errorf("a drain leaving fewer members than R: %+v, %v; want 409 DRAIN_REFUSED", ds, err)
	}
	if ds, err := c.DrainStatus(ctx, 1); err != nil || ds.Phase != wire.DrainNone || ds.SlotsHeld == 0 {
		t.Errorf("broker-1 after a refused drain: %+v, %v", ds, err)
	}
	stopWatch()

	// Cancelled: it takes its share again, and serves it.
	if ds, err = c.CancelDrain(ctx, drained); err != nil || ds.Phase != wire.DrainNone {
		t.Fatalf("DELETE drain: %+v, %v", ds, err)
	}
	if err := c.WaitFor(drainTimeout, fmt.Sprintf("broker-%d holding slots again", drained), func(ctx context.Context) error {
		n, err := c.Node(drained)
		if err != nil {
			return err
		}
		if count, _, _ := n.Slots(); count < o.Slots/o.Brokers {
			return fmt.Errorf("broker-%d holds %d slots", drained, count)
		}
		return c.ClusterReady(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	appendEach("after")
	for _, s := range streams {
		if es, err := s.Read(ctx, 0, 0, 10); err != nil || len(es) != 3 {
			t.Errorf("%s after the drain was cancelled: %v, %v", s.Name(), payloadsOf(es), err)
		}
	}
}

// watchNeverDrained polls broker i's drain status until stop is called and
// fails t if it ever reports Drained: a drain with stay leaves
// the broker's object copies and Raft membership in place.
func watchNeverDrained(t *testing.T, c *clusterharness.Cluster, i int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if ds, err := c.DrainStatus(ctx, i); err == nil && ds.Phase == wire.DrainDrained {
				t.Errorf("broker-%d reported %+v: it still holds its copies and its Raft membership", i, ds)
				return
			} else if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				t.Logf("drain status of broker-%d: %v", i, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func payloadsOf(es []stream.EntryValue) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.Record.Payload)
	}
	return out
}

// TestDrainRefusedWhileABrokerIsDown: with one of three brokers down
// (R=2) — killed, or paused (SIGSTOP: it holds its sockets and answers
// nothing) — draining another would leave one live member: refused at
// once (409 DRAIN_REFUSED naming the live count), and the broker asked
// stays a full member holding its slots. With the broker back, the same
// drain is accepted.
func TestDrainRefusedWhileABrokerIsDown(t *testing.T) {
	needCluster(t)
	for _, fault := range []string{"killed", "paused"} {
		t.Run(fault, func(t *testing.T) {
			c := clusterharness.Start(t, options())
			const down = 1
			if fault == "killed" {
				c.Kill(down)
			} else {
				c.Stop(down)
			}
			drainRefusedWhileDown(t, c)
			if fault == "killed" {
				c.StartBroker(down)
			} else {
				c.Cont(down)
			}
			if err := c.WaitFor(30*time.Second, "a drain accepted with every broker up", func(ctx context.Context) error {
				ds, err := c.Cordon(ctx, drained)
				if err != nil {
					return err
				}
				if ds.Phase != wire.DrainDraining {
					return fmt.Errorf("phase %q", ds.Phase)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if ds, err := c.CancelDrain(t.Context(), drained); err != nil || ds.Phase != wire.DrainNone {
				t.Fatalf("cancel: %+v, %v", ds, err)
			}
		})
	}
}

// drainRefusedWhileDown asks broker drained to drain until it is refused
// (the broker down counts as live until its member Lease runs out, as it
// would through a short pause: a drain accepted meanwhile is cancelled),
// and checks the refusal and that the broker stays a full member.
func drainRefusedWhileDown(t *testing.T, c *clusterharness.Cluster) {
	t.Helper()
	var slowest time.Duration
	if err := c.WaitFor(30*time.Second, "a drain refused while broker-1 is down", func(ctx context.Context) error {
		start := time.Now()
		ds, err := c.Drain(ctx, drained)
		slowest = max(slowest, time.Since(start))
		switch {
		case err == nil:
			if _, err := c.CancelDrain(ctx, drained); err != nil {
				return err
			}
			return fmt.Errorf("accepted: %+v", ds)
		case !strings.Contains(err.Error(), "DRAIN_REFUSED"):
			return err
		case !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), `"liveOthers":1`):
			t.Fatalf("refused, but not as a 409 naming one live other: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	t.Logf("slowest drain call with a broker down: %s", slowest.Round(time.Millisecond))
	// A full member: not draining, and holding slots (again, if a drain
	// accepted before the refusal handed them off).
	if err := c.WaitFor(30*time.Second, "broker-2 a full member holding slots", func(ctx context.Context) error {
		ds, err := c.DrainStatus(ctx, drained)
		if err != nil {
			return err
		}
		if ds.Phase != wire.DrainNone || ds.SlotsHeld == 0 {
			return fmt.Errorf("%+v", ds)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestDrainWaitsToLeaveWhileAVoterIsSilent: a drain asked right after
// another voter died is let start (the dead one's member Lease has not run
// out yet), but its last step — leaving for good — waits while the voters
// that would stay have no majority answering, saying why, so that it can
// still be cancelled: cancelled, the broker is a full member again in the
// same process, and the cluster never lost its quorum. (Before, the
// removal went through, the cancel restarted the broker as a new member,
// and its join took the old incarnation's vote out: no quorum at all.)
func TestDrainWaitsToLeaveWhileAVoterIsSilent(t *testing.T) {
	needCluster(t)
	c := clusterharness.Start(t, options())
	ctx := t.Context()
	var before clusterharness.NodeInfo
	if err := c.WaitFor(30*time.Second, "three voters", func(context.Context) error {
		n, err := c.Node(drained)
		if err != nil {
			return err
		}
		if len(n.Voters()) != 3 {
			return fmt.Errorf("voters %v", n.Voters())
		}
		before = n
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const dead = 1
	c.Kill(dead)
	if ds, err := c.Drain(ctx, drained); err != nil || ds.Phase != wire.DrainDraining {
		t.Fatalf("a drain asked while broker-%d's Lease is still live: %+v, %v; want it accepted", dead, ds, err)
	}
	var held wire.DrainStatus
	if err := c.WaitFor(30*time.Second, "the drain holding its last step", func(ctx context.Context) error {
		ds, err := c.DrainStatus(ctx, drained)
		if err != nil {
			return err
		}
		if ds.Phase != wire.DrainDraining || !strings.Contains(ds.Message, "waits to leave") || !strings.Contains(ds.Message, "QUORUM_AT_RISK") {
			return fmt.Errorf("%+v", ds)
		}
		held = ds
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	t.Logf("held: %s", held.Message)
	// It stays held: a few drain checks later it has not left.
	time.Sleep(3 * time.Second)
	if ds, err := c.DrainStatus(ctx, drained); err != nil || ds.Phase != wire.DrainDraining || !strings.Contains(ds.Message, "waits to leave") {
		t.Fatalf("3 s later: %+v, %v; want still held", ds, err)
	}
	if ds, err := c.CancelDrain(ctx, drained); err != nil || ds.Phase != wire.DrainNone {
		t.Fatalf("cancel: %+v, %v", ds, err)
	}
	c.StartBroker(dead)
	if err := c.WaitFor(60*time.Second, "the cluster whole, broker-2 the same member holding slots", func(ctx context.Context) error {
		if err := c.ClusterReady(ctx); err != nil {
			return err
		}
		n, err := c.Node(drained)
		if err != nil {
			return err
		}
		if n.MemberID != before.MemberID {
			return fmt.Errorf("broker-%d is member %s, not %s: it left and joined anew", drained, n.MemberID, before.MemberID)
		}
		if held, _, _ := n.Slots(); held == 0 {
			return fmt.Errorf("broker-%d holds no slot", drained)
		}
		if len(n.Voters()) != 3 {
			return fmt.Errorf("voters %v", n.Voters())
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
}
