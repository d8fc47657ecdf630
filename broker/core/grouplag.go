package core

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/meta"
)

// GroupPosition is a consumer group's committed position in one
// partition, beside the partition's end.
type GroupPosition struct {
	Stream    string
	Partition int
	Group     string
	Next      uint64 // the offset the group reads next
	End       uint64 // the partition's next offset to assign
}

// Lag is how many records the group has yet to read (0 when it committed
// at or past the end).
func (p GroupPosition) Lag() uint64 {
	if p.End > p.Next {
		return p.End - p.Next
	}
	return 0
}

// GroupPositions lists the committed positions of the partitions mine
// says this broker reports (by the partition's owner: in a cluster, the
// broker that holds it open reports it, so that each series comes from
// one broker), sorted by stream, partition and group. The end is the
// journal's acknowledged tail, as reads see it.
func (b *Broker) GroupPositions(mine func(owner string) bool) []GroupPosition {
	var out []GroupPosition
	b.fsm.View(func(s *meta.State) {
		for name, e := range s.Names {
			if e.Deleted {
				continue
			}
			for p, id := range e.Streams {
				in, ok := s.Streams[id]
				if !ok || len(in.Groups) == 0 || !mine(in.Owner) {
					continue
				}
				_, end := b.tail.past(in)
				for g, next := range in.Groups {
					out = append(out, GroupPosition{Stream: name, Partition: p, Group: g, Next: next, End: end})
				}
			}
		}
	})
	slices.SortFunc(out, func(a, b GroupPosition) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Group, b.Group))
	})
	return out
}

// DefaultGroupLagMaxSeries bounds the consumer-group series one broker
// exports: two gauges per group and partition.
const DefaultGroupLagMaxSeries = 10_000

// groupLagCollector exports, at each scrape, every consumer group's
// committed offset and lag in the partitions this broker reports, up to
// maxSeries positions (the first by stream, partition and group); the rest
// are counted as dropped.
type groupLagCollector struct {
	b         *Broker
	mine      func(owner string) bool
	maxSeries int
	committed *prometheus.Desc
	lag       *prometheus.Desc
	dropped   prometheus.Counter
}

// NewGroupLagCollector is the collector of b's consumer-group positions:
// a lone broker reports every partition; in a cluster each broker reports
// the partitions it holds open (their last opener), so that a series has
// one source and the cluster's total is a sum. A partition never opened
// (never written: its lag is nil) is reported by none.
func NewGroupLagCollector(b *Broker, maxSeries int) prometheus.Collector {
	if maxSeries <= 0 {
		maxSeries = DefaultGroupLagMaxSeries
	}
	mine := func(string) bool { return true }
	if b.cfg.Cluster != nil {
		self := b.self()
		mine = func(owner string) bool { return owner == self }
	}
	labels := []string{"stream", "group", "partition"}
	return &groupLagCollector{
		b: b, mine: mine, maxSeries: maxSeries,
		committed: prometheus.NewDesc("picomq_consumer_group_committed_offset",
			"The offset a consumer group reads next in a partition (its last commit), reported by the broker holding the partition open.", labels, nil),
		lag: prometheus.NewDesc("picomq_consumer_group_lag",
			"Records a consumer group has yet to read in a partition: the partition's end minus the group's committed offset.", labels, nil),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "picomq_consumer_group_lag_series_dropped_total",
			Help: "Consumer-group positions left out of a scrape because the broker reports at most --group-lag-max-series of them.",
		}),
	}
}

func (c *groupLagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.committed
	ch <- c.lag
	c.dropped.Describe(ch)
}

func (c *groupLagCollector) Collect(ch chan<- prometheus.Metric) {
	ps := c.b.GroupPositions(c.mine)
	if len(ps) > c.maxSeries {
		c.dropped.Add(float64(len(ps) - c.maxSeries))
		ps = ps[:c.maxSeries]
	}
	for _, p := range ps {
		part := strconv.Itoa(p.Partition)
		ch <- prometheus.MustNewConstMetric(c.committed, prometheus.GaugeValue, float64(p.Next), p.Stream, p.Group, part)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(p.Lag()), p.Stream, p.Group, part)
	}
	c.dropped.Collect(ch)
}
