package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/routing"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/internal/testwait"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestStreamClusterScaleDownDrainsRealBrokers: the scale path against real
// brokers — a 3-broker cluster of broker processes (test/clusterharness),
// which the operator reaches through its own HTTP admin client, each pod's
// name dialled at its broker's address. The brokers hold object files
// (R=2). Scaled to 2 while broker 1 is down, the departing broker refuses
// to drain (no running majority would stay): the scale-down is held with
// the broker's reason in Progressing and Degraded, and the StatefulSet
// keeps 3. With broker 1 back, the broker drains for real — its slots
// handed off, its copies moved, removed from the metadata log — and only
// once it reports Drained does the StatefulSet go to 2.
func TestStreamClusterScaleDownDrainsRealBrokers(t *testing.T) {
	needsEnvtest(t)
	ok, err := clusterharness.SupportsCluster()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip(clusterharness.ClusterUnsupported)
	}
	t.Setenv(clusterharness.BinaryEnv, brokerBin)
	c := clusterharness.Start(t, clusterharness.Options{
		Brokers: 3, Cluster: true, Slots: 16, ReplicationFactor: 2,
		LeaseDuration: 3 * time.Second, LeaseRenewDeadline: 2 * time.Second, LeaseRetryPeriod: 500 * time.Millisecond,
	})
	ctx := t.Context()
	// Object files (above the inline bound), so that the drain has copies
	// to move.
	cl, err := client.New(c.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 6 {
		s, err := cl.Open(ctx, fmt.Sprintf("scale/s-%d", i), client.StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		// NO_SLOT_OWNER is retriable (nothing written): right after the
		// cluster is ready a slot can still be between two brokers as
		// they balance (longer than the router's own wait on a loaded
		// machine). What this test is about comes after.
		testwait.NoError(t, 30*time.Second, "an append of stream "+s.Name(), func() error {
			_, err := s.Append(ctx, []stream.RecordValue{{Payload: bytes.Repeat([]byte{'x'}, 65<<10)}})
			if err != nil && !errors.Is(err, routing.NoSlotOwner) {
				t.Fatal(err)
			}
			return err
		})
	}

	ns := newNamespace(t)
	admin := &brokeradmin.HTTP{Client: dialBrokersOf(t, c), Timeout: 5 * time.Second}
	h := startManager(t, ns, Options{BrokerAdmin: admin, DrainPollInterval: 200 * time.Millisecond, NotReadyPollInterval: 200 * time.Millisecond})
	newCluster(t, ns, "demo", func(sc *streamsv1alpha1.StreamCluster) {
		sc.Spec.Replicas = 3
		sc.Spec.Ownership.Slots = 16
	})
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 3)
	testwait.NoError(t, 30*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})

	const down, leaving = 1, 2
	c.Kill(down)
	// A drain is refused once broker 1's member Lease has run out: until
	// then it counts as live (as through a short pause), and a drain let
	// start waits for it to come back. Its slot Leases, renewed with it,
	// run out at the same time: the other two then hold every slot.
	testwait.NoError(t, 30*time.Second, "", func() error {
		held := 0
		for _, i := range []int{0, leaving} {
			n, err := c.Node(i)
			if err != nil {
				return err
			}
			k, _, _ := n.Slots()
			held += k
		}
		if held != 16 {
			return fmt.Errorf("brokers 0 and 2 hold %d of 16 slots", held)
		}
		return nil
	})
	updateCluster(t, ns, "demo", func(sc *streamsv1alpha1.StreamCluster) { sc.Spec.Replicas = 2 })
	testwait.NoError(t, 30*time.Second, "", func() error {
		sc := getCluster(t, ns, "demo")
		if err := wantCondition(sc, streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonScaleDownBlocked); err != nil {
			return err
		}
		if msg := condition(sc.Status.Conditions, streamsv1alpha1.ConditionDegraded).Message; !containsAll(msg, "demo-2 refused to drain", "DRAIN_REFUSED", "held at 3") {
			return fmt.Errorf("Degraded says %q", msg)
		}
		return nil
	})
	if sts := waitSTS(t, ns, "demo", nil); *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet replicas %d while the departing broker refuses to drain", *sts.Spec.Replicas)
	}
	if ds, err := c.DrainStatus(ctx, leaving); err != nil || ds.Phase != wire.DrainNone {
		t.Fatalf("broker %d after the refusal: %+v, %v; want a full member", leaving, ds, err)
	}

	c.StartBroker(down)
	testwait.NoError(t, 2*time.Minute, "", func() error {
		var sts appsv1.StatefulSet
		if err := get(t, ns, "demo", &sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 2 {
			ds, _ := c.DrainStatus(ctx, leaving)
			return fmt.Errorf("StatefulSet replicas %d; broker %d: %+v", *sts.Spec.Replicas, leaving, ds)
		}
		return nil
	})
	// Lowered only once the broker had drained for real.
	if ds, err := c.DrainStatus(ctx, leaving); err != nil || ds.Phase != wire.DrainDrained || ds.SlotsHeld != 0 || ds.ObjectsHeld != 0 {
		t.Fatalf("broker %d when the StatefulSet went to 2: %+v, %v; want Drained, holding nothing", leaving, ds, err)
	}
	n, err := c.Node(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range n.Voters() {
		if strings.HasPrefix(v, c.Broker(leaving).Name+"~") {
			t.Errorf("the drained broker is still a voter: %v", n.Voters())
		}
	}
	h.expectEvents("demo", "ScaledDown", eventNormal, 1)
	setSTSStatus(t, ns, "demo", 2)
	testwait.NoError(t, 30*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})
}

// dialBrokersOf is an http.Client that dials the pod names the operator
// addresses (demo-<i>.<headless>.<ns>.svc:<port>) at broker i of c.
func dialBrokersOf(t *testing.T, c *clusterharness.Cluster) *http.Client {
	t.Helper()
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		pod, _, _ := strings.Cut(host, ".")
		ord, ok := strings.CutPrefix(pod, "demo-")
		i, err := strconv.Atoi(ord)
		if !ok || err != nil || i < 0 || i >= c.N() {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		u, err := url.Parse(c.URL(i))
		if err != nil {
			return nil, err
		}
		return d.DialContext(ctx, network, u.Host)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
