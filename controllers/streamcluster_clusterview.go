package controllers

import (
	"fmt"
	"slices"
	"strings"
	"time"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

// The cluster as its brokers' answers describe it: the cluster id, the
// metadata leader and configuration, who holds which slot, how many
// objects lack copies. Pure functions of the observation, for the status
// and the Ready condition.

// recordedClusterID is the cluster id status keeps: the one already
// recorded, for good; else the one every answering broker that reports an
// id agrees on (brokers still joining report none). Brokers that disagree
// record nothing: which of two metadata logs is the cluster is for a
// person to say (Degraded says so), not for whichever answered first.
func recordedClusterID(recorded string, brokers []brokerObservation) string {
	if recorded != "" {
		return recorded
	}
	ids := reportedClusterIDs(brokers)
	if len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// reportedClusterIDs are the distinct non-empty cluster ids the answering
// brokers report, sorted.
func reportedClusterIDs(brokers []brokerObservation) []string {
	var ids []string
	for _, b := range brokers {
		if b.err == nil && b.status.ClusterID != "" && !slices.Contains(ids, b.status.ClusterID) {
			ids = append(ids, b.status.ClusterID)
		}
	}
	slices.Sort(ids)
	return ids
}

// foreign reports whether b answered as a member of another cluster than
// the recorded one (a broker that reports no id yet is not foreign).
func foreign(b brokerObservation, clusterID string) bool {
	return b.err == nil && clusterID != "" && b.status.ClusterID != "" && b.status.ClusterID != clusterID
}

// removed reports whether b answered as a broker the cluster removed for
// good (it came back with the data directory of a member taken out): it
// stays up to say so, but serves nothing.
func removed(b brokerObservation) bool {
	return b.err == nil && b.status.Removed
}

// members are the brokers that answered and belong to the recorded
// cluster (or report no id, or none is recorded): the ones whose leader,
// configuration, slots and counts describe this cluster. A broker of
// another metadata log may hold slot Leases of the same names, but what it
// serves is not this cluster's; a removed broker is in no metadata log at
// all.
func members(o clusterObservation) []brokerObservation {
	var out []brokerObservation
	for _, b := range o.brokers {
		if b.err == nil && !foreign(b, o.clusterID) && !removed(b) {
			out = append(out, b)
		}
	}
	return out
}

// removedBrokers are the brokers that answered as removed, in ordinal
// order.
func removedBrokers(brokers []brokerObservation) []brokerObservation {
	var out []brokerObservation
	for _, b := range brokers {
		if removed(b) {
			out = append(out, b)
		}
	}
	return out
}

// removedTag is how the MemberRemoved message names a removed broker's
// member: a token of its own (a member id inside parentheses), so that
// whether a message already named a broker is not fooled by demo-1 being
// the start of demo-10.
func removedTag(b brokerObservation) string { return "(member " + selfID(b) + ")" }

// maxProblem is how much of each removed broker's own account the
// MemberRemoved message quotes.
const maxProblem = 300

// memberRemoved says which brokers the cluster removed for good, that
// they serve nothing and what to do; "" when none is. The message is a
// function of the removed brokers alone, so it changes only when they do.
func memberRemoved(o clusterObservation) string {
	rm := removedBrokers(o.brokers)
	if len(rm) == 0 {
		return ""
	}
	var named, pods, pvcs, says []string
	for _, b := range rm {
		named = append(named, b.pod+" "+removedTag(b))
		pods = append(pods, b.pod)
		pvcs = append(pvcs, resources.DataVolumeName+"-"+b.pod)
		if b.status.Problem != "" {
			says = append(says, fmt.Sprintf("%s says: %s", b.pod, truncate(b.status.Problem, maxProblem)))
		}
	}
	var msg string
	if len(rm) == 1 {
		msg = fmt.Sprintf("broker %s was removed from the cluster for good and serves nothing (no metadata log, no slots, not ready): "+
			"it came back with the data directory of a member taken out (by a recovery of the metadata log, say), and is never let back in with it. "+
			"To have it join again as a new member, set its data directory aside or wipe it: delete its PVC, then its pod "+
			"(kubectl delete pvc %s --wait=false && kubectl delete pod %s), and the StatefulSet recreates both, empty",
			named[0], pvcs[0], pods[0])
	} else {
		msg = fmt.Sprintf("brokers %s were removed from the cluster for good and serve nothing (no metadata log, no slots, not ready): "+
			"they came back with the data directories of members taken out (by a recovery of the metadata log, say), and are never let back in with them. "+
			"To have them join again as new members, set their data directories aside or wipe them: delete their PVCs, then their pods "+
			"(kubectl delete pvc %s --wait=false && kubectl delete pod %s), and the StatefulSet recreates them, empty",
			strings.Join(named, ", "), strings.Join(pvcs, " "), strings.Join(pods, " "))
	}
	if len(says) > 0 {
		msg += ". " + strings.Join(says, "; ")
	}
	return msg
}

// newlyRemoved are the removed brokers a previous MemberRemoved message
// did not name.
func newlyRemoved(o clusterObservation, previous string) []string {
	var out []string
	for _, b := range removedBrokers(o.brokers) {
		if !strings.Contains(previous, removedTag(b)) {
			out = append(out, b.pod)
		}
	}
	return out
}

// clusterIDMismatch says which brokers report a cluster id other than the
// recorded one, or, before one is recorded, that the brokers report
// different ids; "" when neither.
func clusterIDMismatch(o clusterObservation) string {
	if o.clusterID == "" {
		ids := reportedClusterIDs(o.brokers)
		if len(ids) < 2 {
			return ""
		}
		var parts []string
		for _, b := range o.brokers {
			if b.err == nil && b.status.ClusterID != "" {
				parts = append(parts, fmt.Sprintf("%s reports %s", b.pod, b.status.ClusterID))
			}
		}
		return fmt.Sprintf("the brokers belong to %d different metadata logs (%s): no cluster id is recorded until they agree, and a broker on an empty data directory is not told which one to join",
			len(ids), strings.Join(parts, ", "))
	}
	var odd []string
	for _, b := range o.brokers {
		if foreign(b, o.clusterID) {
			odd = append(odd, fmt.Sprintf("%s reports cluster id %s", b.pod, b.status.ClusterID))
		}
	}
	if len(odd) == 0 {
		return ""
	}
	return fmt.Sprintf("%s, not the recorded %s (status.clusterId): %s to another metadata log (bootstrapped again from an empty data directory, or a volume of another cluster) and %s for no leader and no slot",
		strings.Join(odd, "; "), o.clusterID, plural(len(odd), "it belongs", "they belong"), plural(len(odd), "counts", "count"))
}

// metadataLeader is the leader the brokers report; when they disagree (an
// election under way), the one most of them name.
func metadataLeader(brokers []brokerObservation) string {
	votes := map[string]int{}
	best := ""
	for _, b := range brokers {
		if b.err != nil || b.status.Leader == "" {
			continue
		}
		l := b.status.Leader
		votes[l]++
		if votes[l] > votes[best] || (votes[l] == votes[best] && l < best) {
			best = l
		}
	}
	return best
}

// selfID is the id a broker goes by in the metadata log: its member id,
// else (a broker that does not report one) its node id, else its pod.
func selfID(b brokerObservation) string {
	switch {
	case b.status.MemberID != "":
		return b.status.MemberID
	case b.status.NodeID != "":
		return b.status.NodeID
	}
	return b.pod
}

// leaderBroker is the answering broker that leads the metadata log (it
// says it is the leader and is the one the brokers name), if any.
func leaderBroker(brokers []brokerObservation, leader string) (brokerObservation, bool) {
	for _, b := range brokers {
		if b.err == nil && leader != "" && b.status.RaftState == "Leader" && selfID(b) == leader {
			return b, true
		}
	}
	return brokerObservation{}, false
}

// configuration is the metadata log's voters and non-voters, sorted: as
// the leader sees them, whose configuration is the one being committed;
// else as the first broker that reports one.
func configuration(brokers []brokerObservation, leader string) (voters, nonVoters []string) {
	from, ok := leaderBroker(brokers, leader)
	if !ok || len(from.status.Voters) == 0 {
		ok = false
		for _, b := range brokers {
			if b.err == nil && len(b.status.Voters) > 0 {
				from, ok = b, true
				break
			}
		}
	}
	if !ok {
		return nil, nil
	}
	voters, nonVoters = slices.Clone(from.status.Voters), slices.Clone(from.status.NonVoters)
	slices.Sort(voters)
	slices.Sort(nonVoters)
	return voters, nonVoters
}

// underReplicated is how many committed objects lack copies. Every broker
// counts the whole cluster's objects from its own copy of the metadata
// log, so the counts are not added up (each object would count once per
// broker): the leader's count, whose log is the freshest, or, when the
// leader does not report one, the highest reported (a person would rather
// look at a repair that is done than miss one that is not). nil when no
// broker reports it.
func underReplicated(brokers []brokerObservation, leader string) *int32 {
	if b, ok := leaderBroker(brokers, leader); ok && b.status.UnderReplicated != nil {
		n := *b.status.UnderReplicated
		return &n
	}
	var out *int32
	for _, b := range brokers {
		if b.err == nil && b.status.UnderReplicated != nil && (out == nil || *b.status.UnderReplicated > *out) {
			n := *b.status.UnderReplicated
			out = &n
		}
	}
	return out
}

// slotsHeld lists the brokers that report their slots, by name (a removed
// broker holds none, whatever it says).
func slotsHeld(brokers []brokerObservation) []streamsv1alpha1.BrokerSlots {
	var out []streamsv1alpha1.BrokerSlots
	for _, b := range brokers {
		if b.err == nil && b.status.SlotsHeld != nil && !removed(b) {
			out = append(out, streamsv1alpha1.BrokerSlots{Broker: b.pod, Slots: *b.status.SlotsHeld})
		}
	}
	slices.SortFunc(out, func(a, b streamsv1alpha1.BrokerSlots) int { return strings.Compare(a.Broker, b.Broker) })
	return out
}

// slotShare is how evenly the full members hold the slots: the most and
// least any holds. Full members are the brokers that answered, belong to
// the cluster and report their slots, and are neither draining nor
// removed (a draining broker hands its slots off on purpose).
type slotShare struct {
	// reported: at least two full members report their slots.
	reported bool
	// lo and hi are the least and most slots a full member holds, by
	// loPod and hiPod.
	lo, hi       int32
	loPod, hiPod string
}

// even: the shares differ by at most one slot (the brokers' own rule for
// when to stop handing slots over).
func (s slotShare) even() bool { return !s.reported || s.hi-s.lo <= 1 }

// String words an uneven share for a condition.
func (s slotShare) String() string {
	return fmt.Sprintf("%s holds %d %s, %s %d", s.hiPod, s.hi, plural(int(s.hi), "slot", "slots"), s.loPod, s.lo)
}

// share measures the full members' shares among brokers (members' output).
func share(brokers []brokerObservation) slotShare {
	var s slotShare
	n := 0
	for _, b := range brokers {
		if b.err != nil || b.status.SlotsHeld == nil || removed(b) || b.status.Drain.Phase != brokeradmin.DrainNone {
			continue
		}
		k := *b.status.SlotsHeld
		if n == 0 || k < s.lo {
			s.lo, s.loPod = k, b.pod
		}
		if n == 0 || k > s.hi {
			s.hi, s.hiPod = k, b.pod
		}
		n++
	}
	s.reported = n > 1
	return s
}

// slotCoverage is how many of the cluster's slots the answering brokers
// hold between them.
type slotCoverage struct {
	// reported: some broker reports its slots (every cluster-mode broker
	// does; a lone broker of an image without cluster mode holds every
	// slot itself and reports none).
	reported bool
	// held is how many distinct slots of 0..slots-1 have a holder that
	// answered; want is the slot count.
	held, want int
}

// coverage counts the slots held by brokers, each slot once: a slot two
// brokers list (one of them has not noticed yet that it lost it) is one
// slot, and a slot beyond the count is none. A broker that reports a count
// without the list adds its count. Brokers are counted once each, by pod.
func coverage(brokers []brokerObservation, slots int32) slotCoverage {
	c := slotCoverage{want: int(slots)}
	seen := map[int32]bool{}
	pods := map[string]bool{}
	counted := 0
	for _, b := range brokers {
		if b.err != nil || b.status.SlotsHeld == nil || pods[b.pod] {
			continue
		}
		pods[b.pod] = true
		c.reported = true
		if len(b.status.Slots) == 0 {
			counted += int(*b.status.SlotsHeld)
			continue
		}
		for _, s := range b.status.Slots {
			if s >= 0 && s < slots {
				seen[s] = true
			}
		}
	}
	c.held = min(len(seen)+counted, c.want)
	return c
}

// failsafe says which brokers serve through an API server outage on
// failsafe rounds, and since when; "" when none reports it.
func failsafe(o clusterObservation) string {
	var on []string
	for _, b := range o.brokers {
		if b.err == nil && !b.status.FailsafeSince.IsZero() && !removed(b) {
			on = append(on, fmt.Sprintf("%s (since %s, %d rounds)", b.pod, b.status.FailsafeSince.UTC().Format(time.RFC3339), b.status.FailsafeRounds))
		}
	}
	if len(on) == 0 {
		return ""
	}
	slices.Sort(on)
	return fmt.Sprintf("brokers %s cannot reach the API server and serve their slots on failsafe: every member confirmed over the peer network that it cannot reach it either. "+
		"Appends go on, but no slot can move: a broker that stops now has its slots wait for the API server. Check the brokers' route to the API server and the control plane's health",
		strings.Join(on, ", "))
}
