package ensemble

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestQuorums(t *testing.T) {
	for r, want := range map[int][2]int{1: {1, 1}, 2: {2, 1}, 3: {2, 2}, 4: {3, 2}, 5: {3, 3}} {
		if w, rd := WriteQuorum(r), ReadQuorum(r); w != want[0] || rd != want[1] {
			t.Errorf("R=%d: write quorum %d, read quorum %d; want %v", r, w, rd, want)
		}
		// Every write quorum meets every read quorum.
		if WriteQuorum(r)+ReadQuorum(r) <= r {
			t.Errorf("R=%d: a write quorum and a read quorum can miss each other", r)
		}
	}
}

func TestChooseIsTheOwnerAndItsHighestRanked(t *testing.T) {
	live := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "b-5"}
	e := Choose("b-2", live, 3)
	if len(e) != 3 || e[0] != "b-2" || slices.Contains(e[1:], "b-2") {
		t.Fatalf("ensemble of b-2: %v", e)
	}
	reversed := slices.Clone(live)
	slices.Reverse(reversed)
	if got := Choose("b-2", reversed, 3); !slices.Equal(got, e) {
		t.Fatalf("the order of the live set changed the ensemble: %v, then %v", e, got)
	}
	// A member that leaves moves only the ensembles it was in.
	moved := 0
	for _, owner := range live {
		before := Choose(owner, live, 3)
		after := Choose(owner, slices.DeleteFunc(slices.Clone(live), func(m string) bool { return m == "b-5" }), 3)
		if !slices.Equal(before, after) {
			moved++
			if !slices.Contains(before, "b-5") {
				t.Errorf("%s's ensemble %v moved to %v though b-5 was not in it", owner, before, after)
			}
		}
	}
	if got := Choose("b-0", []string{"b-0", "b-1"}, 3); !slices.Equal(got, []string{"b-0", "b-1"}) {
		t.Errorf("with 2 live, R=3: %v", got)
	}
}

// TestAcksInStreamOrder: a part is acknowledged once a write quorum holds
// its object and every earlier part of its stream is acknowledged.
func TestAcksInStreamOrder(t *testing.T) {
	a := NewAcks()
	ens := []string{"o", "m1", "m2"}
	a.Sent(1, []uint64{10}, ens)
	a.Sent(2, []uint64{10, 20}, ens)
	a.Sent(3, []uint64{20}, ens)
	if got := a.Durable(2, "o"); got != nil {
		t.Fatalf("one copy of 3 acknowledged %v", got)
	}
	// Object 2 has its quorum: its stream-20 part goes (nothing before it
	// in 20); its stream-10 part waits for object 1.
	if got := a.Durable(2, "m2"); !slices.Equal(got, []Acked{{2, 20}}) {
		t.Fatalf("object 2 with a quorum: %v, want only its stream-20 part", got)
	}
	if got := a.Durable(3, "m1"); got != nil {
		t.Fatalf("%v", got)
	}
	if got := a.Durable(3, "m1"); got != nil {
		t.Fatalf("a member counted twice: %v", got)
	}
	if got := a.Durable(3, "outsider"); got != nil {
		t.Fatalf("a member of no ensemble counted: %v", got)
	}
	if got := a.Durable(3, "o"); !slices.Equal(got, []Acked{{3, 20}}) {
		t.Fatalf("object 3: %v", got)
	}
	if got := a.Durable(1, "m1"); got != nil {
		t.Fatalf("%v", got)
	}
	if got := a.Durable(1, "m2"); !slices.Equal(got, []Acked{{1, 10}, {2, 10}}) {
		t.Fatalf("object 1's quorum: %v, want object 1 then object 2 waiting behind it", got)
	}
	if a.Pending() != 0 {
		t.Fatalf("%d objects still pending", a.Pending())
	}
}

// TestAcksDuringAnEnsembleChange: while a change is pending an object must
// reach a quorum of the old and of the new ensemble.
func TestAcksDuringAnEnsembleChange(t *testing.T) {
	a := NewAcks()
	a.Sent(1, []uint64{10}, []string{"o", "m1", "m2"}, []string{"o", "m1", "m3"})
	a.Durable(1, "o")
	if got := a.Durable(1, "m2"); got != nil {
		t.Fatalf("a quorum of the old ensemble only: %v", got)
	}
	if got := a.Durable(1, "m3"); !slices.Equal(got, []Acked{{1, 10}}) {
		t.Fatalf("quorums of both: %v", got)
	}
}

