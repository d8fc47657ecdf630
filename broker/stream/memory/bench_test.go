package memory_test

import (
	"fmt"
	"testing"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/memory"
)

const recordBytes = 1024 // 1 KiB records: key and payload together

// batchOf returns n unkeyed records of recordBytes each.
func batchOf(n int) []stream.RecordValue {
	records := make([]stream.RecordValue, n)
	for i := range records {
		records[i].Payload = make([]byte, recordBytes)
	}
	return records
}

// BenchmarkAppend measures Append throughput of 1 KiB records in batches of
// 1 and 100. A 64 MiB RetainBytes keeps the heap bounded however long the
// benchmark runs, so the numbers include retention's trimming, as a
// long-lived stream's would.
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s, err := memory.New(stream.PolicyValue{RetainBytes: 64 << 20}, memory.Options{})
			if err != nil {
				b.Fatal(err)
			}
			batch := batchOf(n)
			b.SetBytes(int64(n * recordBytes))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Append(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead measures Read throughput of 1 KiB records, max 1 and 100, over
// a partition of 16 MiB read round and round.
func BenchmarkRead(b *testing.B) {
	const records = 16 << 10
	s, err := memory.New(stream.PolicyValue{}, memory.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for range records / 100 {
		if _, err := s.Append(b.Context(), batchOf(100)); err != nil {
			b.Fatal(err)
		}
	}
	end := stream.Offset(records / 100 * 100)
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			b.SetBytes(int64(n * recordBytes))
			b.ReportAllocs()
			var from stream.Offset
			for b.Loop() {
				if from+stream.Offset(n) > end {
					from = 0
				}
				es, err := s.Read(b.Context(), 0, from, n)
				if err != nil || len(es) != n {
					b.Fatalf("Read(%d, %d) = %d entries, %v", from, n, len(es), err)
				}
				from += stream.Offset(n)
			}
		})
	}
}
