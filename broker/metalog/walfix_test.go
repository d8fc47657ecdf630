package metalog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// TestLogSurvivesTailTruncationAndReopen is hashicorp/raft-wal#31 as raft
// meets it: a suffix of the log cleared (a follower dropping a deposed
// leader's entries), new entries written over it, the process restarted.
// Before unindexedSealFiler, the reopened log could not read any entry of
// the truncated segment ("sealed segment has no index block") and
// raft.NewRaft panicked on it.
func TestLogSurvivesTailTruncationAndReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := openWAL(dir, 1<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	store := func(first, last, term uint64) {
		t.Helper()
		var logs []*raft.Log
		for i := first; i <= last; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprint(i, "@", term))})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	store(1, 10, 1)
	if err := s.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	store(9, 12, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = openWAL(dir, 1<<20, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := uint64(1); i <= 12; i++ {
		want := fmt.Sprint(i, "@", 1)
		if i > 8 {
			want = fmt.Sprint(i, "@", 2)
		}
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || string(l.Data) != want {
			t.Fatalf("GetLog(%d) after the reopen: %q, %v; want %q", i, l.Data, err, want)
		}
	}
}

// TestLogModelWithTruncationsAndReopens drives the log through random
// appends, tail truncations (raft's clearing of a suffix), head
// truncations (compaction after a snapshot) and reopens, on segments small
// enough to roll often, and checks every entry against a model after each
// reopen.
func TestLogModelWithTruncationsAndReopens(t *testing.T) {
	t.Parallel()
	const segmentBytes = 64 << 10
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0))
			dir := t.TempDir()
			s, err := openWAL(dir, segmentBytes, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			model := map[uint64]string{}
			first, last, term := uint64(1), uint64(0), uint64(1)
			check := func(step int) {
				t.Helper()
				f, _ := s.FirstIndex()
				l, _ := s.LastIndex()
				if last >= first && (f != first || l != last) {
					t.Fatalf("step %d: the log holds %d..%d, want %d..%d", step, f, l, first, last)
				}
				for i := first; i <= last; i++ {
					var got raft.Log
					if err := s.GetLog(i, &got); err != nil || string(got.Data) != model[i] {
						t.Fatalf("step %d: GetLog(%d): %.20q, %v; want %.20q", step, i, got.Data, err, model[i])
					}
				}
			}
			appendSome := func(step int) {
				var logs []*raft.Log
				for range 1 + rng.IntN(20) {
					last++
					data := fmt.Sprintf("%d@%d:%0*d", last, term, rng.IntN(2000), 0)
					model[last] = data
					logs = append(logs, &raft.Log{Index: last, Term: term, Type: raft.LogCommand, Data: []byte(data)})
				}
				if err := s.StoreLogs(logs); err != nil {
					t.Fatalf("step %d: StoreLogs(%d..%d): %v", step, logs[0].Index, last, err)
				}
			}
			for step := range 300 {
				switch op := rng.IntN(10); {
				case op < 6:
					appendSome(step)
				case op < 8 && last > first+1:
					// A follower's conflict: the suffix cleared and the new
					// leader's entries stored over it, as raft's
					// appendEntries does (never two clears in a row).
					from := first + 1 + rng.Uint64N(last-first)
					if err := s.DeleteRange(from, last); err != nil {
						t.Fatalf("step %d: DeleteRange(%d, %d): %v", step, from, last, err)
					}
					last = from - 1
					term++
					appendSome(step)
				case op < 9 && last > first+30: // compaction after a snapshot
					to := first + rng.Uint64N(last-first-20)
					if err := s.DeleteRange(first, to); err != nil {
						t.Fatalf("step %d: DeleteRange(%d, %d): %v", step, first, to, err)
					}
					first = to + 1
				default:
					if err := s.Close(); err != nil {
						t.Fatalf("step %d: close: %v", step, err)
					}
					if s, err = openWAL(dir, segmentBytes, hclog.NewNullLogger()); err != nil {
						t.Fatalf("step %d: reopen: %v", step, err)
					}
					check(step)
				}
			}
			check(300)
		})
	}
}

// TestLogFinishesARotationACrashInterrupted: the process died after the
// append that sealed a segment and before the rotation committed (the
// segment's file sealed, the meta database still calling it the tail).
// The reopened log holds every entry and takes appends; raft-wal alone
// refused every append after it ("segment is sealed").
func TestLogFinishesARotationACrashInterrupted(t *testing.T) {
	t.Parallel()
	const segmentBytes = 64 << 10
	dir := t.TempDir()
	s, err := openWAL(dir, segmentBytes, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1000)
	last := uint64(0)
	for {
		last++
		if err := s.StoreLogs([]*raft.Log{{Index: last, Term: 1, Type: raft.LogCommand, Data: payload}}); err != nil {
			t.Fatal(err)
		}
		ps, err := s.meta.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps.Segments) == 2 {
			break // the first segment sealed and rotated at entry last
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Undo the rotation's commit, as a crash before it leaves the log.
	meta := &metadb.BoltMetaDB{}
	ps, err := meta.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	next := ps.Segments[1]
	ps.Segments = ps.Segments[:1]
	ps.Segments[0].SealTime, ps.Segments[0].MaxIndex, ps.Segments[0].IndexStart = time.Time{}, 0, 0
	ps.NextSegmentID--
	if err := errors.Join(meta.CommitState(ps), meta.Close(), os.Remove(filepath.Join(dir, segment.FileName(next)))); err != nil {
		t.Fatal(err)
	}

	if s, err = openWAL(dir, segmentBytes, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.StoreLogs([]*raft.Log{{Index: last + 1, Term: 1, Type: raft.LogCommand, Data: []byte("after")}}); err != nil {
		t.Fatalf("append after the interrupted rotation: %v", err)
	}
	for i := uint64(1); i <= last+1; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
	}
}
