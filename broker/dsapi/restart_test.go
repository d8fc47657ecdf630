package dsapi

import (
	"testing"
	"time"
)

func producer(id, epoch, seq string) []string {
	return []string{"Content-Type", "text/plain", "Producer-Id", id, "Producer-Epoch", epoch, "Producer-Seq", seq}
}

// TestProducerStateSurvivesRestart: producer epochs and sequences, and the
// last Stream-Seq, are committed with the data: after a restart a retry is
// still a duplicate, a gap still a gap, a stale epoch still fenced.
func TestProducerStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, dir, nil)
	s.want(s.do("PUT", "p", "", "Content-Type", "text/plain"), 201, "create")
	s.want(s.do("POST", "p", "a", producer("w", "0", "0")...), 200, "seq 0")
	s.want(s.do("POST", "p", "b", producer("w", "0", "1")...), 200, "seq 1")
	s.want(s.do("POST", "p", "c", producer("v", "3", "0")...), 200, "other producer")
	s.want(s.do("POST", "p", "d", "Content-Type", "text/plain", "Stream-Seq", "m"), 204, "stream-seq m")
	s.stop()

	s = start(t, dir, nil)
	r := s.want(s.do("POST", "p", "b", producer("w", "0", "1")...), 204, "retry of seq 1 after restart")
	if r.h.Get(hProducerSeq) != "1" {
		t.Fatalf("duplicate answered Producer-Seq %q", r.h.Get(hProducerSeq))
	}
	r = s.want(s.do("POST", "p", "x", producer("w", "0", "5")...), 409, "gap after restart")
	if r.h.Get(hExpectedSeq) != "2" || r.h.Get(hReceivedSeq) != "5" {
		t.Fatalf("gap headers %v", r.h)
	}
	r = s.want(s.do("POST", "p", "x", producer("v", "2", "0")...), 403, "stale epoch after restart")
	if r.h.Get(hProducerEpoch) != "3" {
		t.Fatalf("fenced with Producer-Epoch %q", r.h.Get(hProducerEpoch))
	}
	s.want(s.do("POST", "p", "x", producer("v", "4", "1")...), 400, "new epoch not at 0")
	s.want(s.do("POST", "p", "x", "Content-Type", "text/plain", "Stream-Seq", "l"), 409, "stream-seq going back after restart")
	s.want(s.do("POST", "p", "e", producer("w", "0", "2")...), 200, "next seq after restart")
	if r := s.want(s.do("GET", "p", ""), 200, "read"); r.body != "abcde" {
		t.Fatalf("read %q", r.body)
	}
}

// TestClosedFlagSurvivesRestart: a closed stream stays closed, with the
// same final offset, and its closing append's retry is still acknowledged.
func TestClosedFlagSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, dir, nil)
	s.want(s.do("PUT", "c", "first", "Content-Type", "text/plain"), 201, "create")
	closing := append(producer("w", "1", "0"), "Stream-Closed", "true")
	final := s.want(s.do("POST", "c", "last", closing...), 200, "append and close").h.Get(hNextOffset)
	s.stop()

	s = start(t, dir, nil)
	r := s.want(s.do("POST", "c", "more", "Content-Type", "text/plain"), 409, "append after restart")
	if r.h.Get(hClosed) != "true" || r.h.Get(hNextOffset) != final {
		t.Fatalf("closed refusal headers %v, final %s", r.h, final)
	}
	if r := s.want(s.do("POST", "c", "last", closing...), 204, "closing tuple retried after restart"); r.h.Get(hClosed) != "true" {
		t.Fatal("retry not answered as closed")
	}
	r = s.want(s.do("GET", "c?offset=-1", ""), 200, "read")
	if r.body != "firstlast" || r.h.Get(hClosed) != "true" {
		t.Fatalf("read %q closed %q", r.body, r.h.Get(hClosed))
	}
	s.want(s.do("GET", "c?offset="+final+"&live=long-poll", ""), 204, "long-poll at the final offset")
}

