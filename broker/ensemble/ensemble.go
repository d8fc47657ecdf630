package ensemble

import (
	"hash/fnv"
	"slices"

	"github.com/picomq/picomq/broker/rendezvous"
)

// WriteQuorum is how many of an ensemble of r members must hold an object
// durable before it is acknowledged: a majority.
func WriteQuorum(r int) int { return r/2 + 1 }

// ReadQuorum is how many members of an ensemble of r a recovery must fence
// and read: enough that no write quorum is left unfenced (r - Qw + 1).
func ReadQuorum(r int) int { return r - WriteQuorum(r) + 1 }

// Choose returns owner's ensemble of r among live (owner first, then the
// others ranked by rendezvous hashing on owner); fewer than r when fewer
// are live. live is not changed; owner need not be in it.
func Choose(owner string, live []string, r int) []string {
	if r <= 0 {
		return nil
	}
	others := make([]string, 0, len(live))
	for _, m := range live {
		if m != owner && !slices.Contains(others, m) {
			others = append(others, m)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(owner))
	ranked := rendezvous.Rank(h.Sum64(), others)
	return append([]string{owner}, ranked[:min(r-1, len(ranked))]...)
}
