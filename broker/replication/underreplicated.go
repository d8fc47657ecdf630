package replication

import "iter"

// UnderReplicated counts the objects with fewer than r distinct replicas
// among the current members: a replica on a member that is down but not
// removed still counts (it keeps its copy and serves it again when it is
// back); one on a removed member, or a member never known, does not.
// Objects with no replica set (their frames rode in their commit, which
// every member keeps, or a lone broker wrote them) are not counted.
//
// objects yields each committed object's id and replica set; isMember
// says whether an id is a current (not removed) member. It is pure, so
// that the status and the gauge (Metrics.UnderReplicated) can be fed from
// any snapshot of the state.
func UnderReplicated(objects iter.Seq2[uint64, []string], isMember func(id string) bool, r int) int {
	n := 0
	for _, replicas := range objects {
		if len(replicas) == 0 {
			continue
		}
		held := 0
		for i, m := range replicas {
			if isMember(m) && !dupBefore(replicas, i) {
				held++
			}
		}
		if held < r {
			n++
		}
	}
	return n
}

// dupBefore reports whether replicas[i] appears earlier in replicas (sets
// are a handful of ids: no map).
func dupBefore(replicas []string, i int) bool {
	for _, m := range replicas[:i] {
		if m == replicas[i] {
			return true
		}
	}
	return false
}
