package ensemble

import (
	"slices"

	"github.com/picomq/picomq/broker/errs"
)

// The recovery chain: what a new owner adopts of a stream (see the package
// doc).

// Epoch is one open of the stream recorded since its last checkpoint, as
// the metadata log holds it.
type Epoch struct {
	Epoch    int64
	Ensemble []string // members, by id (name and incarnation)
	// Start is where the epoch's own appends began — the end its
	// recovery committed; Recovered is false when that recovery never
	// committed (the epoch wrote nothing of its own).
	Start     uint64
	Recovered bool
}

// Checkpoint is the stream's last checkpoint as the metadata log holds it:
// the acknowledged end it recorded, by the owner of which epoch. (An
// ensemble change records one too.)
type Checkpoint struct {
	End   uint64
	Epoch int64
}

// Copy is one object part a fenced member holds of the stream.
type Copy struct {
	Object uint64
	Epoch  int64
	First  uint64
	Count  uint64
}

// Read is what one member answered to the recovery's fence.
type Read struct {
	Member string
	// Intact is false for a member whose journal is damaged mid-file or
	// of another incarnation than the ensemble records: it is not a
	// fenced copy.
	Intact bool
	Copies []Copy
}

// Chain is the recovery's outcome: the objects adopted, in offset order,
// and the end they reach.
type Chain struct {
	Objects []Copy
	End     uint64
}

// Recovery's refusals: block 0.16.11 (0x00_10_0B_xx).
const (
	CodeTooFewFenced errs.Code = 0x00_10_0B_01
	CodeInconsistent errs.Code = 0x00_10_0B_02
	CodeQuorumLost   errs.Code = 0x00_10_0B_03
)

var (
	// QuorumLost: an object reached fewer members of one of its
	// ensembles than the write quorum before the ack timeout; its
	// appends' outcome is unknown (it may be durable on some).
	QuorumLost = errs.Static(CodeQuorumLost, "WRITE_QUORUM_LOST",
		"Too few of the stream's brokers answered to acknowledge the append; its outcome is unknown",
		"broker/ensemble: an object reached fewer members of an ensemble than its write quorum; fields: object, ensemble, durable, need, waiting",
		503, 75)

	// TooFewFenced: some recorded ensemble has fewer intact fenced
	// members than its read quorum; the stream waits (nothing is adopted
	// that might miss an acknowledged object).
	TooFewFenced = errs.Static(CodeTooFewFenced, "RECOVERY_TOO_FEW_FENCED",
		"Too few copies of the stream could be fenced to recover it; it is served once more of its brokers answer",
		"broker/ensemble: a recorded ensemble has fewer intact fenced members than R - Qw + 1; fields: epoch, ensemble, fenced, need",
		503, 75)

	// Inconsistent: the copies contradict the log — a gap below a
	// recorded start, or two objects at one offset of one epoch.
	Inconsistent = errs.Static(CodeInconsistent, "RECOVERY_INCONSISTENT",
		"The stream's copies contradict its recorded history; it is not served until repaired",
		"broker/ensemble: a recovery found copies that contradict the metadata log; fields: epoch, offset, reason",
		500, 70)
)

// Recover builds the chain of a stream from its last checkpoint, given the
// ensembles recorded since — opens and ensemble changes, oldest first:
// each must have a read quorum fenced — and the fenced members' reads.
//
// A copy of an epoch older than the checkpoint's is dead: the
// checkpoint's owner recovered every acknowledged record of the epochs
// before its own below its own start, so what an older epoch has past the
// checkpoint was never acknowledged. (Without this rule an ensemble
// change's checkpoint could not let go of the open before it: that open's
// recorded start is what bounded the older epochs' dead tails, and its
// ensemble — the one being changed, with a member gone — would have to be
// read forever.)
func Recover(cp Checkpoint, epochs []Epoch, reads []Read) (Chain, error) {
	checkpointEnd := cp.End
	byMember := map[string]Read{}
	for _, r := range reads {
		if r.Intact {
			byMember[r.Member] = r
		}
	}
	for _, e := range epochs {
		fenced := 0
		for _, m := range e.Ensemble {
			if _, ok := byMember[m]; ok {
				fenced++
			}
		}
		if need := ReadQuorum(len(e.Ensemble)); fenced < need {
			return Chain{}, TooFewFenced.With("epoch", e.Epoch, "ensemble", e.Ensemble, "fenced", fenced, "need", need)
		}
	}
	// Every distinct copy, by epoch and offset.
	type key struct {
		epoch int64
		first uint64
	}
	found := map[key]Copy{}
	for _, r := range byMember {
		for _, c := range r.Copies {
			if c.Epoch < cp.Epoch {
				continue // dead past the checkpoint (see above)
			}
			if c.Count == 0 {
				return Chain{}, Inconsistent.With("epoch", c.Epoch, "offset", c.First, "reason", "an object part of no record")
			}
			k := key{c.Epoch, c.First}
			if prev, ok := found[k]; ok && (prev.Object != c.Object || prev.Count != c.Count) {
				return Chain{}, Inconsistent.With("epoch", c.Epoch, "offset", c.First, "reason", "two objects at one offset of one epoch")
			}
			found[k] = c
		}
	}
	var epochsFound []int64
	for k := range found {
		if !slices.Contains(epochsFound, k.epoch) {
			epochsFound = append(epochsFound, k.epoch)
		}
	}
	slices.Sort(epochsFound)
	// limit(e): the start recorded for the next recovered epoch after e.
	limit := func(e int64) (uint64, bool) {
		for _, r := range epochs {
			if r.Epoch > e && r.Recovered {
				return r.Start, true
			}
		}
		return 0, false
	}
	chain := Chain{End: checkpointEnd}
	for _, e := range epochsFound {
		lim, bounded := limit(e)
		for chain.End < lim || !bounded {
			c, ok := found[key{e, chain.End}]
			if !ok {
				break
			}
			if bounded && c.First+c.Count > lim {
				return Chain{}, Inconsistent.With("epoch", e, "offset", c.First, "reason", "an object straddles the next epoch's recorded start")
			}
			chain.Objects = append(chain.Objects, c)
			chain.End = c.First + c.Count
		}
		if bounded && chain.End < lim {
			// Below a recorded start everything was adopted once, and
			// copied to the ensemble after it: a hole means the reads
			// miss what the log says was there.
			return Chain{}, Inconsistent.With("epoch", e, "offset", chain.End, "reason", "a gap below the next epoch's recorded start")
		}
	}
	// Every recovered epoch began where the chain before it ended: one
	// whose start the chain does not reach lost what lay below it from
	// every read (an epoch with no copies at all escapes the check above).
	for _, e := range epochs {
		if e.Recovered && e.Start > chain.End {
			return Chain{}, Inconsistent.With("epoch", e.Epoch, "offset", chain.End, "reason", "the reads end below a recorded start")
		}
	}
	return chain, nil
}