func copies(epoch int64, from, to, step uint64, firstID uint64) []Copy {
	var out []Copy
	for off, id := from, firstID; off < to; off, id = off+step, id+1 {
		out = append(out, Copy{Object: id, Epoch: epoch, First: off, Count: step})
	}
	return out
}

func offsets(c Chain) []uint64 {
	var out []uint64
	for _, o := range c.Objects {
		out = append(out, o.First)
	}
	return out
}

// TestRecoverFindsATailAcknowledgedOnAQuorum: the tail the dead owner had
// on itself and one member is found through the other two members.
func TestRecoverFindsATailAcknowledgedOnAQuorum(t *testing.T) {
	ens := []string{"o", "m1", "m2"}
	epochs := []Epoch{{Epoch: 1, Ensemble: ens, Start: 0, Recovered: true}, {Epoch: 2, Ensemble: []string{"m1", "m2", "m3"}}}
	reads := []Read{
		{Member: "m1", Intact: true, Copies: copies(1, 0, 50, 10, 1)}, // the whole tail
		{Member: "m2", Intact: true, Copies: copies(1, 0, 30, 10, 1)}, // behind
		{Member: "m3", Intact: true},
	}
	c, err := Recover(Checkpoint{}, epochs, reads)
	if err != nil || c.End != 50 || !slices.Equal(offsets(c), []uint64{0, 10, 20, 30, 40}) {
		t.Fatalf("chain %v end %d, %v; want the tail to 50", offsets(c), c.End, err)
	}
}

// TestRecoverWaitsForEnoughFencedCopies: an ensemble with fewer intact
// fenced members than its read quorum stops the recovery; a damaged
// member is not a copy.
func TestRecoverWaitsForEnoughFencedCopies(t *testing.T) {
	epochs := []Epoch{{Epoch: 1, Ensemble: []string{"o", "m1", "m2"}, Recovered: true}}
	reads := []Read{{Member: "m1", Intact: true, Copies: copies(1, 0, 20, 10, 1)}, {Member: "m2", Intact: false, Copies: copies(1, 0, 20, 10, 1)}}
	if _, err := Recover(Checkpoint{}, epochs, reads); !errors.Is(err, TooFewFenced) {
		t.Fatalf("one intact of three: %v, want RECOVERY_TOO_FEW_FENCED", err)
	}
}

// TestRecoverReadsTheEnsembleOfAnOpenThatNeverCommitted: an open copied
// the tail to its new ensemble and died before committing its end; the
// next open must read that ensemble too, and finds the tail there.
func TestRecoverReadsTheEnsembleOfAnOpenThatNeverCommitted(t *testing.T) {
	epochs := []Epoch{
		{Epoch: 1, Ensemble: []string{"a0", "a1", "a2"}, Recovered: true},
		{Epoch: 2, Ensemble: []string{"b0", "b1", "b2"}}, // copied, died
		{Epoch: 3, Ensemble: []string{"c0", "c1", "c2"}},
	}
	reads := []Read{
		{Member: "a2", Intact: true, Copies: copies(1, 0, 20, 10, 1)},
		{Member: "b0", Intact: true, Copies: copies(1, 0, 40, 10, 1)},
		{Member: "b1", Intact: true, Copies: copies(1, 0, 40, 10, 1)},
		{Member: "c0", Intact: true}, {Member: "c1", Intact: true},
	}
	if _, err := Recover(Checkpoint{}, epochs, reads); !errors.Is(err, TooFewFenced) {
		t.Fatalf("one of epoch 1's ensemble: %v, want to wait", err)
	}
	reads = append(reads, Read{Member: "a0", Intact: true, Copies: copies(1, 0, 20, 10, 1)})
	c, err := Recover(Checkpoint{}, epochs, reads)
	if err != nil || c.End != 40 {
		t.Fatalf("with a0 back: end %d, %v; want the tail epoch 2's recovery copied, to 40", c.End, err)
	}
}

