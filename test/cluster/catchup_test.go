package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestRestartedBrokerAnswersNothingBeforeCatchingUp restarts a broker whose
// copy of the metadata is behind (appends were acknowledged while it was
// down) cut from its peers and from the apiserver, so that no catch-up with
// the metadata leader can succeed: every request that would be answered
// from its copy — a read, a stream's heads, the listing, a stream created
// while it was down — is refused with 503 METADATA_CATCHING_UP, never
// answered stale, for longer than the Lease duration (after which, before
// the fix, it judged the quorum lost for want of news and answered from
// its copy). Healed, it catches up and answers the cluster's heads.
func TestRestartedBrokerAnswersNothingBeforeCatchingUp(t *testing.T) {
	needCluster(t)
	ctx := context.Background()
	o := clusterOptions()
	c := clusterharness.Start(t, o)
	if err := c.WaitFor(4*o.LeaseDuration+20*time.Second, "every slot held", c.ClusterReady); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c.URL(0))
	const name, later = "behind", "created-while-down"
	if _, _, err := cl.CreateStream(ctx, name, client.StreamConfig{Policy: stream.PolicyValue{Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	s, err := cl.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	appendSome := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := c.WaitFor(30*time.Second, "an append acknowledged", func(ctx context.Context) error {
				_, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte(fmt.Sprintf("record-%03d", i))}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendSome(0, 10)

	const victim = 2
	c.Kill(victim)
	appendSome(10, 30) // acknowledged while the victim is down: its copy misses them
	if _, _, err := cl.CreateStream(ctx, later, client.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	c.Isolate(victim)
	c.APIServerLink(victim).Cut()
	c.Launch(victim)

	url := c.URL(victim)
	paths := []string{
		wire.LogPrefix + name + "?from=0",
		"/v1/stream/" + name + "?offset=-1",
		wire.StreamsPrefix + name,
		wire.StreamsPrefix + later,
		wire.LogPrefix + later + "?from=0",
		wire.StreamsPath,
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	ask := func(path string) (int, string, error) {
		resp, err := hc.Get(url + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	// Until it listens, nothing to check; then every answer is the
	// refusal, for twice the Lease duration and more.
	if err := c.WaitFor(60*time.Second, "the restarted broker answers", func(context.Context) error {
		_, _, err := ask(wire.StreamsPath)
		return err
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	until := time.Now().Add(2*o.LeaseDuration + 2*time.Second)
	rounds := 0
	for rounds == 0 || time.Now().Before(until) {
		for _, p := range paths {
			code, body, err := ask(p)
			if err != nil {
				t.Fatalf("GET %s on the restarted broker: %v", p, err)
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "METADATA_CATCHING_UP") {
				t.Fatalf("GET %s on the restarted broker, cut from the quorum (round %d): %d %.500s; want 503 METADATA_CATCHING_UP, nothing from its stale copy", p, rounds, code, body)
			}
		}
		rounds++
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d rounds of %d requests refused over %v", rounds, len(paths), 2*o.LeaseDuration+2*time.Second)

	c.HealAll()
	want, err := heads(hc, c.URL(0), name)
	if err != nil {
		t.Fatal(err)
	}
	if want[0] < 30 {
		t.Fatalf("broker-0 reports a tail of %d, want 30 acknowledged", want[0])
	}
	if err := c.WaitFor(60*time.Second, "the healed broker answers the cluster's heads", func(context.Context) error {
		got, err := heads(hc, url, name)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("heads %v, want %v", got, want)
		}
		if code, body, err := ask(wire.StreamsPrefix + later); err != nil || code != http.StatusOK {
			return fmt.Errorf("the stream created while it was down: %d %.300s %v", code, body, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
}

// heads are a stream's partitions' ends as broker url describes them.
func heads(hc *http.Client, url, name string) ([]uint64, error) {
	resp, err := hc.Get(url + wire.StreamsPrefix + name)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %.300s", name, resp.StatusCode, b)
	}
	var info wire.StreamInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, err
	}
	if len(info.Partitions) == 0 {
		return nil, errors.New("no partitions described")
	}
	out := make([]uint64, len(info.Partitions))
	for i, p := range info.Partitions {
		out[i] = p.End
	}
	return out, nil
}
