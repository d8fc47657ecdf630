// Package rendezvous ranks members for a key by highest random weight:
// every member computes the same order from the same set, without asking,
// and a member joining or leaving moves only the keys it ranks first for.
// Replication places object copies with it and ensembles choose an
// owner's peers with it.
package rendezvous

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// Score is the rendezvous (highest random weight) hash of member for
// object: an object's copies go to the live members with the highest
// scores, and its fetches try its replicas in that order. Every member
// computes the same choice from the same live set, without asking; a
// member joining or leaving moves only the objects it ranks first for.
func Score(object uint64, member string) uint64 {
	h := fnv.New64a()
	var b [9]byte
	binary.BigEndian.PutUint64(b[:8], object)
	b[8] = 0 // separator: the member id cannot run into the object's bytes
	h.Write(b[:])
	h.Write([]byte(member))
	return Mix(h.Sum64())
}

// Mix is splitmix64's finalizer: FNV-1a's output varies little between
// members whose ids differ in their last bytes, and the ranking needs every
// bit to vary.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Rank returns members ordered for object: highest score first, ties (as
// unlikely as a 64-bit collision) by id, so the order is a function of the
// set alone. members is not changed.
func Rank(object uint64, members []string) []string {
	type scored struct {
		id    string
		score uint64
	}
	s := make([]scored, len(members))
	for i, m := range members {
		s[i] = scored{m, Score(object, m)}
	}
	slices.SortFunc(s, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].id
	}
	return out
}
