package metalog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// countingStore counts the leader's writes to its log store. Each StoreLogs
// call is one WAL write and one fsync; so commits is the fsync count of the
// run.
type countingStore struct {
	raft.LogStore
	commits atomic.Int64
	entries atomic.Int64
}

func (c *countingStore) StoreLogs(logs []*raft.Log) error {
	c.commits.Add(1)
	c.entries.Add(int64(len(logs)))
	return c.LogStore.StoreLogs(logs)
}

func (c *countingStore) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

// BenchmarkApply measures durable Apply throughput on one node, with one
// proposer and with 64 concurrent ones.
//
// What it shows is group commit. With one proposer every Apply is its own
// WAL write — one fsync — so applies/s is bounded by the disk's
// fsync latency (entries/commit = 1). With 64 proposers the leader loop
// drains every queued proposal (up to MaxAppendEntries) into one write,
// so the same fsync covers tens of entries (entries/commit ~ the
// number of proposers waiting) and applies/s grows nearly as much. No timer
// or sleep is involved either way: a batch is simply whatever queued up
// during the previous fsync.
//
//	go test -run '^$' -bench BenchmarkApply -benchtime 3s ./broker/metalog/
func BenchmarkApply(b *testing.B) {
	for _, proposers := range []int{1, 64} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			var store *countingStore
			cfg := testConfig(b, b.TempDir())
			cfg.LogLevel = "warn"
			cfg.wrapLogStore = func(s raft.LogStore) raft.LogStore {
				store = &countingStore{LogStore: s}
				return store
			}
			l := open(b, cfg, newToyFSM())
			cmd := mustCmd("add", "k", 1)
			commits0, entries0 := store.commits.Load(), store.entries.Load()

			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range proposers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := l.Apply(context.Background(), cmd); err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatalf("Apply: %v", err)
			}

			commits := store.commits.Load() - commits0
			entries := store.entries.Load() - entries0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "applies/s")
			if commits > 0 {
				b.ReportMetric(float64(entries)/float64(commits), "entries/commit")
			}
		})
	}
}
