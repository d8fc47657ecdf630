package clusterharness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/client"
)

// ownerAskTimeout bounds one broker's answer: a paused or isolated broker
// must not hold the question up for the caller's whole deadline.
const ownerAskTimeout = 3 * time.Second

// Owner returns the index of the broker that owns partition p of the named
// stream; -1 and an error when no broker names a known owner.
//
// Every serving broker is asked, and the answer with the highest epoch wins:
// a broker cut from its peers (or paused) still holds its last view of the
// metadata, which names the old owner until it catches up, while the
// majority already knows the new owner and its higher epoch.
func (c *Cluster) Owner(ctx context.Context, name string, p int) (int, error) {
	i, _, err := c.OwnerAndEpoch(ctx, name, p)
	return i, err
}

// OwnerAndEpoch is Owner with the epoch of the partition's last open: a
// new open (a failover, a hand-off, a recovery) raises it.
func (c *Cluster) OwnerAndEpoch(ctx context.Context, name string, p int) (int, int64, error) {
	var (
		mu      sync.Mutex
		best    = ownerAnswer{owner: -1, epoch: -1}
		last    error
		wg      sync.WaitGroup
		anyOpen bool
	)
	for _, b := range c.brokers {
		if !b.Serving() {
			continue
		}
		anyOpen = true
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			a := c.askOwner(ctx, url, name, p)
			mu.Lock()
			defer mu.Unlock()
			if a.err != nil {
				last = a.err
				return
			}
			if a.epoch > best.epoch {
				best = a
			}
		}(b.URL())
	}
	wg.Wait()
	if best.owner >= 0 {
		return best.owner, best.epoch, nil
	}
	if last == nil {
		if anyOpen {
			last = fmt.Errorf("%s partition %d: no broker names an owner", name, p)
		} else {
			last = fmt.Errorf("no broker serves")
		}
	}
	return -1, -1, last
}

// ownerAnswer is one broker's view of a partition's owner.
type ownerAnswer struct {
	owner int
	epoch int64
	err   error
}

func (c *Cluster) askOwner(ctx context.Context, url, name string, p int) (a ownerAnswer) {
	a.owner = -1
	cl, err := client.New(url, c.ClientOptions()...)
	if err != nil {
		a.err = err
		return a
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, ownerAskTimeout)
	defer cancel()
	info, err := cl.GetStream(ctx, name)
	if err != nil {
		a.err = fmt.Errorf("%s: %w", url, err)
		return a
	}
	if p >= len(info.Partitions) {
		a.err = fmt.Errorf("%s has %d partitions, not %d", name, len(info.Partitions), p+1)
		return a
	}
	i := c.Index(info.Partitions[p].Owner)
	if i < 0 {
		a.err = fmt.Errorf("%s partition %d: owner %q is no broker of the cluster", name, p, info.Partitions[p].Owner)
		return a
	}
	a.owner, a.epoch = i, info.Partitions[p].Epoch
	return a
}
