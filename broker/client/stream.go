package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/bufpool"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

// Stream is one named stream of a broker, over HTTP. It implements
// stream.Stream, Waker, Seeker, Trimmer, Compactor and Committer, and is
// safe for concurrent use.
type Stream struct {
	c     *Client
	name  string
	parts int
	path  string // escaped /v1/log/{name}

	mu   sync.Mutex
	wake chan struct{}
}

// appendBodies recycles the encodings of large appends.
var appendBodies bufpool.Pool

var (
	_ stream.Stream    = (*Stream)(nil)
	_ stream.Waker     = (*Stream)(nil)
	_ stream.Seeker    = (*Stream)(nil)
	_ stream.Trimmer   = (*Stream)(nil)
	_ stream.Compactor = (*Stream)(nil)
	_ stream.Committer = (*Stream)(nil)
)

// Name returns the stream's name.
func (s *Stream) Name() string { return s.name }

// Client returns the client the stream speaks through.
func (s *Stream) Client() *Client { return s.c }

// Partition returns p for AppendOptions.Partition.
func Partition(p int) *int { return &p }

// Producer identifies an idempotent producer's append: a repeat of an
// accepted (ID, Epoch, Seq) is acknowledged without writing.
type Producer struct {
	ID    string
	Epoch int64
	Seq   int64
}

// AppendOptions are AppendWith's extras.
type AppendOptions struct {
	// Partition is the partition to append to (see the function
	// Partition); nil places the batch by its keys, or round-robin when it
	// has none.
	Partition *int
	// Producer, when set, makes the append idempotent.
	Producer *Producer
	// StreamSeq, when set, must be byte-wise above the last one accepted.
	StreamSeq string
}

// AppendResult is where AppendWith put a batch.
type AppendResult struct {
	stream.AppendValue
	// Next is the partition's next offset after the batch.
	Next stream.Offset
	// Duplicate is an idempotent repeat, acknowledged without writing.
	Duplicate bool
	// Producer is the producer's accepted state after the append.
	Producer *wire.Producer
}

// Append implements stream.Stream.
func (s *Stream) Append(ctx context.Context, records []stream.RecordValue) (stream.AppendValue, error) {
	res, err := s.AppendWith(ctx, records, AppendOptions{})
	return res.AppendValue, err
}

// AppendWith appends records as Append does, to a given partition and
// idempotently when asked.
func (s *Stream) AppendWith(ctx context.Context, records []stream.RecordValue, o AppendOptions) (AppendResult, error) {
	// A large batch's encoding is recycled once sent (see bufpool); small
	// ones may be queued to share a request, and are allocated.
	buf, recycled := appendBodies.Get(wire.EncodedRecordsSize(records))
	body := wire.AppendRecords(buf, records)
	var recycle func([]byte)
	if recycled {
		recycle = appendBodies.Put
	}
	// A plain append may share a request with other goroutines' (see
	// WithAppendsInFlight); an idempotent one carries headers and goes alone.
	if s.c.coalesce != nil && o.Producer == nil && o.StreamSeq == "" {
		partition := -1
		if o.Partition != nil {
			if *o.Partition < 0 { // "by key" is spelled by leaving Partition nil
				return AppendResult{}, stream.CheckPartition(*o.Partition, s.parts)
			}
			partition = *o.Partition
		}
		if err := context.Cause(ctx); err != nil {
			return AppendResult{}, err
		}
		w, sent, err := s.c.coalesce.append(ctx, s.name, partition, body)
		if sent {
			if err != nil {
				return AppendResult{}, err
			}
			s.signal()
			return appendResultOf(w), nil
		}
	}
	var q url.Values
	if o.Partition != nil {
		q = partitionQuery(*o.Partition)
	}
	h := http.Header{}
	if p := o.Producer; p != nil {
		h.Set(wire.HeaderProducerID, p.ID)
		h.Set(wire.HeaderProducerEpoch, strconv.FormatInt(p.Epoch, 10))
		h.Set(wire.HeaderProducerSeq, strconv.FormatInt(p.Seq, 10))
	}
	if o.StreamSeq != "" {
		h.Set(wire.HeaderStreamSeq, o.StreamSeq)
	}
	resp, err := s.c.do(ctx, request{
		op: "append", method: http.MethodPost, path: s.path, query: q, header: h,
		body: body, contentType: wire.BatchContentType, recycle: recycle,
	})
	if err != nil {
		return AppendResult{}, err
	}
	var w wire.AppendResult
	if err := decode("append", resp, &w); err != nil {
		return AppendResult{}, err
	}
	s.signal()
	return appendResultOf(w), nil
}

// appendResultOf is the broker's answer to an append as AppendWith returns it.
func appendResultOf(w wire.AppendResult) AppendResult {
	return AppendResult{
		AppendValue: stream.AppendValue{Partition: w.Partition, First: stream.Offset(w.First), Last: stream.Offset(w.Last)},
		Next:        stream.Offset(w.Next), Duplicate: w.Duplicate, Producer: w.Producer,
	}
}

// Read implements stream.Stream: it never waits.
func (s *Stream) Read(ctx context.Context, partition int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	return s.ReadWait(ctx, partition, from, max, 0)
}

