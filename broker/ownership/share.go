package ownership

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sort"

	"github.com/picomq/picomq/broker/rendezvous"
)

// targetShare is how many of slots the member self should hold when live
// are the live members' identities: with L live, the member at rank r in
// sorted order targets slots/L, plus one if r < slots mod L, so the shares
// add up to slots and differ by at most one. A member not among live (it
// drains, or is not live) targets 0.
func targetShare(self string, live []string, slots int) int {
	sorted := slices.Clone(live)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	r, ok := slices.BinarySearch(sorted, self)
	if !ok {
		return 0
	}
	n := slots / len(sorted)
	if r < slots%len(sorted) {
		n++
	}
	return n
}

// score is the rendezvous (highest random weight) hash of a member for a
// slot: the live member with the highest score is the slot's preferred
// holder, and removing a member moves only the slots it preferred.
func score(identity string, slot int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(identity))
	var b [9]byte
	b[0] = 0 // separator: "a"+slot 12 differs from "a1"+slot 2
	binary.BigEndian.PutUint64(b[1:], uint64(slot))
	h.Write(b[:])
	return rendezvous.Mix(h.Sum64()) // every bit must vary between similar inputs
}

// rank is self's place, 0 first, among live (self included whether or not
// it is in live) by score for slot.
func rank(self string, live []string, slot int) int {
	mine := score(self, slot)
	r := 0
	for _, id := range live {
		if id == self {
			continue
		}
		if s := score(id, slot); s > mine || (s == mine && id < self) {
			r++
		}
	}
	return r
}

// preferred returns the live member with the highest score for slot, ""
// when live is empty.
func preferred(live []string, slot int) string {
	best, bestScore := "", uint64(0)
	for _, id := range live {
		if s := score(id, slot); best == "" || s > bestScore || (s == bestScore && id < best) {
			best, bestScore = id, s
		}
	}
	return best
}

// orderToTake sorts candidate slots so the ones self ranks highest for come
// first (ties by score, then slot): brokers under their share then mostly
// reach for different slots, and the assignment leans to rendezvous order.
func orderToTake(self string, live []string, cands []int) {
	type key struct {
		rank  int
		score uint64
	}
	keys := make(map[int]key, len(cands))
	for _, s := range cands {
		keys[s] = key{rank(self, live, s), score(self, s)}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := keys[cands[i]], keys[cands[j]]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.score != b.score {
			return a.score > b.score
		}
		return cands[i] < cands[j]
	})
}

// orderToRelease sorts held slots so the ones to hand off first come first:
// those whose preferred live member is someone else, then those self scores
// lowest for (ties by slot). Deterministic, so a broker over its share
// always gives up the same slots for the same view.
func orderToRelease(self string, live []string, held []int) {
	type key struct {
		mine  bool
		score uint64
	}
	keys := make(map[int]key, len(held))
	for _, s := range held {
		keys[s] = key{preferred(live, s) == self, score(self, s)}
	}
	sort.Slice(held, func(i, j int) bool {
		a, b := keys[held[i]], keys[held[j]]
		if a.mine != b.mine {
			return !a.mine
		}
		if a.score != b.score {
			return a.score < b.score
		}
		return held[i] < held[j]
	})
}
