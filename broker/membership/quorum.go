package membership

import (
	"context"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/metalog"
)

// QuorumAtRisk: taking a server out of the metadata log's configuration now
// would leave voters of which no majority answers, so the cluster could
// commit nothing until one of the silent ones came back. The change waits
// (a drain's removal, an old incarnation's replacement) and is retried.
var QuorumAtRisk = errs.Static(0x00_10_06_04, "QUORUM_AT_RISK",
	"Taking this member out now would leave the metadata log without a majority that answers; waiting for the other voters",
	"broker/membership: a voter leaves the configuration only while a majority of the voters that stay answer (etcd's strict reconfiguration check refuses the same); the fields count them",
	503, 75)

// probeTimeout bounds one peer's answer to a quorum probe: a paused
// process holds its socket and answers nothing.
const probeTimeout = 2 * time.Second

// majorityWithout reports whether the voters of voters other than leaving
// keep a majority that answers: answers says who does. Taking a non-voter
// out changes no majority.
func majorityWithout(voters []string, answers func(id string) bool, leaving string) (up, n int, ok bool) {
	isVoter := false
	for _, v := range voters {
		if v == leaving {
			isVoter = true
			continue
		}
		n++
		if answers(v) {
			up++
		}
	}
	return up, n, !isVoter || 2*up > n
}

// checkRemovable refuses (QuorumAtRisk) to take server id out of conf while
// the voters that stay have no majority answering this member now: each
// is asked for its status, in parallel, within probeTimeout. This member
// counts as answering itself.
func (m *Member) checkRemovable(ctx context.Context, conf metalog.Configuration, id string) error {
	self := m.id.ID()
	var mu sync.Mutex
	answered := map[string]bool{self: true}
	var wg sync.WaitGroup
	for _, s := range conf.Servers {
		if s.Suffrage != metalog.Voter || s.ID == id || s.ID == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			_, err := m.status(cctx, s.Address)
			mu.Lock()
			answered[s.ID] = err == nil
			mu.Unlock()
		}()
	}
	wg.Wait()
	up, n, ok := majorityWithout(conf.Voters(), func(v string) bool { return answered[v] }, id)
	if ok {
		return nil
	}
	return QuorumAtRisk.With("server", id, "votersStaying", n, "answering", up)
}

// CheckLeaveKeepsQuorum refuses (QuorumAtRisk) while this member's
// leaving the configuration would leave the voters that stay without a
// majority answering: a drain holds its last step until they do, so that
// it can still be cancelled rather than take the cluster's quorum with it.
func (m *Member) CheckLeaveKeepsQuorum(ctx context.Context) error {
	b := m.broker()
	if b == nil {
		return QuorumAtRisk.With("reason", "the broker is starting")
	}
	conf, err := m.metaLog().Configuration(ctx)
	if err != nil {
		return QuorumAtRisk.Wrap(err, "reason", "the configuration cannot be read")
	}
	return m.checkRemovable(ctx, conf, m.id.ID())
}
