package metalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// toyCmd is the toy FSM's command, JSON-encoded into the log.
//
//	add   adds Val to counter Key and returns the new value (int64)
//	fail  changes nothing and returns errToy as the response
//	block waits until the FSM's gate is opened, then adds like add
type toyCmd struct {
	Op  string `json:"op"`
	Key string `json:"key"`
	Val int64  `json:"val"`
}

// errToy is what the toy FSM answers to "fail".
var errToy = errors.New("toy: refused")

// toyFSM is a deterministic map of counters. Since every command is an
// addition, its final state does not depend on the order commands were
// applied in, which is what lets the concurrent test check the result.
type toyFSM struct {
	mu        sync.Mutex
	counters  map[string]int64
	lastIndex uint64 // index of the last entry applied
	outOfOrd  int    // entries applied with an index not above lastIndex

	applies  atomic.Int64 // command entries applied since creation
	restores atomic.Int64 // calls to Restore

	// gate, when non-nil, is what "block" waits on.
	gate chan struct{}
}

func newToyFSM() *toyFSM { return &toyFSM{counters: map[string]int64{}} }

func mustCmd(op, key string, val int64) []byte {
	b, err := json.Marshal(toyCmd{Op: op, Key: key, Val: val})
	if err != nil {
		panic(err)
	}
	return b
}

func (f *toyFSM) Apply(l *raft.Log) any {
	var c toyCmd
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return fmt.Errorf("toy: bad command at %d: %w", l.Index, err)
	}
	if c.Op == "block" {
		<-f.gate // outside the lock: readers may look at the state meanwhile
	}
	f.applies.Add(1)

	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index <= f.lastIndex {
		f.outOfOrd++
	}
	f.lastIndex = l.Index
	switch c.Op {
	case "add", "block":
		f.counters[c.Key] += c.Val
		return f.counters[c.Key]
	case "fail":
		return errToy
	default:
		return fmt.Errorf("toy: unknown op %q", c.Op)
	}
}

func (f *toyFSM) state() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.counters)
}

func (f *toyFSM) outOfOrder() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outOfOrd
}

// Snapshot copies the map under the lock; Persist then runs concurrently
// with further Applies, as raft intends, on the copy.
func (f *toyFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return toySnapshot(maps.Clone(f.counters)), nil
}

func (f *toyFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var m map[string]int64
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return err
	}
	f.restores.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counters = m
	return nil
}

type toySnapshot map[string]int64

func (s toySnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(map[string]int64(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (toySnapshot) Release() {}
