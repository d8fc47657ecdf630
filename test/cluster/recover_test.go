package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/membership"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestRecoverLostQuorum loses two of three voters for good and recovers
// the survivor through POST /v1/admin/recover: before, writes answer 503
// METADATA_UNAVAILABLE and committed records stay readable; the recovery is
// refused while the quorum stands and for bad voter lists; after it, the
// survivor alone leads and accepts appends with every record it held; a
// lost broker back with its old data is refused and says so (node status,
// readiness, metric), and on a wiped directory joins as a new member.
func TestRecoverLostQuorum(t *testing.T) {
	needCluster(t)
	ctx := context.Background()
	o := clusterOptions()
	c := clusterharness.Start(t, o)
	if err := c.WaitFor(4*o.LeaseDuration+10*time.Second, "every slot held", c.ClusterReady); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c.URL(0))
	const name = "recover-me"
	if _, _, err := cl.CreateStream(ctx, name, client.StreamConfig{Policy: stream.PolicyValue{Partitions: 4}}); err != nil {
		t.Fatal(err)
	}
	s, err := cl.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type acked struct {
		p   int
		off stream.Offset
		rec string
	}
	var acks []acked
	appendOne := func(i int) error {
		rec := fmt.Sprintf("record-%03d", i)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := s.Append(actx, []stream.RecordValue{{Key: []byte(fmt.Sprint(i % 7)), Payload: []byte(rec)}})
		if err == nil {
			acks = append(acks, acked{res.Partition, res.First, rec})
		}
		return err
	}
	for i := 0; i < 40; i++ {
		if err := appendOne(i); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}

	// Refused while the quorum stands, and for lists no voter set can be.
	if code, body := postRecover(t, c.URL(0), []string{"broker-0"}); code != http.StatusConflict || !strings.Contains(body, "RECOVERY_REFUSED") {
		t.Fatalf("recover with a working quorum: %d %s, want 409 RECOVERY_REFUSED", code, body)
	}

	// The survivor must hold everything acknowledged before the others
	// go: a record only the lost majority had is what a recovery loses,
	// and this test is about what it keeps.
	if err := c.WaitFor(20*time.Second, "broker-0 applied the leader's log", func(ctx context.Context) error {
		l := c.Leader()
		if l < 0 {
			return errors.New("no leader")
		}
		ln, err := c.Node(l)
		if err != nil {
			return err
		}
		n0, err := c.Node(0)
		if err != nil {
			return err
		}
		if n0.AppliedIndex < ln.LastIndex {
			return fmt.Errorf("broker-0 applied %d of %d", n0.AppliedIndex, ln.LastIndex)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.Kill(1)
	c.Kill(2)

	// No quorum: an append answers 503 METADATA_UNAVAILABLE (once
	// broker-0 sees the leader gone), never "written".
	if err := c.WaitFor(30*time.Second, "appends refused as METADATA_UNAVAILABLE", func(ctx context.Context) error {
		err := appendOne(1000)
		if err == nil {
			return errors.New("an append was acknowledged without a quorum")
		}
		if !strings.Contains(err.Error(), "METADATA_UNAVAILABLE") && !strings.Contains(err.Error(), "NO_SLOT_OWNER") {
			return fmt.Errorf("not yet the lost quorum's answer: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(acks) != 40 {
		t.Fatalf("%d appends acknowledged without a quorum", len(acks)-40)
	}

	for _, bad := range []struct {
		voters []string
		want   string
	}{
		{nil, "BAD_RECOVERY"},
		{[]string{"broker-1"}, "BAD_RECOVERY"},             // not the broker asked
		{[]string{"broker-0", "broker-0"}, "BAD_RECOVERY"}, // twice
		{[]string{"broker-0", "broker-9"}, "BAD_RECOVERY"}, // no such server
	} {
		if code, body := postRecover(t, c.URL(0), bad.voters); code != http.StatusBadRequest || !strings.Contains(body, bad.want) {
			t.Errorf("recover %v: %d %s, want 400 %s", bad.voters, code, body, bad.want)
		}
	}

	code, body := postRecover(t, c.URL(0), []string{"broker-0"})
	if code != http.StatusAccepted {
		t.Fatalf("recover: %d %s", code, body)
	}
	var rec membership.Recovery
	if err := json.Unmarshal([]byte(body), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Voters) != 1 || !strings.HasPrefix(rec.Voters[0].ID, "broker-0") || len(rec.Remove) != 2 {
		t.Fatalf("recovery planned %+v: want broker-0 alone, the two others removed", rec)
	}

	// The broker restarts itself, leads alone, records the others as
	// removed, and takes every slot once their Leases ran out.
	dir0 := c.Broker(0).DataDir
	if err := c.WaitFor(60*time.Second, "broker-0 recovered and finished", func(ctx context.Context) error {
		n, err := c.Node(0)
		if err != nil {
			return err
		}
		if !n.IsLeader() || len(n.Voters()) != 1 {
			return fmt.Errorf("not yet the lone leader: %s", n.Raw)
		}
		for _, f := range []string{"recover.json", "recover.done.json"} {
			if _, err := os.Stat(filepath.Join(dir0, f)); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s still there (%v)", f, err)
			}
		}
		if held, _, _ := n.Slots(); held != o.Slots {
			return fmt.Errorf("broker-0 holds %d of %d slots", held, o.Slots)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	cl = newClient(t, c.URL(0))
	if s, err = cl.Stream(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFor(30*time.Second, "an append after the recovery", func(context.Context) error { return appendOne(2000) }); err != nil {
		t.Fatal(err)
	}
	checkAcked := func(url string) {
		t.Helper()
		rc := newClient(t, url)
		rs, err := rc.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acks {
			got, err := rs.Read(ctx, a.p, a.off, 1)
			if err != nil || len(got) != 1 || got[0].Offset != a.off || string(got[0].Record.Payload) != a.rec {
				t.Fatalf("%s: partition %d offset %d: got %+v, %v; want %q", url, a.p, a.off, got, err, a.rec)
			}
		}
	}
	checkAcked(c.URL(0))

	// broker-1 back with its old data: refused, and saying so.
	c.Launch(1)
	if err := c.WaitFor(30*time.Second, "broker-1 reports itself removed", func(ctx context.Context) error {
		n, err := clusterharness.GetNode(ctx, c.URL(1))
		if err != nil {
			return err
		}
		var info wire.NodeInfo
		if err := json.Unmarshal(n.Raw, &info); err != nil {
			return err
		}
		if !info.Removed || info.RaftState != wire.RaftStateRemoved || info.Problem == "" {
			return fmt.Errorf("not reported removed: %s", n.Raw)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	if code, body := get(t, c.URL(1)+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "MEMBER_REMOVED") {
		t.Errorf("a removed broker's /readyz: %d %s", code, body)
	}
	if _, body := get(t, c.URL(1)+"/metrics"); !strings.Contains(body, "picomq_member_removed 1") {
		t.Errorf("a removed broker's metrics lack picomq_member_removed 1")
	}
	if n, err := c.Node(0); err != nil || len(n.Voters()) != 1 {
		t.Fatalf("the removed broker changed the configuration: %+v %v", n, err)
	}

	// Wiped, both lost brokers join as new members; the cluster is whole.
	c.Wipe(1)
	c.Wipe(2)
	if err := c.WaitFor(4*o.LeaseDuration+30*time.Second, "the cluster whole again", c.ClusterReady); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	for i := 0; i < c.N(); i++ {
		checkAcked(c.URL(i))
	}
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	cl, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func postRecover(t *testing.T, url string, voters []string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(membership.RecoveryRequest{Voters: voters})
	resp, err := http.Post(url+membership.RecoverPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}
