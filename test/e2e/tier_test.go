package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/devstack/podnet"
	"github.com/picomq/picomq/internal/testwait"
	"github.com/picomq/picomq/test/brokerstat"
	"github.com/picomq/picomq/test/records"
	"github.com/picomq/picomq/test/s3server"
)

// Tiered storage (issue 33) on a one-broker cluster of its own, against a
// real S3 server (test/s3server: SeaweedFS) on the host's end of the pod
// network, behind its fault proxy: the broker is given the proxy's
// endpoint, so the test can cut the bucket off.
const (
	tierNS      = "tiering"
	tierCluster = "tiered"
	tierBucket  = "tier"
	tierStream  = "e2e/tiered"
)

// TestTieredStorageOnTheStack: sealed segments of a Stream with 64 KiB
// segments land in the bucket under <namespace>/<cluster>/segments/ and
// leave the broker's disk (localRetainFor 0s); the Stream's status counts
// tiered bytes, every record reads back identical at its offset, and the
// cluster reports the bucket reachable. With the bucket cut off, the
// cluster is Degraded (TieredStorageUnreachable); with it back, the
// condition clears and the waiting segments upload.
func TestTieredStorageOnTheStack(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	// The pods reach the host at its end of the pod network (as they reach
	// the API server), not at its loopback.
	s3 := s3server.Start(t, s3server.Options{Buckets: []string{tierBucket}, IP: podnet.DefaultConfig().HostIP.String()})
	proxy := s3.Proxy(t)
	t.Logf("S3 server up in %s; the broker dials the proxy at %s", time.Since(start).Round(100*time.Millisecond), proxy.Endpoint())

	cred := s3server.DefaultCredential
	mustKubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: tier-creds, namespace: %[1]s}
stringData: {accessKeyId: %[2]q, secretAccessKey: %[3]q}
---
apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata: {name: %[4]s, namespace: %[1]s}
spec:
  replicas: 1
  storage: {size: 1Gi}
  tieredStorage:
    endpoint: %[5]s
    bucket: %[6]s
    pathStyle: true
    credentialsSecret: {name: tier-creds}
    localRetainFor: 0s
    cacheBytes: 4Mi
