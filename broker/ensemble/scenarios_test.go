package ensemble

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/crashfs"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/journal/journaltest"
)

// The protocol's fixed scenarios: the simulation's brokers, journals and
// checks (every acknowledged part in every later chain at its offset, no
// offset acknowledged with two objects, each acknowledgement durable on a
// quorum of every ensemble it needs), driven step by step through the
// histories a review named, with no message lost or delayed but those the
// scenario drops.

// scripted is a simulation of five brokers (b0/1 .. b4/1) that the test
// drives itself.
func scripted(t *testing.T) *sim {
	s := &sim{t: t, seed: 1, scripted: true, brokers: map[string]*simBroker{}, acked: map[uint64]Copy{}, nextID: 1,
		dirs: map[string]*crashfs.Dir{}, held: map[string]map[uint64]where{}}
	s.rng = newRand(1)
	for i := range 5 {
		name := fmt.Sprintf("b%d/1", i)
		s.names = append(s.names, name)
		s.brokers[name] = &simBroker{dir: &crashfs.Dir{}}
		s.dirs[name] = s.brokers[name].dir
		s.restart(name)
	}
	t.Cleanup(s.closeAll)
	return s
}

// open has owner open the stream at the next epoch with ensemble ens and
// recover it (dies: copy that many chain objects, then die before
// committing; -1: commit). It returns the recovery's answer.
func (s *sim) open(owner string, ens []string, dies int) error {
	s.t.Helper()
	sc := &simScript{owner: owner, ensemble: ens, dies: dies}
	s.script = sc
	before := len(s.owners)
	s.failover()
	if sc.err == nil && dies < 0 && len(s.owners) != before+1 {
		s.t.Fatalf("the open by %s did not make it the owner", owner)
	}
	return sc.err
}

// exchange delivers every queued message (requests and their answers)
// for which keep holds, and drops the others to members named in drop.
func (s *sim) exchange(keep func(m simMsg) bool) {
	for {
		i := -1
		for k, m := range s.msgs {
			if keep(m) {
				i = k
				break
			}
		}
		if i < 0 {
			return
		}
		s.deliverAt(i)
	}
}

// between keeps the messages between the owner and member, both ways.
func between(owner, member string) func(simMsg) bool {
	return func(m simMsg) bool {
		return m.from == owner && m.to == member || m.from == member && m.to == owner
	}
}

func (s *sim) dropAll() { s.msgs = nil }

// isAcked reports whether object id is acknowledged.
func (s *sim) isAcked(id uint64) bool {
	for _, c := range s.acked {
		if c.Object == id {
			return true
		}
	}
	return false
}

// TestScenarioChangeWhileTheTailIsOnOwnerAndOneMember: an epoch's tail is
// acknowledged on {owner, one member}; the owner replaces the other member
// and dies — before the change applies, and after.
func TestScenarioChangeWhileTheTailIsOnOwnerAndOneMember(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			s := scripted(t)
			if err := s.open("b0/1", []string{"b0/1", "b1/1", "b2/1"}, -1); err != nil {
				t.Fatal(err)
			}
			o := s.current()
			id1 := s.sendObject(o)
			s.exchange(between("b0/1", "b1/1"))
			s.dropAll()
			if !s.isAcked(id1) {
				t.Fatal("object 1 not acknowledged on {owner, b1}")
			}
			s.change(o, "b2/1", "b3/1")
			id2 := s.sendObject(o)
			s.exchange(between("b0/1", "b1/1"))
			s.exchange(between("b0/1", "b3/1"))
			s.dropAll()
			if !s.isAcked(id2) {
				t.Fatal("object 2 not acknowledged on both ensembles' quorums")
			}
			if applied {
				s.applyChange()
			}
			s.crash("b0/1")
			if err := s.open("b3/1", []string{"b3/1", "b1/1", "b4/1"}, -1); err != nil {
				t.Fatalf("recovery after the owner died: %v", err)
			}
		})
	}
}

