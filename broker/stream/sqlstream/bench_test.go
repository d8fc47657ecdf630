package sqlstream_test

import (
	"fmt"
	"testing"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/sqlstream/sqltest"
)

const benchRecordBytes = 1024 // 1 KiB records, key and payload together, as the memory engine's benchmark

// BenchmarkAppend measures Append of 1 KiB unkeyed records in batches of 1
// and 100, each batch its own transaction, on SQLite (a WAL file,
// synchronous FULL: every commit is fsynced) and PostgreSQL (the server of
// PICOMQ_TEST_POSTGRES_URL; hack/postgres.sh starts it with fsync off
// unless PICOMQ_PG_DURABLE=1). It reports appends/s — batches — and
// records/s.
//
//	go test -run '^$' -bench Append -benchtime 2s ./broker/stream/sqlstream/
func BenchmarkAppend(b *testing.B) {
	for _, d := range sqltest.Dialects {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/batch=%d", d, n), func(b *testing.B) {
				db := sqltest.Open(b, d)
				s := open(b, db, "bench", stream.PolicyValue{})
				batch := make([]stream.RecordValue, n)
				for i := range batch {
					batch[i].Payload = make([]byte, benchRecordBytes)
				}
				b.SetBytes(int64(n * benchRecordBytes))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Append(b.Context(), batch); err != nil {
						b.Fatal(err)
					}
				}
				secs := b.Elapsed().Seconds()
				b.ReportMetric(float64(b.N)/secs, "appends/s")
				b.ReportMetric(float64(b.N*n)/secs, "records/s")
			})
		}
	}
}
