package routing

import (
	"testing"
	"time"
)

// TestQuorumWatch: the loss counts only once seen at every sample for For;
// a sample that sees the quorum, or a gap between samples (the broker
// paused), starts the count again; a watch not sampled lately says no.
func TestQuorumWatch(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	lost := true
	q := &QuorumWatch{Lost: func() bool { return lost }, For: time.Second, Tick: 100 * time.Millisecond, Now: func() time.Time { return now }}
	step := func(n int) {
		for range n {
			now = now.Add(100 * time.Millisecond)
			q.Sample()
		}
	}
	q.Sample()
	step(9)
	if q.QuorumLost() {
		t.Fatal("lost after 0.9s of 1s")
	}
	step(1)
	if !q.QuorumLost() {
		t.Fatal("not lost after 1s of loss at every sample")
	}
	lost = false
	step(1)
	if q.QuorumLost() {
		t.Fatal("still lost after a sample saw the quorum")
	}
	lost = true
	step(5)
	now = now.Add(5 * time.Second) // paused: no sample for 5s
	if q.QuorumLost() {
		t.Fatal("lost on a watch not sampled for 5s")
	}
	q.Sample()
	step(9)
	if q.QuorumLost() {
		t.Fatal("lost 0.9s after a pause: the gap must start the count again")
	}
	step(1)
	if !q.QuorumLost() {
		t.Fatal("not lost 1s after the pause")
	}
}
