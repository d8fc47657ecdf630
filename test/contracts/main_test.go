// Package contracts_test checks that the broker's contracts hold through a
// cluster (issue 19): a 3-broker cluster (test/clusterharness) with one
// broker drained of its slots, so that it owns none of the streams and
// every request sent to it is proxied to an owner. It runs the drain's
// first stage itself (POST, GET and DELETE /v1/admin/drain) and the engine
// suite (broker/stream/streamtest) for the remote engine (broker/client)
// pointed at the drained broker. The Durable Streams conformance suite
// runs the same way from test/conformance/run.sh --cluster 3.
//
// Under -short, and without envtest's binaries (KUBEBUILDER_ASSETS, which
// `make test` sets), everything here skips, saying so.
package contracts_test

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/picomq/picomq/test/clusterharness"
)

func TestMain(m *testing.M) {
	flag.Parse()
	clusterharness.Main(m)
}

// needCluster skips under -short, without envtest's binaries, and while
// the broker has no cluster mode.
func needCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier: skipped under -short (runs a 3-broker cluster and envtest's kube-apiserver); go test without -short runs it")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: the cluster's slot Leases need envtest's kube-apiserver; run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)")
	}
	ok, err := clusterharness.SupportsCluster()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip(clusterharness.ClusterUnsupported)
	}
}

// drained is the broker the tests drain: the last one.
const drained = 2

// options is the cluster every test here runs: 3 brokers, 16 slots,
// short leases, and R=2, so that the two brokers that stay hold every
// object's copies once one drains (with R=3 a drain is refused).
func options() clusterharness.Options {
	return clusterharness.Options{
		Brokers: 3, Cluster: true, Slots: 16, ReplicationFactor: 2,
		LeaseDuration: 3 * time.Second, LeaseRenewDeadline: 2 * time.Second, LeaseRetryPeriod: 500 * time.Millisecond,
	}
}

// drainTimeout bounds a drain of the slots: hand-offs are immediate, the
// rest is the others' next retry periods.
const drainTimeout = 30 * time.Second