// TestScenarioChangeReplacesTheMemberHoldingAWaitingObject: object 2 has
// its quorum on {owner, b1} but waits for object 1, which has none; the
// owner replaces b1. Object 2, acknowledged after the change past the end
// it names, must reach a quorum of the new ensemble as well — a recovery
// after the change reads only that one. (The simulation found it
// acknowledged on the old ensemble alone.)
func TestScenarioChangeReplacesTheMemberHoldingAWaitingObject(t *testing.T) {
	s := scripted(t)
	if err := s.open("b0/1", []string{"b0/1", "b1/1", "b2/1"}, -1); err != nil {
		t.Fatal(err)
	}
	o := s.current()
	id1 := s.sendObject(o)
	s.dropAll()
	id2 := s.sendObject(o)
	s.exchange(between("b0/1", "b1/1"))
	if s.isAcked(id2) || s.isAcked(id1) {
		t.Fatal("acknowledged before object 1 had its quorum")
	}
	s.change(o, "b1/1", "b3/1")
	s.exchange(between("b0/1", "b3/1")) // what waits goes to the new member
	// Object 1 reaches b1 late: a resend, the same bytes.
	s.send(simMsg{from: "b0/1", to: "b1/1", obj: o.sent[id1], epoch: o.epoch})
	s.exchange(between("b0/1", "b1/1"))
	if !s.isAcked(id1) || !s.isAcked(id2) {
		t.Fatalf("acknowledged: object 1 %v, object 2 %v", s.isAcked(id1), s.isAcked(id2))
	}
	s.applyChange()
	s.crash("b0/1")
	if err := s.open("b3/1", []string{"b3/1", "b2/1", "b4/1"}, -1); err != nil {
		t.Fatalf("recovery reading the new ensemble: %v", err)
	}
}

// TestScenarioLostAnswerThenTheSameOffsets: an object whose answers were
// lost (durable on its owner alone, never acknowledged); the owner dies;
// the next owner, not finding it, appends another object at the same
// offsets; the first owner comes back with its copy, and a later recovery
// must take the acknowledged object, never the dead one.
func TestScenarioLostAnswerThenTheSameOffsets(t *testing.T) {
	s := scripted(t)
	if err := s.open("b0/1", []string{"b0/1", "b1/1", "b2/1"}, -1); err != nil {
		t.Fatal(err)
	}
	dead := s.sendObject(s.current())
	s.dropAll() // every answer, and the copies, lost
	s.crash("b0/1")
	if err := s.open("b3/1", []string{"b3/1", "b2/1", "b4/1"}, -1); err != nil {
		t.Fatal(err)
	}
	if s.current().next != 0 {
		t.Fatalf("the new owner starts at %d, want 0 (the dead object was never acknowledged, and is on no member read)", s.current().next)
	}
	live := s.sendObject(s.current())
	s.exchange(func(simMsg) bool { return true })
	if s.isAcked(dead) || !s.isAcked(live) {
		t.Fatalf("acknowledged: dead %v, live %v", s.isAcked(dead), s.isAcked(live))
	}
	s.restart("b0/1") // holds the dead object, at the same offsets
	s.crash("b3/1")
	if err := s.open("b0/1", []string{"b0/1", "b1/1", "b2/1"}, -1); err != nil {
		t.Fatalf("recovery with the dead object back: %v", err)
	}
}

