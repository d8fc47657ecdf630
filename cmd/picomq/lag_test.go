package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestGroupsLagOnACluster: on three broker processes, a stream of two
// partitions gets appends and two groups' commits; each group's lag and
// committed offset are exported once across the brokers (by each
// partition's owner), and `picomq groups lag` shows the same through any
// broker.
func TestGroupsLagOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("process tier: skipped under -short (runs a 3-broker cluster and envtest's kube-apiserver)")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: the cluster's slot Leases need envtest's kube-apiserver (make test sets it)")
	}
	c := clusterharness.Start(t, clusterharness.Options{Brokers: 3, Cluster: true, Slots: 16,
		LeaseDuration: 3 * time.Second, LeaseRenewDeadline: 2 * time.Second, LeaseRetryPeriod: 500 * time.Millisecond})
	ctx := t.Context()
	cl, err := client.New(c.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.Open(ctx, "lag/orders", client.StreamConfig{Policy: stream.PolicyValue{Partitions: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range []int{10, 4} {
		for range n {
			if _, err := s.AppendWith(ctx, []stream.RecordValue{{Payload: []byte("x")}}, client.AppendOptions{Partition: client.Partition(p)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, cm := range []struct {
		group     string
		partition int
		next      uint64
	}{{"billing", 0, 4}, {"billing", 1, 4}, {"audit", 0, 10}} {
		if err := s.Commit(ctx, cm.group, cm.partition, stream.Offset(cm.next)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{ // group/partition -> lag
		"billing/0": 6, "billing/1": 0, "audit/0": 0,
	}
	committed := map[string]float64{"billing/0": 4, "billing/1": 4, "audit/0": 10}

	// The metrics: every position once across the brokers, by its owner.
	deadline := time.Now().Add(20 * time.Second)
	for {
		lags, nexts, seen := map[string]float64{}, map[string]float64{}, map[string]int{}
		for i := range 3 {
			for _, m := range scrape(t, c.URL(i)) {
				if m.labels["stream"] != "lag/orders" {
					continue
				}
				key := m.labels["group"] + "/" + m.labels["partition"]
				switch m.name {
				case "picomq_consumer_group_lag":
					lags[key] = m.value
					seen[key]++
				case "picomq_consumer_group_committed_offset":
					nexts[key] = m.value
				}
			}
		}
		ok := len(seen) == len(want)
		for k, n := range seen {
			ok = ok && n == 1 && lags[k] == want[k] && nexts[k] == committed[k]
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag series %v (sources %v), committed %v; want lags %v committed %v, each from one broker", lags, seen, nexts, want, committed)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The CLI through every broker.
	for i := range 3 {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"--server", c.URL(i), "-o", "json", "groups", "lag", "lag/orders"},
			func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
		if code != 0 {
			t.Fatalf("groups lag via broker-%d: exit %d: %s", i, code, errOut.String())
		}
		var views []lagView
		if err := json.Unmarshal(out.Bytes(), &views); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if len(views) != len(want) {
			t.Fatalf("groups lag via broker-%d: %+v", i, views)
		}
		for _, v := range views {
			key := v.Group + "/" + strconv.Itoa(v.Partition)
			if float64(v.Lag) != want[key] || float64(v.Next) != committed[key] {
				t.Fatalf("groups lag via broker-%d: %+v, want lag %v committed %v", i, v, want[key], committed[key])
			}
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--server", c.URL(1), "groups", "lag", "lag/orders", "--group", "billing"},
		func(string) string { return "" }, strings.NewReader(""), &out, io.Discard); code != 0 ||
		!strings.Contains(out.String(), "LAG") || strings.Contains(out.String(), "audit") {
		t.Fatalf("groups lag --group billing: exit %d:\n%s", code, out.String())
	}
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads a broker's /metrics in the text format (the lines of the
// consumer-group series; enough for this test).
func scrape(t *testing.T, base string) []sample {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []sample
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "picomq_consumer_group_") || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		lbls, val, _ := strings.Cut(rest, "} ")
		s := sample{name: name, labels: map[string]string{}}
		for _, kv := range strings.Split(lbls, ",") {
			k, v, _ := strings.Cut(kv, "=")
			s.labels[k] = strings.Trim(v, `"`)
		}
		if _, err := fmt.Sscan(val, &s.value); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}
