package clusterharness

import (
	"context"
	"fmt"

	"github.com/picomq/picomq/broker/client"
)

// Owner returns the index of the broker that owns partition p of the named
// stream, asking the first broker that serves; -1 and an error when no
// broker names a known owner.
func (c *Cluster) Owner(ctx context.Context, name string, p int) (int, error) {
	var last error
	for _, b := range c.brokers {
		if !b.Serving() {
			continue
		}
		cl, err := client.New(b.URL())
		if err != nil {
			return -1, err
		}
		info, err := cl.GetStream(ctx, name)
		cl.Close()
		if err != nil {
			last = err
			continue
		}
		if p >= len(info.Partitions) {
			return -1, fmt.Errorf("%s has %d partitions, not %d", name, len(info.Partitions), p+1)
		}
		if i := c.Index(info.Partitions[p].Owner); i >= 0 {
			return i, nil
		}
		last = fmt.Errorf("%s partition %d: owner %q is no broker of the cluster", name, p, info.Partitions[p].Owner)
	}
	if last == nil {
		last = fmt.Errorf("no broker serves")
	}
	return -1, last
}
