package stream_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// field returns the field key of err as text, "" when err has no such field.
func field(err error, key string) string {
	v, ok := errs.FieldOf(err, key)
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

func TestStaticsAsDeclared(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err          *errs.Error
		code         errs.Code
		dotted, name string
		status, exit int
		served       int // errs.HTTPStatus, the status a server answers
	}{
		{stream.StreamMisconfigured, stream.CodeStreamMisconfigured, "0.2.38.1", "STREAM_MISCONFIGURED", 0, 78, 400},
		{stream.RecordTooLarge, stream.CodeRecordTooLarge, "0.2.38.2", "RECORD_TOO_LARGE", 413, 78, 413},
		{stream.OffsetTrimmed, stream.CodeOffsetTrimmed, "0.2.38.3", "OFFSET_TRIMMED", 409, 65, 409},
		{stream.OffsetAhead, stream.CodeOffsetAhead, "0.2.38.4", "OFFSET_AHEAD", 409, 65, 409},
		{stream.UnknownPartition, stream.CodeUnknownPartition, "0.2.38.5", "UNKNOWN_PARTITION", 400, 65, 400},
		{stream.InvalidBatchSize, stream.CodeInvalidBatchSize, "0.2.38.6", "INVALID_BATCH_SIZE", 0, 78, 400},
		{stream.StreamFull, stream.CodeStreamFull, "0.2.38.7", "STREAM_FULL", 503, 75, 503},
		{stream.UnknownGroup, stream.CodeUnknownGroup, "0.2.38.8", "UNKNOWN_GROUP", 404, 66, 404},
		{stream.PartitionsMixed, stream.CodePartitionsMixed, "0.2.38.9", "PARTITIONS_MIXED", 400, 65, 400},
		{stream.StreamBackendFailed, stream.CodeStreamBackendFailed, "0.3.94.1", "STREAM_BACKEND_FAILED", 0, 74, 500},
		{stream.StreamDirectoryUnusable, stream.CodeStreamDirectoryUnusable, "0.3.94.2", "STREAM_DIRECTORY_UNUSABLE", 0, 78, 400},
		{stream.SQLStreamMisconfigured, stream.CodeSQLStreamMisconfigured, "0.3.94.3", "SQL_STREAM_MISCONFIGURED", 0, 78, 400},
		{stream.SubscriberMisconfigured, stream.CodeSubscriberMisconfigured, "0.3.94.4", "SUBSCRIBER_MISCONFIGURED", 0, 78, 400},
	} {
		e := c.err
		if e.Code() != c.code || e.Code().String() != c.dotted || e.Name() != c.name ||
			e.DeclaredStatus() != c.status || e.ExitCode() != c.exit || errs.HTTPStatus(e) != c.served {
			t.Errorf("%s: got %s %s %d %d (served %d)", c.name, e.Code(), e.Name(), e.DeclaredStatus(), e.ExitCode(), errs.HTTPStatus(e))
		}
		if e.Message() == "" || e.Detail() == "" {
			t.Errorf("%s: empty message or detail", c.name)
		}
		// Every refusal survives the trip a remote client makes.
		b, err := errs.Marshal(fmt.Errorf("engine: %w", e.With("partition", 3)))
		if err != nil {
			t.Fatal(err)
		}
		back, err := errs.Unmarshal(b)
		if err != nil || !errors.Is(back, c.err) || field(back, "partition") != "3" {
			t.Errorf("%s: round trip gave %v, %v", c.name, back, err)
		}
	}
}

func TestPartitionOf(t *testing.T) {
	t.Parallel()
	// Published FNV-1a 32-bit vectors: the placement may never change.
	for _, c := range []struct {
		key  string
		hash uint32
	}{{"", 0x811c9dc5}, {"a", 0xe40c292c}, {"foobar", 0xbf9cf968}} {
		if got := stream.PartitionOf([]byte(c.key), 1<<31); got != int(c.hash%(1<<31)) {
			t.Errorf("PartitionOf(%q, 2^31) = %d, want %d", c.key, got, c.hash%(1<<31))
		}
		if got := stream.PartitionOf([]byte(c.key), 7); got != int(c.hash%7) {
			t.Errorf("PartitionOf(%q, 7) = %d, want %d", c.key, got, c.hash%7)
		}
	}
	for _, n := range []int{0, -1, -1 << 62} {
		if got := stream.PartitionOf([]byte("a"), n); got != 0 {
			t.Errorf("PartitionOf(a, %d) = %d, want 0 (read as one partition)", n, got)
		}
	}
	if got, want := stream.PartitionOf(nil, 5), int(uint32(0x811c9dc5)%5); got != want {
		t.Errorf("PartitionOf(nil, 5) = %d, want the hash of no bytes, %d", got, want)
	}
}