// TestScenarioOpenCopiedAndDiedBeforeCommitting: a new owner copies the
// chain to its ensemble and dies before committing its end; the next open
// must read that open's ensemble too, and finds everything.
func TestScenarioOpenCopiedAndDiedBeforeCommitting(t *testing.T) {
	for dies := range 3 {
		t.Run(fmt.Sprintf("after %d copies", dies), func(t *testing.T) {
			s := scripted(t)
			if err := s.open("b0/1", []string{"b0/1", "b1/1", "b2/1"}, -1); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				s.sendObject(s.current())
				s.exchange(between("b0/1", "b1/1"))
			}
			s.dropAll()
			s.crash("b0/1")
			if err := s.open("b3/1", []string{"b3/1", "b4/1", "b1/1"}, dies); err != nil {
				t.Fatal(err)
			}
			s.crash("b3/1")
			s.restart("b3/1") // back as a broker (its copies kept), no longer the owner
			s.crash("b1/1")   // the old ensemble's copy of the tail is now on b1 alone, which is down
			if err := s.open("b4/1", []string{"b4/1", "b2/1", "b0/1"}, -1); !errors.Is(err, TooFewFenced) {
				t.Fatalf("an open with too few fenced copies of an earlier ensemble: %v, want RECOVERY_TOO_FEW_FENCED", err)
			}
			s.restart("b1/1")
			s.restart("b0/1")
			if err := s.open("b4/1", []string{"b4/1", "b2/1", "b0/1"}, -1); err != nil {
				t.Fatalf("the open after the one that died: %v", err)
			}
		})
	}
}

// TestScenarioObjectInACommitBufferWhenAFenceArrives: a member's journal
// takes an old epoch's object and a new owner's fence of its stream
// together, many times over: either the object is written before the fence
// (and the fence's answer lists it) or it is refused — never accepted and
// missing from the answer.
func TestScenarioObjectInACommitBufferWhenAFenceArrives(t *testing.T) {
	j, err := journal.Open(journaltest.FS(&crashfs.Dir{}), journal.Options{Incarnation: "m/1"})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before, refused := 0, 0
	for i := range uint64(300) {
		stream := 100 + i
		var wg sync.WaitGroup
		var appendErr error
		var refs []journal.Ref
		wg.Add(2)
		go func() {
			defer wg.Done()
			appendErr = j.Append(journal.Object{ID: i + 1, Parts: []journal.Part{{Stream: stream, Epoch: 1, First: 0, Count: 1}}, Payload: []byte("x")})
		}()
		go func() {
			defer wg.Done()
			refs, err = j.Fence(stream, 2)
		}()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		listed := len(refs) == 1 && refs[0].Object == i+1
		switch {
		case appendErr == nil && listed:
			before++
		case errors.Is(appendErr, journal.Fenced) && len(refs) == 0:
			refused++
		default:
			t.Fatalf("round %d: the object answered %v, the fence listed %v", i, appendErr, refs)
		}
	}
	t.Logf("%d objects written before the fence, %d refused after it", before, refused)
}

// TestScenarioMemberWipedDuringARecovery: the tail is acknowledged on
// {owner, b1}; the owner dies and b1 is wiped and comes back as a new
// member: it is no fenced copy of the old ensemble, so the recovery waits
// instead of adopting a chain without the tail; once the owner's disk is
// back, the recovery finds it.
func TestScenarioMemberWipedDuringARecovery(t *testing.T) {
	s := scripted(t)
	if err := s.open("b0/1", []string{"b0/1", "b1/1", "b2/1"}, -1); err != nil {
		t.Fatal(err)
	}
	id := s.sendObject(s.current())
	s.exchange(between("b0/1", "b1/1"))
	s.dropAll()
	if !s.isAcked(id) {
		t.Fatal("the tail is not acknowledged")
	}
	s.crash("b0/1")
	s.wipe(1)
	s.restart("b1/2")
	if err := s.open("b3/1", []string{"b3/1", "b1/2", "b4/1"}, -1); !errors.Is(err, TooFewFenced) {
		t.Fatalf("a recovery counting a wiped member: %v, want RECOVERY_TOO_FEW_FENCED", err)
	}
	s.restart("b0/1")
	if err := s.open("b3/1", []string{"b3/1", "b1/2", "b4/1"}, -1); err != nil {
		t.Fatalf("the recovery once the owner is back: %v", err)
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 29)) }
