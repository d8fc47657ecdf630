package stream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// FuzzPartitionOf checks PartitionOf against the standard library's FNV-1a:
// always inside [0, partitions), partitions below one read as one.
func FuzzPartitionOf(f *testing.F) {
	f.Add([]byte(""), 1)
	f.Add([]byte("a"), 7)
	f.Add([]byte("order-42"), 64)
	f.Add([]byte{0, 0xff, 0x80}, 3)
	f.Add([]byte("k"), 0)
	f.Add([]byte("k"), -5)
	f.Add([]byte("k"), 1<<40)
	f.Fuzz(func(t *testing.T, key []byte, partitions int) {
		got := stream.PartitionOf(key, partitions)
		n := max(partitions, 1)
		if got < 0 || got >= n {
			t.Fatalf("PartitionOf(%q, %d) = %d, outside [0, %d)", key, partitions, got, n)
		}
		if want := int(uint64(fnvRef(key)) % uint64(n)); got != want {
			t.Fatalf("PartitionOf(%q, %d) = %d, want %d", key, partitions, got, want)
		}
	})
}

// FuzzPolicyValidate checks that Validate refuses exactly the policies the
// documentation refuses, naming the first wrong field, and that an accepted
// policy normalizes to one every engine can use.
func FuzzPolicyValidate(f *testing.F) {
	f.Add(0, 0, int64(0), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Add(3, 1024, int64(time.Hour), int64(1<<30), int64(1<<20), int64(time.Second), int64(1<<26), int64(time.Minute))
	f.Add(-1, 0, int64(0), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Add(0, 0, int64(0), int64(0), int64(0), int64(time.Second), int64(0), int64(0))
	f.Add(0, 100, int64(0), int64(0), int64(99), int64(0), int64(0), int64(0))
	f.Add(0, 0, int64(0), int64(0), int64(1<<20-1), int64(0), int64(0), int64(0))
	f.Add(0, 0, int64(0), int64(0), int64(0), int64(0), int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, partitions, maxRecord int, retainFor, retainBytes, maxBytes, block, segment, compact int64) {
		p := stream.PolicyValue{
			Partitions: partitions, MaxRecordBytes: maxRecord, RetainFor: time.Duration(retainFor),
			RetainBytes: retainBytes, MaxBytes: maxBytes, BlockTimeout: time.Duration(block),
			SegmentBytes: segment, CompactAfter: time.Duration(compact),
		}
		// The refusal the documentation predicts, in declaration order.
		oneRecord := int64(maxRecord)
		if maxRecord == 0 {
			oneRecord = int64(stream.DefaultMaxRecordBytes)
		}
		want := ""
		switch {
		case partitions < 0:
			want = "Partitions"
		case maxRecord < 0:
			want = "MaxRecordBytes"
		case retainFor < 0:
			want = "RetainFor"
		case retainBytes < 0:
			want = "RetainBytes"
		case maxBytes < 0:
			want = "MaxBytes"
		case block < 0:
			want = "BlockTimeout"
		case segment < 0:
			want = "SegmentBytes"
		case compact < 0:
			want = "CompactAfter"
		case block > 0 && maxBytes == 0:
			want = "BlockTimeout"
		case maxBytes > 0 && maxBytes < oneRecord:
			want = "MaxBytes"
		}
		err := p.Validate()
		if want == "" {
			if err != nil {
				t.Fatalf("%+v refused: %v", p, err)
			}
			n := p.Normalized()
			if n.Partitions < 1 || n.MaxRecordBytes < 1 || n.SegmentBytes < 1 {
				t.Fatalf("Normalized(%+v) = %+v has a zero left", p, n)
			}
			if n.Normalized() != n || n.Validate() != nil {
				t.Fatalf("Normalized(%+v) = %+v is not a fixed point", p, n)
			}
			if n.MaxBytes > 0 && n.MaxBytes < int64(n.MaxRecordBytes) {
				t.Fatalf("accepted %+v fits no record", n)
			}
			return
		}
		if !errors.Is(err, stream.StreamMisconfigured) || field(err, "field") != want {
			t.Fatalf("%+v: Validate() = %v, want STREAM_MISCONFIGURED field=%s", p, err, want)
		}
	})
}