func TestPolicyZeroValueWorks(t *testing.T) {
	t.Parallel()
	var p stream.PolicyValue
	if err := p.Validate(); err != nil {
		t.Fatalf("zero policy refused: %v", err)
	}
	want := stream.PolicyValue{Partitions: 1, MaxRecordBytes: 1 << 20, SegmentBytes: 64 << 20}
	if got := p.Normalized(); got != want {
		t.Fatalf("Normalized() = %+v, want %+v", got, want)
	}
	if stream.DefaultMaxRecordBytes != 1<<20 || stream.DefaultSegmentBytes != 64<<20 {
		t.Fatal("defaults changed")
	}
	// Normalized keeps what is set, and leaves a negative value to Validate.
	set := stream.PolicyValue{Partitions: 3, MaxRecordBytes: 10, RetainFor: time.Hour, RetainBytes: 5, MaxBytes: 10,
		BlockTimeout: time.Second, SegmentBytes: 7, CompactAfter: time.Minute}
	if got := set.Normalized(); got != set {
		t.Errorf("Normalized changed a set policy: %+v", got)
	}
	if got := (stream.PolicyValue{Partitions: -1}).Normalized().Partitions; got != -1 {
		t.Errorf("Normalized validated: Partitions = %d", got)
	}
}

func TestPolicyRefusedByField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy stream.PolicyValue
		field  string
	}{
		{stream.PolicyValue{Partitions: -1}, "Partitions"},
		{stream.PolicyValue{MaxRecordBytes: -1}, "MaxRecordBytes"},
		{stream.PolicyValue{RetainFor: -time.Nanosecond}, "RetainFor"},
		{stream.PolicyValue{RetainBytes: -1}, "RetainBytes"},
		{stream.PolicyValue{MaxBytes: -1}, "MaxBytes"},
		{stream.PolicyValue{BlockTimeout: -1}, "BlockTimeout"},
		{stream.PolicyValue{SegmentBytes: -1}, "SegmentBytes"},
		{stream.PolicyValue{CompactAfter: -1}, "CompactAfter"},
		{stream.PolicyValue{BlockTimeout: time.Second}, "BlockTimeout"},
		{stream.PolicyValue{MaxBytes: 1<<20 - 1}, "MaxBytes"},
		{stream.PolicyValue{MaxRecordBytes: 100, MaxBytes: 99}, "MaxBytes"},
		// Several wrong at once: the first in declaration order is named.
		{stream.PolicyValue{SegmentBytes: -1, Partitions: -2, BlockTimeout: time.Second}, "Partitions"},
	} {
		err := c.policy.Validate()
		if !errors.Is(err, stream.StreamMisconfigured) || field(err, "field") != c.field {
			t.Errorf("%+v: Validate() = %v, want STREAM_MISCONFIGURED field=%s", c.policy, err, c.field)
		}
	}
	err := stream.PolicyValue{MaxRecordBytes: 100, MaxBytes: 99}.Validate()
	if field(err, "value") != "99" || field(err, "min") != "100" {
		t.Errorf("MaxBytes refusal fields: %v", err)
	}
	if err := (stream.PolicyValue{MaxRecordBytes: 100, MaxBytes: 100, BlockTimeout: time.Second}).Validate(); err != nil {
		t.Errorf("MaxBytes of exactly one record refused: %v", err)
	}
}

func TestCheckBatch(t *testing.T) {
	t.Parallel()
	p := stream.PolicyValue{Partitions: 8, MaxRecordBytes: 10}
	k1, k2 := keyIn(0, 8), keyIn(1, 8)
	for _, c := range []struct {
		name    string
		records []stream.RecordValue
		want    int
		err     *errs.Error
		fields  map[string]string
	}{
		{"empty", nil, -1, stream.InvalidBatchSize, map[string]string{"records": "0"}},
		{"unkeyed", []stream.RecordValue{{Payload: []byte("x")}, {}}, -1, nil, nil},
		{"keyed", []stream.RecordValue{{Key: k1}, {Key: k1, Payload: []byte("x")}}, 0, nil, nil},
		{"unkeyed follows", []stream.RecordValue{{Payload: []byte("x")}, {Key: k2}}, 1, nil, nil},
		{"exactly max", []stream.RecordValue{{Key: []byte("kkkkk"), Payload: []byte("ppppp")}}, stream.PartitionOf([]byte("kkkkk"), 8), nil, nil},
		{"too large", []stream.RecordValue{{Payload: []byte("ok")}, {Key: []byte("kkkkk"), Payload: []byte("pppppp")}},
			-1, stream.RecordTooLarge, map[string]string{"index": "1", "size": "11", "max": "10"}},
		{"mixed", []stream.RecordValue{{}, {Key: k1}, {}, {Key: k2}}, -1, stream.PartitionsMixed,
			map[string]string{"index": "3", "partition": "0", "key_partition": "1"}},
		{"first failure in order wins", []stream.RecordValue{{Key: k1}, {Key: k2}, {Payload: make([]byte, 11)}},
			-1, stream.PartitionsMixed, map[string]string{"index": "1"}},
	} {
		got, err := stream.CheckBatch(p, c.records)
		if c.err == nil {
			if err != nil || got != c.want {
				t.Errorf("%s: CheckBatch = %d, %v; want %d", c.name, got, err, c.want)
			}
			continue
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: CheckBatch error = %v, want %s", c.name, err, c.err.Name())
		}
		for k, v := range c.fields {
			if field(err, k) != v {
				t.Errorf("%s: field %s = %q, want %q (%v)", c.name, k, field(err, k), v, err)
			}
		}
	}
}