// TestTTLAndExpirySurviveRestart: a sliding TTL counts from the last
// access before the restart — kept in memory, persisted lazily (reads
// write nothing to the metadata log) and at shutdown —, and an absolute
// expiry holds across it.
func TestTTLAndExpirySurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := start(t, dir, clk)
	s.want(s.do("PUT", "ttl", "x", "Content-Type", "text/plain", "Stream-TTL", "10"), 201, "create with TTL")
	s.want(s.do("PUT", "exp", "x", "Content-Type", "text/plain", "Stream-Expires-At", clk.Now().Add(30*time.Second).Format(time.RFC3339)), 201, "create with expiry")

	clk.Add(8 * time.Second)
	applied := s.b.Status().AppliedIndex
	for i := 0; i < 20; i++ {
		s.want(s.do("GET", "ttl", ""), 200, "read")
		s.want(s.do("GET", "exp", ""), 200, "read")
	}
	if after := s.b.Status().AppliedIndex; after != applied {
		t.Fatalf("reads wrote %d metadata entries", after-applied)
	}
	s.stop()

	s = start(t, dir, clk)
	clk.Add(7 * time.Second) // 15s after creation, 7s after the last read
	r := s.want(s.do("HEAD", "ttl", ""), 200, "TTL stream 7s after its last read")
	if r.h.Get(hTTL) != "10" {
		t.Fatalf("Stream-TTL %q", r.h.Get(hTTL))
	}
	clk.Add(4 * time.Second) // 11s after the last read; HEAD did not extend it
	s.want(s.do("HEAD", "ttl", ""), 404, "TTL stream 11s after its last read")
	s.want(s.do("GET", "ttl", ""), 404, "TTL stream 11s after its last read")
	s.want(s.do("PUT", "ttl", "", "Content-Type", "text/plain"), 201, "expired name created anew")

	s.want(s.do("GET", "exp", ""), 200, "expiring stream before its time")
	s.stop()
	s = start(t, dir, clk)
	clk.Add(12 * time.Second) // 31s after creation: reads did not extend it
	s.want(s.do("GET", "exp", ""), 404, "expired stream after restart")
}

// TestForksSurviveRestart: a fork's shared records, its own appends, its
// sub-offset prefix, the soft-deleted source and the cascade all come back
// from the metadata log, and every offset returned before the restart
// still reads and forks.
func TestForksSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, dir, nil)
	s.want(s.do("PUT", "src", "hello", "Content-Type", "text/plain"), 201, "create source")
	mid := s.want(s.do("POST", "src", " world", "Content-Type", "text/plain"), 204, "append").h.Get(hNextOffset)
	s.want(s.do("POST", "src", "!", "Content-Type", "text/plain"), 204, "append")
	s.want(s.do("PUT", "fork", "", hForkedFrom, "/v1/stream/src", hForkOffset, formatOffset(1), hForkSubOffset, "3", "Stream-TTL", "3600"), 201, "fork")
	s.want(s.do("POST", "fork", "P", "Content-Type", "text/plain"), 204, "append to fork")
	s.want(s.do("PUT", "fork2", "", hForkedFrom, "/v1/stream/fork"), 201, "fork of the fork")
	s.want(s.do("DELETE", "src", ""), 204, "soft-delete source")
	s.stop()

	s = start(t, dir, nil)
	s.want(s.do("HEAD", "src", ""), 410, "soft-deleted source after restart")
	s.want(s.do("PUT", "src", "", "Content-Type", "text/plain"), 409, "soft-deleted name still taken")
	if r := s.want(s.do("GET", "fork?offset=-1", ""), 200, "fork after restart"); r.body != "hello woP" {
		t.Fatalf("fork reads %q", r.body)
	}
	// The fork's record 1 is its own (the sub-offset prefix): the source's
	// offset after its record 1 reads the fork's next record.
	if r := s.want(s.do("GET", "fork?offset="+mid, ""), 200, "fork from an offset of the source"); r.body != "P" {
		t.Fatalf("fork from %s reads %q", mid, r.body)
	}
	if r := s.want(s.do("HEAD", "fork", ""), 200, "fork head"); r.h.Get(hTTL) != "3600" {
		t.Fatalf("fork TTL %q", r.h.Get(hTTL))
	}
	if r := s.want(s.do("HEAD", "fork2", ""), 200, "fork2 head"); r.h.Get(hTTL) != "3600" {
		t.Fatalf("fork of a fork did not inherit the TTL: %q", r.h.Get(hTTL))
	}
	// An offset returned before the restart is a fork position after it.
	s.want(s.do("PUT", "late", "", hForkedFrom, "/v1/stream/fork", hForkOffset, mid), 201, "fork after restart at an old offset")
	if r := s.want(s.do("GET", "late?offset=-1", ""), 200, "late fork"); r.body != "hello wo" {
		t.Fatalf("late fork reads %q", r.body)
	}
	s.want(s.do("DELETE", "late", ""), 204, "delete the late fork")
	s.want(s.do("DELETE", "fork", ""), 204, "soft-delete the middle fork")
	if r := s.want(s.do("GET", "fork2?offset=-1", ""), 200, "fork2"); r.body != "hello woP" {
		t.Fatalf("fork2 reads %q", r.body)
	}
	s.stop()

	s = start(t, dir, nil)
	s.want(s.do("DELETE", "fork2", ""), 204, "delete the last fork")
	s.want(s.do("HEAD", "fork", ""), 404, "middle fork collected")
	s.want(s.do("HEAD", "src", ""), 404, "source collected")
	s.want(s.do("PUT", "src", "", "Content-Type", "text/plain"), 201, "source name free again")
	if err := s.b.Snapshot(); err != nil {
		t.Fatal(err)
	}
}