// ReadWait reads as Read does, except that when nothing is there yet the
// broker waits up to wait (clamped to its long-poll timeout) for an append
// to the stream from any client before it answers — still possibly empty.
func (s *Stream) ReadWait(ctx context.Context, partition int, from stream.Offset, max int, wait time.Duration) ([]stream.EntryValue, error) {
	q := url.Values{
		"partition": {strconv.Itoa(partition)},
		"from":      {strconv.FormatUint(uint64(from), 10)},
		"max":       {strconv.Itoa(max)},
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	resp, err := s.c.do(ctx, request{op: "read", method: http.MethodGet, path: s.path, query: q, accept: wire.BatchContentType + ", " + wire.ProblemContentType})
	if err != nil {
		return nil, err
	}
	entries, err := wire.DecodeEntries(resp.body, partition)
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// Bounds implements stream.Stream.
func (s *Stream) Bounds(ctx context.Context, partition int) (stream.BoundsValue, error) {
	resp, err := s.c.do(ctx, request{op: "bounds", method: http.MethodGet, path: s.path + ":" + wire.OpBounds, query: partitionQuery(partition)})
	if err != nil {
		return stream.BoundsValue{}, err
	}
	var w wire.BoundsResult
	if err := decode("bounds", resp, &w); err != nil {
		return stream.BoundsValue{}, err
	}
	return stream.BoundsValue{First: stream.Offset(w.First), Next: stream.Offset(w.Next)}, nil
}

// Partitions implements stream.Stream: the count read when the value was
// made.
func (s *Stream) Partitions() int { return s.parts }

// Wake implements stream.Waker: the channel is closed by the next Append
// made through this value, to any partition, once the broker acknowledged
// it. Appends by other processes (or other values) close no channel: a
// reader also polls, or uses ReadWait, whose long-poll the broker ends on
// any append.
func (s *Stream) Wake() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wake
}

func (s *Stream) signal() {
	s.mu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

// OffsetAt implements stream.Seeker.
func (s *Stream) OffsetAt(ctx context.Context, partition int, t time.Time) (stream.Offset, error) {
	q := partitionQuery(partition)
	q.Set("time", strconv.FormatInt(t.UnixNano(), 10))
	resp, err := s.c.do(ctx, request{op: "seek", method: http.MethodGet, path: s.path + ":" + wire.OpSeek, query: q})
	if err != nil {
		return 0, err
	}
	var w wire.SeekResult
	if err := decode("seek", resp, &w); err != nil {
		return 0, err
	}
	return stream.Offset(w.Offset), nil
}

// Trim implements stream.Trimmer.
func (s *Stream) Trim(ctx context.Context, partition int, before stream.Offset) error {
	q := partitionQuery(partition)
	q.Set("before", strconv.FormatUint(uint64(before), 10))
	_, err := s.c.do(ctx, request{op: "trim", method: http.MethodPost, path: s.path + ":" + wire.OpTrim, query: q})
	return err
}

// Compact implements stream.Compactor.
func (s *Stream) Compact(ctx context.Context, partition int) (stream.CompactValue, error) {
	resp, err := s.c.do(ctx, request{op: "compact", method: http.MethodPost, path: s.path + ":" + wire.OpCompact, query: partitionQuery(partition)})
	if err != nil {
		return stream.CompactValue{}, err
	}
	var w wire.CompactResult
	if err := decode("compact", resp, &w); err != nil {
		return stream.CompactValue{}, err
	}
	return stream.CompactValue{Scanned: w.Scanned, Kept: w.Kept, Dropped: w.Dropped}, nil
}

// Commit implements stream.Committer.
func (s *Stream) Commit(ctx context.Context, group string, partition int, next stream.Offset) error {
	// Checked here as the other engines do: the broker refuses an empty
	// group= as a malformed query, which is not the port's answer.
	if err := stream.CheckGroup(group); err != nil {
		return err
	}
	q := partitionQuery(partition)
	q.Set("group", group)
	q.Set("next", strconv.FormatUint(uint64(next), 10))
	_, err := s.c.do(ctx, request{op: "commit", method: http.MethodPost, path: s.path + ":" + wire.OpCommit, query: q})
	return err
}

// Committed implements stream.Committer.
func (s *Stream) Committed(ctx context.Context, group string, partition int) (stream.Offset, error) {
	// Checked here as the other engines do: the broker refuses an empty
	// group= as a malformed query, which is not the port's answer.
	if err := stream.CheckGroup(group); err != nil {
		return 0, err
	}
	q := partitionQuery(partition)
	q.Set("group", group)
	resp, err := s.c.do(ctx, request{op: "committed", method: http.MethodGet, path: s.path + ":" + wire.OpCommitted, query: q})
	if err != nil {
		return 0, err
	}
	var w wire.CommittedResult
	if err := decode("committed", resp, &w); err != nil {
		return 0, err
	}
	return stream.Offset(w.Next), nil
}

func partitionQuery(partition int) url.Values {
	return url.Values{"partition": {strconv.Itoa(partition)}}
}
