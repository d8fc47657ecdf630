package replication

import "github.com/picomq/picomq/broker/rendezvous"

// Score and Rank: see broker/rendezvous (object copies go to the live
// members ranked highest for the object's id).
func Score(object uint64, member string) uint64 { return rendezvous.Score(object, member) }

// Rank returns members ordered for object (rendezvous.Rank).
func Rank(object uint64, members []string) []string { return rendezvous.Rank(object, members) }

// choose returns the n peers object's copies go to, ranked; fewer when
// fewer are live.
func choose(object uint64, live []Peer, n int) []Peer {
	byID := make(map[string]Peer, len(live))
	ids := make([]string, len(live))
	for i, p := range live {
		byID[p.ID] = p
		ids[i] = p.ID
	}
	ranked := Rank(object, ids)
	out := make([]Peer, 0, min(n, len(ranked)))
	for _, id := range ranked[:min(n, len(ranked))] {
		out = append(out, byID[id])
	}
	return out
}