func TestCheckRoom(t *testing.T) {
	t.Parallel()
	p := stream.PolicyValue{MaxBytes: 100, MaxRecordBytes: 10, BlockTimeout: time.Second}
	for _, c := range []struct {
		held, batch int64
		wait        bool
		full        bool
	}{{0, 100, false, false}, {90, 10, false, false}, {91, 10, true, false}, {0, 101, false, true}, {100, 1, true, false}} {
		wait, err := stream.CheckRoom(p, c.held, c.batch)
		if wait != c.wait || errors.Is(err, stream.StreamFull) != c.full {
			t.Errorf("CheckRoom(held %d, batch %d) = %v, %v", c.held, c.batch, wait, err)
		}
	}
	if wait, err := stream.CheckRoom(stream.PolicyValue{}, 1<<40, 1<<40); wait || err != nil {
		t.Errorf("unbounded stream: %v, %v", wait, err)
	}
	err := stream.Full(p, 95, 10)
	for k, v := range map[string]string{"held": "95", "batch": "10", "max": "100", "timeout": "1s"} {
		if field(err, k) != v {
			t.Errorf("Full field %s = %q, want %q", k, field(err, k), v)
		}
	}
}

func TestCheckOffsets(t *testing.T) {
	t.Parallel()
	b := stream.BoundsValue{First: 5, Next: 9}
	if err := stream.CheckRead(2, 4, b); !errors.Is(err, stream.OffsetTrimmed) ||
		field(err, "offset") != "4" || field(err, "first") != "5" || field(err, "partition") != "2" {
		t.Errorf("CheckRead below first = %v", err)
	}
	if err := stream.CheckRead(2, 10, b); !errors.Is(err, stream.OffsetAhead) || field(err, "next") != "9" {
		t.Errorf("CheckRead past next = %v", err)
	}
	for _, from := range []stream.Offset{5, 8, 9} {
		if err := stream.CheckRead(2, from, b); err != nil {
			t.Errorf("CheckRead(%d) = %v", from, err)
		}
	}
	// A commit or trim may name offsets below First; only past Next is refused.
	if err := stream.CheckOffset(0, 0, b); err != nil {
		t.Errorf("CheckOffset(0) = %v", err)
	}
	if err := stream.CheckPartition(3, 3); !errors.Is(err, stream.UnknownPartition) || field(err, "partitions") != "3" {
		t.Errorf("CheckPartition(3, 3) = %v", err)
	}
	if err := stream.CheckPartition(-1, 3); !errors.Is(err, stream.UnknownPartition) {
		t.Errorf("CheckPartition(-1, 3) = %v", err)
	}
	if err := stream.CheckMax(0); !errors.Is(err, stream.InvalidBatchSize) || field(err, "max") != "0" {
		t.Errorf("CheckMax(0) = %v", err)
	}
	if err := stream.CheckGroup(""); !errors.Is(err, stream.StreamMisconfigured) || field(err, "field") != "group" {
		t.Errorf("CheckGroup(\"\") = %v", err)
	}
	if err := stream.NoCommit("g", 1); !errors.Is(err, stream.UnknownGroup) || field(err, "group") != "g" {
		t.Errorf("NoCommit = %v", err)
	}
}

func TestRecordHelpers(t *testing.T) {
	t.Parallel()
	if stream.IsTombstone(stream.RecordValue{}) || !stream.IsTombstone(stream.RecordValue{Key: []byte("k")}) ||
		stream.IsTombstone(stream.RecordValue{Key: []byte("k"), Payload: []byte("p")}) {
		t.Error("IsTombstone")
	}
	rs := []stream.RecordValue{{Key: []byte("ab"), Payload: []byte("cde")}, {Payload: []byte("f")}}
	if stream.RecordBytes(rs[0]) != 5 || stream.BatchBytes(rs) != 6 {
		t.Error("RecordBytes / BatchBytes")
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := stream.PolicyValue{RetainFor: time.Hour}
	if stream.Expired(p, now, now.Add(time.Hour-1)) || !stream.Expired(p, now, now.Add(time.Hour)) ||
		stream.Expired(stream.PolicyValue{}, now, now.Add(1000*time.Hour)) {
		t.Error("Expired")
	}
}

// keyIn returns a key PartitionOf places on partition p of n.
func keyIn(p, n int) []byte {
	for i := 0; ; i++ {
		k := []byte(fmt.Sprintf("key-%d", i))
		if stream.PartitionOf(k, n) == p {
			return k
		}
	}
}

// fnvRef is the standard library's FNV-1a, the oracle for PartitionOf.
func fnvRef(key []byte) uint32 {
	h := fnv.New32a()
	h.Write(key)
	return h.Sum32()
}
