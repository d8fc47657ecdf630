package clusterharness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// waitBrokerReady polls broker i's /readyz until it answers 200, and
// fails at once if the process exits meanwhile.
func (c *Cluster) waitBrokerReady(i int) error {
	b := c.brokers[i]
	done, result := b.exited()
	if done == nil {
		return fmt.Errorf("%s: no process", b.Name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := Poll(ctx, c.opts.ReadyTimeout, b.Name+" /readyz", func(ctx context.Context) error {
		return Ready(ctx, b.URL())
	})
	select {
	case <-done:
		return fmt.Errorf("%s exited before it was ready (%v)", b.Name, result())
	default:
	}
	return err
}

// WaitReady waits until every broker that runs unpaused answers /readyz
// with 200 and, in cluster mode, until ClusterReady holds.
func (c *Cluster) WaitReady() error {
	for i, b := range c.brokers {
		if !b.Serving() {
			continue
		}
		if err := c.waitBrokerReady(i); err != nil {
			return err
		}
	}
	if !c.opts.Cluster {
		c.readNodes() // nothing to agree on; keeps the ids current
		return nil
	}
	return Poll(context.Background(), c.opts.ReadyTimeout, "cluster ready", c.ClusterReady)
}

// readNodes asks every serving broker for its node status, recording the
// cluster id the first one reports.
func (c *Cluster) readNodes() (map[int]NodeInfo, error) {
	out := map[int]NodeInfo{}
	var errs []error
	for i, b := range c.brokers {
		if !b.Serving() {
			continue
		}
		n, err := GetNode(context.Background(), b.URL())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.recordClusterID(n.ClusterID)
		out[i] = n
	}
	return out, errors.Join(errs...)
}

// ClusterReady is the harness's readiness of a whole cluster, the one the
// trials wait for after healing: every broker that runs unpaused answers
// /readyz with 200 and its node status, they all name the same metadata
// leader, and — once brokers report slotsHeld — the slots they hold add
// up to Options.Slots (every slot has a live holder) with no slot listed
// by two brokers.
func (c *Cluster) ClusterReady(ctx context.Context) error {
	for _, b := range c.brokers {
		if !b.Serving() {
			continue
		}
		if err := Ready(ctx, b.URL()); err != nil {
			return err
		}
	}
	nodes, err := c.readNodes()
	if err != nil {
		return err
	}
	leader := ""
	held, reported := 0, false
	owner := map[int]string{}
	for i, n := range nodes {
		if n.Leader == "" {
			return fmt.Errorf("%s knows no metadata leader (raftState %q)", c.brokers[i].Name, n.RaftState)
		}
		if leader == "" {
			leader = n.Leader
		} else if n.Leader != leader {
			return fmt.Errorf("brokers disagree on the leader: %q and %q (%s)", leader, n.Leader, c.brokers[i].Name)
		}
		count, list, ok := n.Slots()
		if !ok {
			continue
		}
		reported = true
		held += count
		for _, s := range list {
			if o, dup := owner[s]; dup {
				return fmt.Errorf("slot %d is held by %s and %s", s, o, c.brokers[i].Name)
			}
			owner[s] = c.brokers[i].Name
		}
	}
	if reported && held != c.opts.Slots {
		return fmt.Errorf("brokers hold %d slots, want %d", held, c.opts.Slots)
	}
	// The metadata log has its voters: a cluster whose joiners are not
	// promoted yet loses its quorum with its first voter.
	serving := 0
	for _, b := range c.brokers {
		if b.Serving() {
			serving++
		}
	}
	for i, n := range nodes {
		if n.Leader != n.MemberID || n.MemberID == "" {
			continue
		}
		if want := voterTarget(serving); len(n.Voters()) < want {
			return fmt.Errorf("the leader %s counts %d voters, want %d", c.brokers[i].Name, len(n.Voters()), want)
		}
	}
	return nil
}

// voterTarget is how many voters n members keep (broker/membership's rule).
func voterTarget(n int) int {
	switch {
	case n >= 5:
		return 5
	case n >= 3:
		return 3
	case n >= 1:
		return 1
	}
	return 0
}

// WaitFor polls cond until it holds, for at most timeout.
func (c *Cluster) WaitFor(timeout time.Duration, what string, cond func(context.Context) error) error {
	return Poll(context.Background(), timeout, what, cond)
}
