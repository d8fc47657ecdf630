package contracts_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/streamtest"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestEngineSuiteThroughTheCluster runs the engine suite for the remote
// engine (broker/client) pointed at a broker drained of its slots: every
// append, read, long-poll and operation it sends is proxied to the owner
// of the partition, and every stream it creates is created through it.
// Each stream's partitions are checked, when the test ends, to be owned by
// another broker. Reopen restarts the brokers that own the stream (SIGTERM,
// start again on the same data directory): their slots move to the other
// broker and back, and what was acknowledged must survive that.
//
// The brokers run with --test-clock: the suite's clock is pushed to every
// broker before each request and while one blocks, so that records are
// dated, and ages measured, by the suite's clock wherever they are served.
func TestEngineSuiteThroughTheCluster(t *testing.T) {
	needCluster(t)
	o := options()
	o.ExtraFlags = []string{"--test-clock"}
	c := clusterharness.Start(t, o)
	if err := c.CordonAndWait(drained, drainTimeout); err != nil {
		t.Fatal(err)
	}
	proxy := c.URL(drained)
	t.Logf("broker-%d drained of its slots: the suite's every request goes to it, at %s", drained, proxy)

	var seq atomic.Int64
	streamtest.Run(t, func(t *testing.T, policy stream.PolicyValue, clock streamtest.Clock) (streamtest.Engine, error) {
		cl := newClusterClient(t, c, proxy, clock)
		name := streamName(t, seq.Add(1))
		s, err := cl.Open(t.Context(), name, client.StreamConfig{Policy: policy})
		if err != nil {
			if errors.Is(err, stream.StreamMisconfigured) {
				return streamtest.Engine{}, err // the suite checks the refusal
			}
			t.Fatalf("open %s through broker-%d: %v", name, drained, err)
		}
		t.Cleanup(func() {
			checkNotOwnedByTheProxy(t, c, name, s.Partitions())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.DeleteStream(ctx, name); err != nil && !errors.Is(err, meta.StreamNotFound) {
				t.Errorf("delete %s: %v", name, err)
			}
			if t.Failed() {
				t.Logf("broker logs (tails):\n%s", c.LogTails(4096))
			}
		})
		return streamtest.Engine{
			Stream: s,
			Reopen: func(t *testing.T) stream.Stream {
				restartOwners(t, c, name, s.Partitions())
				s, err := cl.Stream(t.Context(), name)
				if err != nil {
					t.Fatalf("reopen %s: %v", name, err)
				}
				return s
			},
		}, nil
	})
}

// streamName names a fresh stream after the test.
func streamName(t *testing.T, n int64) string {
	var b strings.Builder
	b.WriteString("suite/")
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '/', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	fmt.Fprintf(&b, "/%d", n)
	return b.String()
}

// checkNotOwnedByTheProxy fails t when the drained broker owns any
// partition of name that has an owner, or holds a slot: the suite's
// requests must all have been proxied.
func checkNotOwnedByTheProxy(t *testing.T, c *clusterharness.Cluster, name string, partitions int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := range partitions {
		owner, err := c.Owner(ctx, name, p)
		if err != nil {
			continue // never opened (nothing appended), or deleted by the test
		}
		if owner == drained {
			t.Errorf("%s partition %d is owned by broker-%d, the drained broker every request went to", name, p, drained)
		}
	}
	if n, err := c.Node(drained); err != nil {
		t.Errorf("broker-%d: %v", drained, err)
	} else if count, _, _ := n.Slots(); count != 0 {
		t.Errorf("broker-%d holds %d slots: it is no longer drained", drained, count)
	}
}

// restartOwners restarts, one at a time, every broker owning a partition
// of name, and waits until the cluster is ready again with the slots
// shared between the brokers that are not drained.
func restartOwners(t *testing.T, c *clusterharness.Cluster, name string, partitions int) {
	t.Helper()
	owners := map[int]bool{}
	for p := range partitions {
		if owner, err := c.Owner(t.Context(), name, p); err == nil {
			owners[owner] = true
		}
	}
	if len(owners) == 0 {
		t.Fatalf("%s: no partition has an owner to restart", name)
	}
	for i := range c.N() {
		if !owners[i] {
			continue
		}
		if i == drained {
			t.Fatalf("%s is owned by the drained broker-%d", name, drained)
		}
		start, pid := time.Now(), c.Broker(i).Pid()
		c.Restart(i)
		if err := waitShared(c); err != nil {
			t.Fatal(err)
		}
		t.Logf("restarted broker-%d, an owner of %s (pid %d, now %d), in %v", i, name, pid, c.Broker(i).Pid(), time.Since(start).Round(time.Millisecond))
	}
}

// waitShared waits until the cluster is ready, the drained broker holds no
// slot and every other broker holds some.
func waitShared(c *clusterharness.Cluster) error {
	return c.WaitFor(60*time.Second, "the slots shared again", func(ctx context.Context) error {
		for i := range c.N() {
			n, err := c.Node(i)
			if err != nil {
				return err
			}
			count, _, _ := n.Slots()
			switch {
			case i == drained && count != 0:
				return fmt.Errorf("the drained broker-%d holds %d slots", i, count)
			case i != drained && count == 0:
				return fmt.Errorf("broker-%d holds no slot yet", i)
			}
		}
		return c.ClusterReady(ctx)
	})
}

// clusterClock pushes the suite's clock to every broker of the cluster
// (PUT /v1/admin/clock, each broker's own): before every request of the
// client whose RoundTripper it is, when the clock moved or a broker
// restarted since, and every few milliseconds while the test is blocked in
// a request.
type clusterClock struct {
	c     *clusterharness.Cluster
	clock streamtest.Clock
	rt    http.RoundTripper

	mu     sync.Mutex
	pushed map[int]pushedAt // broker -> what it was last given
}

type pushedAt struct {
	pid int // a restarted broker runs on the real clock again
	now int64
}

func (k *clusterClock) push(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock.Now().UnixNano()
	for i := range k.c.N() {
		b := k.c.Broker(i)
		at := pushedAt{pid: b.Pid(), now: now}
		if k.pushed[i] == at || at.pid == 0 {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, b.URL()+wire.ClockPath+"?now="+strconv.FormatInt(now, 10), nil)
		if err != nil {
			return err
		}
		resp, err := k.rt.RoundTrip(req)
		if err != nil {
			return fmt.Errorf("setting broker-%d's clock: %w", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("setting broker-%d's clock: HTTP %d", i, resp.StatusCode)
		}
		k.pushed[i] = at
	}
	return nil
}

func (k *clusterClock) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := k.push(req.Context()); err != nil {
		return nil, err
	}
	return k.rt.RoundTrip(req)
}

// newClusterClient is a client of the broker at url on clock (nil: the
// real one), whose clock is pushed to every broker until t ends.
func newClusterClient(t *testing.T, c *clusterharness.Cluster, url string, clock streamtest.Clock) *client.Client {
	t.Helper()
	base := client.NewHTTPClient().Transport
	var rt http.RoundTripper = base
	if clock != nil {
		k := &clusterClock{c: c, clock: clock, rt: base, pushed: map[int]pushedAt{}}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = k.push(ctx) // a restart in progress fails it: the next tick retries
					cancel()
				}
			}
		})
		t.Cleanup(func() { close(stop); wg.Wait() })
		rt = k
	}
	cl, err := client.New(url, client.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
