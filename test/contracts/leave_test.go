package contracts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// TestDrainMovesCopiesAndLeaves: a drain to leave, as a scale down asks.
// Records large enough to be object files (replicated, R=2) are written
// through every broker; the last one drains: it hands its slots off, the
// leader copies every object it holds a copy of to the two that stay, and
// it reports Drained with nothing held, removed from the configuration.
// Then it is killed — and every record is still read back whole from the
// two left, which report nothing under-replicated.
func TestDrainMovesCopiesAndLeaves(t *testing.T) {
	needCluster(t)
	o := options()
	c := clusterharness.Start(t, o)
	ctx := t.Context()

	// 64 KiB + 1: above the inline bound, so each append is an object file
	// with a replica set of 2.
	big := func(tag string) []byte {
		return append(bytes.Repeat([]byte{'x'}, 64<<10), []byte(tag)...)
	}
	const streams = 8
	var want [][]string
	for i := range streams {
		cl, err := client.New(c.URL(i % c.N()))
		if err != nil {
			t.Fatal(err)
		}
		s, err := cl.Open(ctx, fmt.Sprintf("leave/s-%d", i), client.StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var tags []string
		for j := range 3 {
			tag := fmt.Sprintf("s%d-r%d", i, j)
			if _, err := s.Append(ctx, []stream.RecordValue{{Payload: big(tag)}}); err != nil {
				t.Fatalf("append %s: %v", tag, err)
			}
			tags = append(tags, tag)
		}
		want = append(want, tags)
		cl.Close()
	}
	ds, err := c.DrainStatus(ctx, drained)
	if err != nil || ds.ObjectsHeld == 0 {
		t.Fatalf("before the drain: %+v, %v; want copies held by broker-%d", ds, err, drained)
	}
	held := ds.ObjectsHeld
	leaving, err := c.Node(drained)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := c.DrainAndWait(drained, 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(4096))
	}
	t.Logf("drained broker-%d holding %d copies in %s", drained, held, time.Since(start).Round(10*time.Millisecond))
	if ds, err = c.DrainStatus(ctx, drained); err != nil || ds.SlotsHeld != 0 || ds.OpenStreams != 0 || ds.ObjectsHeld != 0 {
		t.Fatalf("drained: %+v, %v; want nothing held", ds, err)
	}

	// Out of the configuration: the others' voters do not name it.
	if err := c.WaitFor(time.Minute, "the drained broker out of the configuration", func(ctx context.Context) error {
		for i := range drained {
			n, err := c.Node(i)
			if err != nil {
				return err
			}
			var conf struct {
				NonVoters []string `json:"nonVoters"`
			}
			if err := json.Unmarshal(n.Raw, &conf); err != nil {
				return err
			}
			if slices.Contains(n.Voters(), leaving.MemberID) || slices.Contains(conf.NonVoters, leaving.MemberID) {
				return fmt.Errorf("broker-%d still lists %s: %s", i, leaving.MemberID, n.Raw)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Left: it refuses the client API, retriable, so that clients go to
	// the others (its view of the metadata stops at its removal).
	resp, err := http.Get(c.URL(drained) + "/v1/admin/streams/leave/s-0")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("NOT_READY")) {
		t.Errorf("a request to the drained broker: %s %s, want 503 NOT_READY", resp.Status, body)
	}

	// Gone for good: everything reads back from the two that stay.
	c.Kill(drained)
	for i, tags := range want {
		cl, err := client.New(c.URL(i % drained))
		if err != nil {
			t.Fatal(err)
		}
		s, err := cl.Stream(ctx, fmt.Sprintf("leave/s-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.Read(ctx, 0, 0, 10)
		if err != nil || len(es) != len(tags) {
			t.Fatalf("%s after broker-%d left: %d records, %v", s.Name(), drained, len(es), err)
		}
		for j, e := range es {
			if !bytes.Equal(e.Record.Payload, big(tags[j])) {
				t.Errorf("%s record %d: %d bytes ending %q", s.Name(), j, len(e.Record.Payload), tail(e.Record.Payload))
			}
		}
		cl.Close()
	}
	for i := range drained {
		n, err := c.Node(i)
		if err != nil {
			t.Fatal(err)
		}
		var under struct {
			UnderReplicated *int `json:"underReplicated"`
		}
		if err := json.Unmarshal(n.Raw, &under); err != nil || under.UnderReplicated == nil || *under.UnderReplicated != 0 {
			t.Errorf("broker-%d: under-replicated %v (%v): %s", i, under.UnderReplicated, err, n.Raw)
		}
	}
}

func tail(b []byte) string {
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	return string(b)
}
