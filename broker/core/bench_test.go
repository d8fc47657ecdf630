package core

import (
	"context"

	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// BenchmarkAppend measures durable, acknowledged appends of 1 KiB records
// through the group commit, at several concurrencies: each acknowledged
// append has been fdatasynced in an object and committed in the metadata
// log.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct{ writers, batch, streams, inflight int }{{1, 1, 1, 1}, {64, 1, 1, 1}, {64, 1, 1, 4}, {64, 1, 64, 1}, {8, 100, 8, 1}, {8, 100, 8, 4}} {
		b.Run(fmt.Sprintf("writers=%d/batch=%d/streams=%d/inflight=%d", c.writers, c.batch, c.streams, c.inflight), func(b *testing.B) {
			m := NewMetrics(nil)
			br, err := Open(Config{DataDir: b.TempDir(), Metrics: m, CommitsInFlight: c.inflight})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			ctx := context.Background()
			for s := 0; s < c.streams; s++ {
				if _, _, err := br.Create(ctx, fmt.Sprintf("s%d", s), node.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			batch := make([]stream.RecordValue, c.batch)
			for i := range batch {
				batch[i] = stream.RecordValue{Payload: make([]byte, 1024)}
			}
			b.SetBytes(int64(1024 * c.batch))
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / c.writers
			for w := 0; w < c.writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("s%d", w%c.streams)
					for i := 0; i < per; i++ {
						if _, err := br.Append(ctx, name, batch, node.AppendOptions{Partition: -1}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*c.writers*c.batch)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(mean(m.FlushAppends), "appends/flush")
			b.ReportMetric(mean(m.FsyncSeconds)*1e6, "µs/object-sync")
			b.ReportMetric(mean(m.CommitSeconds)*1e6, "µs/commit")
		})
	}
}

func mean(h prometheus.Histogram) float64 {
	var d dto.Metric
	if err := h.Write(&d); err != nil || d.GetHistogram().GetSampleCount() == 0 {
		return 0
	}
	return d.GetHistogram().GetSampleSum() / float64(d.GetHistogram().GetSampleCount())
}