---
apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: events, namespace: %[1]s}
spec: {clusterRef: {name: %[4]s}, name: %[7]s, segmentBytes: 65536}
`, tierNS, cred.AccessKey, cred.SecretKey, tierCluster, proxy.Endpoint(), tierBucket, tierStream), "apply", "-f", "-")
	t.Cleanup(func() {
		// In the background: the other tests run on the sample cluster.
		_, _ = kubectl(t, "", "delete", "namespace", tierNS, "--wait=false")
	})
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=5m", "-n", tierNS, "streamcluster/"+tierCluster)
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=2m", "-n", tierNS, "stream/events")
	t.Logf("cluster and Stream Ready after %s", time.Since(start).Round(100*time.Millisecond))

	svc, err := env.k.CoreV1().Services(tierNS).Get(ctx, tierCluster, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
	cl, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.Stream(ctx, tierStream)
	if err != nil {
		t.Fatal(err)
	}

	// 320 appends, each its own group commit of 4 KiB: more small ranges
	// than the merge takes (256), so it writes 64 KiB segments, sealed
	// and uploaded.
	tierFill(t, s, 320, "a")
	before, err := tierReadAll(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	prefix := tierNS + "/" + tierCluster + "/segments/"
	segments := func() []string { return s3.Keys(t, tierBucket, prefix) }
	testwait.NoError(t, 90*time.Second, "segments in the bucket and evicted from the broker", func() error {
		info, err := cl.GetStream(ctx, tierStream)
		if err != nil {
			return err
		}
		p := info.Partitions[0]
		if n := len(segments()); n < 2 || p.TieredBytes == 0 || p.LocalBytes >= p.TieredBytes {
			return fmt.Errorf("%d keys under %s; partition local %d, tiered %d bytes", n, prefix, p.LocalBytes, p.TieredBytes)
		}
		return nil
	})
	t.Logf("%d segments uploaded and evicted after %s", len(segments()), time.Since(start).Round(100*time.Millisecond))

	// The Stream's status, as kubectl get reads it. The operator reads a
	// Stream's sizes when it reconciles it, at its resync period (10 min)
	// unless something changes: an annotation makes it look now.
	mustKubectl(t, "", "annotate", "-n", tierNS, "stream/events", "--overwrite", "e2e.picomq.io/look="+strconv.FormatInt(time.Now().UnixNano(), 10))
	testwait.NoError(t, time.Minute, "the Stream's status counts tiered bytes", func() error {
		var st streamsv1alpha1.Stream
		if err := json.Unmarshal([]byte(mustKubectl(t, "", "get", "-n", tierNS, "stream/events", "-o", "json")), &st); err != nil {
			return err
		}
		if st.Status.TieredBytes <= 0 || st.Status.TieredSize == "" || len(st.Status.Partitions) != 1 || st.Status.Partitions[0].TieredBytes <= 0 {
			return fmt.Errorf("status tiered %d (%q), local %d; partitions %+v", st.Status.TieredBytes, st.Status.TieredSize, st.Status.LocalBytes, st.Status.Partitions)
		}
		return nil
	})
	t.Logf("kubectl get stream:\n%s", mustKubectl(t, "", "get", "-n", tierNS, "stream/events"))

	// The broker's copies deleted (its next tier pass after the eviction
	// also drops their frames from its memory): the reads below can only
	// come from the bucket.
	evicted := len(segments())
	testwait.NoError(t, time.Minute, "the evicted segments' local copies deleted", func() error {
		n, err := brokerstat.Metric(url, "picomq_tier_local_removed_total", "")
		if err != nil {
			return err
		}
		if int(n) < evicted {
			return fmt.Errorf("%v local copies deleted, %d segments evicted", n, evicted)
		}
		return nil
	})

	// Every record back, identical at its offset, its older segments read
	// from the bucket.
	gets := proxy.Counts()["GET"].Seen
	after, err := tierReadAll(ctx, s)
	if err != nil {
		t.Fatalf("reading back tiered records: %v", err)
	}
	if err := records.Same(after, before); err != nil {
		t.Fatalf("tiered records read back: %v", err)
	}
	if proxy.Counts()["GET"].Seen == gets {
		t.Errorf("no GET reached the bucket: the reads were not served from object storage (%s)", proxy)
	}

	// The cluster's view: the operator asks the brokers every 30 s
	// (TierPollInterval) while the cluster uses object storage, since no
	// Kubernetes event says the bucket went away.
	testwait.NoError(t, time.Minute, "status.tieredStorage reachable", func() error {
		st := tierClusterStatus(t)
		if st.TieredStorage == nil || !st.TieredStorage.Reachable || st.TieredStorage.TieredBytes <= 0 {
			return fmt.Errorf("status.tieredStorage %+v", st.TieredStorage)
		}
		return nil
	})

	// Cut off. The broker notices at its next request to the bucket: new
	// segments make it try uploads.
	keys := len(segments())
	proxy.Cut()
	cut := time.Now()
	tierFill(t, s, 320, "b")
	testwait.NoError(t, time.Minute, "the broker reports the bucket unreachable", func() error {
		st, err := brokerstat.Tier(url)
		if err != nil {
			return err
		}
		if st.Reachable || st.LastError == nil {
			return fmt.Errorf("broker tier status %+v", st)
		}
		return nil
	})
	t.Logf("the broker reports the bucket unreachable %s after the cut", time.Since(cut).Round(100*time.Millisecond))
	looked := time.Now()
	testwait.NoError(t, 90*time.Second, "Degraded=True TieredStorageUnreachable, found by the operator's poll", func() error {
		d := tierDegraded(t)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != streamsv1alpha1.ReasonTieredStorageUnreachable {
			return fmt.Errorf("Degraded %+v", d)
		}
		return nil
	})
	d := tierDegraded(t)
	t.Logf("Degraded %s %s (%s after the broker noticed): %s", d.Status, d.Reason, time.Since(looked).Round(100*time.Millisecond), d.Message)
	if !strings.Contains(d.Message, tierCluster+"-0") || !strings.Contains(d.Message, proxy.Endpoint()) {
		t.Errorf("the Degraded message names neither the broker nor the endpoint: %s", d.Message)
	}
	if st := tierClusterStatus(t).TieredStorage; st == nil || st.Reachable || st.LastError == nil || st.LastError.Code != "TIER_UNREACHABLE" {
		t.Errorf("status.tieredStorage while cut off: %+v", st)
	}
	if n := len(segments()); n != keys {
		t.Errorf("%d keys while cut off, were %d", n, keys)
	}

	// Back: the waiting segments upload (after the broker's backoff) and
	// the condition clears on its own — a Degraded cluster is looked at
	// again every few seconds.
	proxy.Pass()
	passed := time.Now()
	testwait.NoError(t, 2*time.Minute, "Degraded cleared and the bucket reachable", func() error {
		if d := tierDegraded(t); d != nil && d.Status == metav1.ConditionTrue {
			return fmt.Errorf("Degraded %s %s: %s", d.Status, d.Reason, d.Message)
		}
		if st := tierClusterStatus(t).TieredStorage; st == nil || !st.Reachable {
			return fmt.Errorf("status.tieredStorage %+v", st)
		}
		return nil
	})
	t.Logf("Degraded cleared %s after the bucket came back", time.Since(passed).Round(100*time.Millisecond))
	testwait.NoError(t, time.Minute, "the segments sealed while cut off uploaded", func() error {
		if n := len(segments()); n <= keys {
			return fmt.Errorf("%d keys, were %d before the cut", n, keys)
		}
		return nil
	})
	t.Logf("whole test: %s", time.Since(start).Round(100*time.Millisecond))
}

// tierFill appends n batches of 4 records of 1 KiB to partition 0, one at
// a time: each its own group commit.
func tierFill(t *testing.T, s *client.Stream, n int, tag string) {
	t.Helper()
	for i := range n {
		recs := make([]stream.RecordValue, 4)
		for j := range recs {
			unit := []byte(fmt.Sprintf("%s-%d-%d|", tag, i, j))
			recs[j] = stream.RecordValue{Key: []byte(fmt.Sprintf("k%d", j)), Payload: bytes.Repeat(unit, 1024/len(unit)+1)[:1024]}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.Append(ctx, recs)
		cancel()
		if err != nil {
			t.Fatalf("append %s %d: %v", tag, i, err)
		}
	}
}

// tierReadAll reads partition 0 whole, within a minute.
func tierReadAll(ctx context.Context, s *client.Stream) ([]stream.EntryValue, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return records.ReadAll(ctx, s, 0)
}

func tierClusterStatus(t *testing.T) streamsv1alpha1.StreamClusterStatus {
	t.Helper()
	var c streamsv1alpha1.StreamCluster
	if err := json.Unmarshal([]byte(mustKubectl(t, "", "get", "-n", tierNS, "streamcluster/"+tierCluster, "-o", "json")), &c); err != nil {
		t.Fatal(err)
	}
	return c.Status
}

func tierDegraded(t *testing.T) *metav1.Condition {
	t.Helper()
	return apimeta.FindStatusCondition(tierClusterStatus(t).Conditions, streamsv1alpha1.ConditionDegraded)
}