// TestRecoverDropsADeadTail: an epoch's objects above the next epoch's
// recorded start were never acknowledged; the next epoch's objects at
// those offsets are the chain.
func TestRecoverDropsADeadTail(t *testing.T) {
	epochs := []Epoch{
		{Epoch: 1, Ensemble: []string{"a", "b", "c"}, Start: 0, Recovered: true},
		{Epoch: 2, Ensemble: []string{"b", "c", "d"}, Start: 20, Recovered: true},
		{Epoch: 3, Ensemble: []string{"c", "d", "e"}},
	}
	dead := []Copy{{Object: 90, Epoch: 1, First: 20, Count: 10}, {Object: 91, Epoch: 1, First: 30, Count: 10}}
	live := copies(2, 20, 50, 10, 100)
	reads := []Read{
		{Member: "a", Intact: true, Copies: append(copies(1, 0, 20, 10, 1), dead...)},
		{Member: "b", Intact: true, Copies: append(copies(1, 0, 20, 10, 1), live...)},
		{Member: "c", Intact: true, Copies: copies(1, 0, 20, 10, 1)},
		{Member: "d", Intact: true, Copies: append(copies(1, 0, 20, 10, 1), live...)},
		{Member: "e", Intact: true},
	}
	c, err := Recover(Checkpoint{}, epochs, reads)
	if err != nil || c.End != 50 {
		t.Fatalf("end %d, %v", c.End, err)
	}
	for _, o := range c.Objects {
		if o.Object == 90 || o.Object == 91 {
			t.Fatalf("the dead tail was adopted: %v", c.Objects)
		}
	}
}

// TestRecoverRefusesCopiesThatContradictTheLog: two objects at one offset
// of one epoch, or a hole below a recorded start.
func TestRecoverRefusesCopiesThatContradictTheLog(t *testing.T) {
	epochs := []Epoch{{Epoch: 1, Ensemble: []string{"a", "b", "c"}, Recovered: true}, {Epoch: 2, Ensemble: []string{"a", "b", "c"}, Start: 30, Recovered: true}}
	twice := []Read{
		{Member: "a", Intact: true, Copies: []Copy{{Object: 1, Epoch: 1, First: 0, Count: 10}}},
		{Member: "b", Intact: true, Copies: []Copy{{Object: 2, Epoch: 1, First: 0, Count: 10}}},
	}
	if _, err := Recover(Checkpoint{}, epochs, twice); !errors.Is(err, Inconsistent) {
		t.Fatalf("two objects at offset 0 of epoch 1: %v", err)
	}
	hole := []Read{
		{Member: "a", Intact: true, Copies: copies(1, 0, 20, 10, 1)},
		{Member: "b", Intact: true, Copies: copies(1, 0, 20, 10, 1)},
	}
	if _, err := Recover(Checkpoint{}, epochs, hole); !errors.Is(err, Inconsistent) {
		t.Fatalf("copies to 20 below epoch 2's recorded start at 30: %v", err)
	}
}

// TestAckedIsRecovered: random histories through the ack rule and the
// recovery together. Owners of successive epochs send objects to their
// ensembles, each member holding each one or not at random (a member
// holding an object holds every earlier one it was sent: its journal is
// one log); what the ack rule acknowledged must be in every recovery's
// chain, which each next epoch then copies to its ensemble and writes on
// from. Hundreds of seeds here; the protocol tier adds crashes, pauses
// and message loss around the same rules.
func TestAckedIsRecovered(t *testing.T) {
	members := []string{"b0", "b1", "b2", "b3", "b4"}
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		held := map[string][]Copy{} // each member's copies, in the order it got them
		var epochs []Epoch
		var acked []Copy
		end, nextID := uint64(0), uint64(1)
		for e := int64(1); e <= 4; e++ {
			owner := members[rng.IntN(len(members))]
			ens := Choose(owner, members, 3)
			epochs = append(epochs, Epoch{Epoch: e, Ensemble: ens, Start: end, Recovered: true})
			if e > 1 {
				// Recovery: fence and read a read quorum of every
				// ensemble since the checkpoint (0: none taken here).
				var reads []Read
				for _, ep := range epochs[:len(epochs)-1] {
					for _, m := range pick(rng, ep.Ensemble, ReadQuorum(len(ep.Ensemble))) {
						reads = append(reads, Read{Member: m, Intact: true, Copies: held[m]})
					}
				}
				chain, err := Recover(Checkpoint{}, epochs[:len(epochs)-1], reads)
				if err != nil {
					t.Fatalf("seed %d epoch %d: %v", seed, e, err)
				}
				for _, a := range acked {
					if !slices.Contains(chain.Objects, a) {
						t.Fatalf("seed %d epoch %d: acknowledged %+v not in the chain %v", seed, e, a, chain.Objects)
					}
				}
				// The new owner copies the chain to its whole ensemble
				// and commits its end.
				for _, m := range ens {
					for _, c := range chain.Objects {
						if !slices.Contains(held[m], c) {
							held[m] = append(held[m], c)
						}
					}
				}
				end = chain.End
				epochs[len(epochs)-1].Start = end
				acked = slices.Clone(chain.Objects)
			}
			// The epoch writes: each object reaches a random prefix-closed
			// set of members (a member that missed one misses the rest).
			acks := NewAcks()
			sent := map[uint64]Copy{}
			reached := map[string]bool{}
			for _, m := range ens {
				reached[m] = true
			}
			for range 1 + rng.IntN(6) {
				c := Copy{Object: nextID, Epoch: e, First: end, Count: 1 + uint64(rng.IntN(3))}
				nextID++
				end = c.First + c.Count
				acks.Sent(c.Object, []uint64{1}, ens)
				sent[c.Object] = c
				for _, m := range ens {
					if reached[m] && rng.IntN(5) == 0 {
						reached[m] = false
					}
					if reached[m] {
						held[m] = append(held[m], c)
						for _, a := range acks.Durable(c.Object, m) {
							acked = append(acked, sent[a.Object])
						}
					}
				}
			}
		}
	}
}

