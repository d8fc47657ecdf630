package meta

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM is the State behind a lock, applied by the Raft log: it implements
// raft.FSM. Readers take copies through its accessors, so nothing they hold
// changes under them.
type FSM struct {
	mu       sync.RWMutex
	state    *State
	applied  uint64
	commands uint64 // commands applied by this process (tests, metrics)
	hooks    Hooks
}

// Hooks let the FSM's owner act on the log with the side effects the state
// machine itself must not have (files). Both run on raft's FSM goroutine,
// in log order, outside the state's lock.
type Hooks struct {
	// Applied is called after each decoded command is applied, with its
	// result.
	Applied func(c *Command, result any)
	// Snapshot is called as a snapshot of the state is taken, with the
	// state it holds, which the hook must not modify. The function it
	// returns, if any, runs before the snapshot is persisted, off the FSM
	// goroutine; its error cancels the snapshot (and with it the
	// compaction of the log entries it covers).
	Snapshot func(s *State) (beforePersist func() error)
}

// SetHooks installs hooks; call it before the FSM is given to the log.
func (f *FSM) SetHooks(h Hooks) { f.hooks = h }

// NewFSM returns a state machine over an empty state.
func NewFSM() *FSM { return &FSM{state: NewState()} }

// Apply decodes and applies one log entry, binary or JSON (see Encode). Its
// result is what metalog.Log.Apply returns.
func (f *FSM) Apply(l *raft.Log) any {
	var c Command
	if err := Decode(l.Data, &c); err != nil {
		f.mu.Lock()
		f.applied = l.Index
		f.mu.Unlock()
		return BadCommand.Wrap(err, "reason", "undecodable", "index", l.Index)
	}
	f.mu.Lock()
	f.applied = l.Index
	f.commands++
	res := f.state.Apply(&c)
	f.mu.Unlock()
	if f.hooks.Applied != nil {
		f.hooks.Applied(&c, res)
	}
	return res
}

// Snapshot captures a copy of the state; raft persists it off the apply path.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	s := &snapshot{state: f.state.Clone()}
	f.mu.RUnlock()
	if f.hooks.Snapshot != nil {
		s.before = f.hooks.Snapshot(s.state)
	}
	return s, nil
}

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := NewState()
	dec := json.NewDecoder(rc)
	if err := dec.Decode(s); err != nil {
		return BadCommand.Wrap(err, "reason", "undecodable snapshot")
	}
	// A snapshot is one JSON value: anything after it is a corrupt or
	// concatenated file, not a state to guess from.
	if _, err := dec.Token(); err != io.EOF {
		return BadCommand.With("reason", "data after the snapshot's state")
	}
	// Nothing is swapped in until the whole state is known good: a corrupt
	// snapshot leaves the machine as it was, never half restored.
	if err := restorable(s); err != nil {
		return BadCommand.Wrap(err, "reason", "the snapshot's state is not one the log could have made")
	}
	// JSON leaves absent maps nil; the state relies on them existing.
	if s.Names == nil {
		s.Names = map[string]*Entry{}
	}
	if s.Streams == nil {
		s.Streams = map[uint64]*Internal{}
	}
	if s.Objects == nil {
		s.Objects = map[uint64]*Object{}
	}
	if s.Garbage == nil {
		s.Garbage = map[uint64]bool{}
	}
	if s.Members == nil {
		s.Members = map[string]*Member{}
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	return nil
}

// restorable refuses a decoded snapshot's state that would panic the
// machine later (a null entry, stream, object or member) or that breaks
// its invariants (Check): a snapshot the log wrote passes both.
func restorable(s *State) error {
	for k, e := range s.Names {
		if e == nil {
			return fmt.Errorf("entry %q is null", k)
		}
	}
	for k, in := range s.Streams {
		if in == nil {
			return fmt.Errorf("stream %d is null", k)
		}
	}
	for k, o := range s.Objects {
		if o == nil {
			return fmt.Errorf("object %d is null", k)
		}
	}
	for k, m := range s.Members {
		if m == nil {
			return fmt.Errorf("member %q is null", k)
		}
	}
	return s.Check()
}

type snapshot struct {
	state  *State
	before func() error
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if s.before != nil {
		if err := s.before(); err != nil {
			_ = sink.Cancel()
			return err
		}
	}
	if err := json.NewEncoder(sink).Encode(s.state); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// View runs fn with the state under the read lock. fn must not keep
// references into the state nor modify it.
func (f *FSM) View(fn func(s *State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Entry returns a copy of the named stream's entry.
func (f *FSM) Entry(name string) (*Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.state.Names[name]
	if !ok {
		return nil, false
	}
	return e.Clone(), true
}

// Internal returns a copy of an internal stream.
func (f *FSM) Internal(id uint64) (*Internal, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	in, ok := f.state.Streams[id]
	if !ok {
		return nil, false
	}
	return in.Clone(), true
}

// Applied returns the index of the last applied entry.
func (f *FSM) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Commands returns how many commands this state machine applied since it
// was created (replayed ones included). Unlike the log index, it does not
// count raft's own entries.
func (f *FSM) Commands() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.commands
}

// State returns a deep copy of the whole state (tests, admin, snapshots).
func (f *FSM) State() *State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Clone()
}