// pick returns n of ms at random.
func pick(rng *rand.Rand, ms []string, n int) []string {
	p := slices.Clone(ms)
	rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p[:n]
}

// TestRecoverRefusesReadsThatEndBelowARecordedStart: an epoch recorded as
// starting at 10 whose objects below 10 no read holds — not even one copy
// of the epoch before — is a contradiction, not an empty chain.
func TestRecoverRefusesReadsThatEndBelowARecordedStart(t *testing.T) {
	epochs := []Epoch{{Epoch: 1, Ensemble: []string{"a", "b", "c"}, Recovered: true}, {Epoch: 2, Ensemble: []string{"a", "b", "c"}, Start: 10, Recovered: true}}
	reads := []Read{
		{Member: "a", Intact: true, Copies: copies(2, 10, 20, 10, 5)},
		{Member: "b", Intact: true, Copies: copies(2, 10, 20, 10, 5)},
	}
	if _, err := Recover(Checkpoint{}, epochs, reads); !errors.Is(err, Inconsistent) {
		t.Fatalf("no copy below epoch 2's recorded start at 10: %v, want RECOVERY_INCONSISTENT", err)
	}
	zero := []Read{
		{Member: "a", Intact: true, Copies: []Copy{{Object: 1, Epoch: 1, First: 0, Count: 0}}},
		{Member: "b", Intact: true},
	}
	if _, err := Recover(Checkpoint{}, epochs[:1], zero); !errors.Is(err, Inconsistent) {
		t.Fatalf("a part of no record: %v", err)
	}
}

// TestAcksWidenAndResend: an ensemble change widens what is still
// waiting; a resend recorded again changes nothing.
func TestAcksWidenAndResend(t *testing.T) {
	a := NewAcks()
	a.Sent(1, []uint64{10}, []string{"o", "m1", "m2"})
	a.Sent(1, []uint64{10}, []string{"o", "m1", "m2"}) // a resend
	a.Durable(1, "o")
	a.Widen([]string{"o", "m1", "m3"})
	if got := a.Durable(1, "m2"); got != nil {
		t.Fatalf("a quorum of the old ensemble only, after a change: %v", got)
	}
	if got := a.Durable(1, "m3"); !slices.Equal(got, []Acked{{1, 10}}) {
		t.Fatalf("quorums of both: %v", got)
	}
}

// TestRecoverSkipsOlderEpochsPastTheCheckpoint: after an ensemble change
// of epoch 2 checkpointed its end (30) and let go of epoch 2's open, the
// new ensemble is all a recovery reads; a member that also served epoch 1
// still holds epoch 1's dead tail past 20 (epoch 2's start, no longer in
// the records): it is not adopted, epoch 2's acknowledged tail is.
func TestRecoverSkipsOlderEpochsPastTheCheckpoint(t *testing.T) {
	change := []Epoch{{Epoch: 2, Ensemble: []string{"o", "m1", "m3"}}}
	dead := copies(1, 20, 50, 10, 100) // epoch 1, offsets 20..50, never acknowledged
	live := copies(2, 30, 50, 10, 200) // epoch 2, acknowledged past the checkpoint
	reads := []Read{
		{Member: "m1", Intact: true, Copies: append(slices.Clone(dead), live...)},
		{Member: "m3", Intact: true, Copies: live},
	}
	c, err := Recover(Checkpoint{End: 30, Epoch: 2}, change, reads)
	if err != nil || c.End != 50 || len(c.Objects) != 2 || c.Objects[0].Epoch != 2 || c.Objects[1].Epoch != 2 {
		t.Fatalf("chain %+v, %v; want epoch 2's objects from 30 to 50", c, err)
	}
}
