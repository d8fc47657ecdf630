package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// serveLog serves /v1/log/{name}[:op].
func (s *Server) serveLog(w http.ResponseWriter, r *http.Request, name, op string) string {
	method := func(allow string, route string, h func(http.ResponseWriter, *http.Request, string)) string {
		if r.Method != allow {
			s.notAllowed(w, r, allow)
			return route
		}
		h(w, r, name)
		return route
	}
	switch op {
	case "":
		switch r.Method {
		case http.MethodPost:
			s.append(w, r, name)
			return "log.append"
		case http.MethodGet:
			s.read(w, r, name)
			return "log.read"
		}
		s.notAllowed(w, r, "GET, POST")
		return "log"
	case wire.OpBounds:
		return method(http.MethodGet, "log.bounds", s.bounds)
	case wire.OpSeek:
		return method(http.MethodGet, "log.seek", s.seek)
	case wire.OpTrim:
		return method(http.MethodPost, "log.trim", s.trim)
	case wire.OpCompact:
		return method(http.MethodPost, "log.compact", s.compact)
	case wire.OpCommit:
		return method(http.MethodPost, "log.commit", s.commit)
	case wire.OpCommitted:
		return method(http.MethodGet, "log.committed", s.committed)
	}
	s.fail(w, r, wire.RouteNotFound.With("path", r.URL.Path, "op", op))
	return "log.unknown"
}

// checkPartition checks an append's explicit partition before its
// records: one outside [0, Partitions()) is UNKNOWN_PARTITION whatever the
// keys say (the broker would name the keys' disagreement first), and a
// negative one, which means "by key" to the broker, is refused too.
func (s *Server) checkPartition(name string, p int) error {
	e, err := s.b.Get(name)
	if err != nil {
		return err
	}
	return stream.CheckPartition(p, len(e.Partitions))
}

// append serves POST /v1/log/{name}.
func (s *Server) append(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	o := node.AppendOptions{Partition: -1}
	if q.Has("partition") {
		p, err := intParam(q, "partition", -1)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if err := s.checkPartition(name, p); err != nil {
			s.fail(w, r, err)
			return
		}
		o.Partition = p
	}
	producer, err := producerOf(r.Header)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o.Producer = producer
	o.StreamSeq = r.Header.Get(wire.HeaderStreamSeq)

	ct := mediaType(r.Header.Get("Content-Type"))
	if ct != wire.BatchContentType && ct != wire.RawContentType {
		s.fail(w, r, wire.UnsupportedMediaType.With("contentType", ct, "accepted", wire.BatchContentType+", "+wire.RawContentType))
		return
	}
	if ct == wire.BatchContentType && q.Has("key") {
		s.fail(w, r, badParam("key", q.Get("key"), "key applies to "+wire.RawContentType+" bodies only"))
		return
	}
	body, release, err := readAppendBody(w, r, s.opts.MaxBodyBytes)
	defer release() // the records are copied once the append is admitted
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var records []stream.RecordValue
	if ct == wire.BatchContentType {
		if records, err = wire.DecodeRecords(body, s.opts.MaxBatchRecords); err != nil {
			s.fail(w, r, err)
			return
		}
	} else {
		rec := stream.RecordValue{}
		if k := q.Get("key"); k != "" {
			rec.Key = []byte(k)
		}
		if len(body) > 0 {
			rec.Payload = body
		}
		records = []stream.RecordValue{rec}
	}

	res, err := s.b.Append(r.Context(), name, records, o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.AppendResult{Partition: res.Partition, First: res.First, Last: res.Last, Next: res.Next, Duplicate: res.Duplicate}
	if producer != nil {
		out.Producer = &wire.Producer{Epoch: res.Producer.Epoch, LastSeq: res.Producer.LastSeq}
		w.Header().Set(wire.HeaderProducerEpoch, strconv.FormatInt(res.Producer.Epoch, 10))
		w.Header().Set(wire.HeaderProducerSeq, strconv.FormatInt(res.Producer.LastSeq, 10))
	}
	h := w.Header()
	h.Set(wire.HeaderPartition, strconv.Itoa(res.Partition))
	h.Set(wire.HeaderFirst, strconv.FormatUint(res.First, 10))
	h.Set(wire.HeaderLast, strconv.FormatUint(res.Last, 10))
	h.Set(wire.HeaderNext, strconv.FormatUint(res.Next, 10))
	if res.Duplicate {
		h.Set(wire.HeaderDuplicate, "true")
	}
	s.writeJSON(w, http.StatusOK, out)
}

// producerOf reads the idempotent producer headers: all three or none.
func producerOf(h http.Header) (*node.ProducerTuple, error) {
	id, epoch, seq := h.Get(wire.HeaderProducerID), h.Get(wire.HeaderProducerEpoch), h.Get(wire.HeaderProducerSeq)
	if id == "" && epoch == "" && seq == "" {
		return nil, nil
	}
	if id == "" || epoch == "" || seq == "" {
		return nil, badParam(wire.HeaderProducerID, id, "Producer-Id, Producer-Epoch and Producer-Seq go together")
	}
	e, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || e < 0 {
		return nil, badParam(wire.HeaderProducerEpoch, epoch, "not a non-negative integer")
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n < 0 {
		return nil, badParam(wire.HeaderProducerSeq, seq, "not a non-negative integer")
	}
	return &node.ProducerTuple{ID: id, Epoch: e, Seq: n}, nil
}

// read serves GET /v1/log/{name}: partition, from, max, wait, maxBytes.
func (s *Server) read(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	partition, err := intParam(q, "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	from, err := offsetParam(q, "from", 0, false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	max, err := intParam(q, "max", 100)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ro := node.ReadOptions{MaxBytes: s.opts.MaxReadBytes}
	if n, ok, err := int64Param(q, "maxBytes"); err != nil {
		s.fail(w, r, err)
		return
	} else if ok && n > 0 && n < ro.MaxBytes {
		ro.MaxBytes = n
	}
	var wait time.Duration
	if q.Has("wait") {
		v := q.Get("wait")
		if v == "" {
			wait = s.opts.LongPollTimeout
		} else if wait, err = time.ParseDuration(v); err != nil || wait < 0 {
			s.fail(w, r, badParam("wait", v, "not a non-negative Go duration such as 500ms or 2s"))
			return
		}
		wait = min(wait, s.opts.LongPollTimeout)
	}

	ctx := r.Context()
	var deadline <-chan time.Time
	for {
		// The waker is taken BEFORE the read: an append committing between
		// the read and the wait closes the channel already held.
		var wake <-chan struct{}
		if wait > 0 {
			if wake, err = s.b.Wake(name); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		entries, bounds, err := s.b.Read(ctx, name, partition, from, max, ro)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if len(entries) > 0 || wait <= 0 || s.draining.Load() {
			s.writeEntries(w, r, partition, entries, bounds)
			return
		}
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		s.waiting.Add(1)
		gone := false
		select {
		case <-wake:
			// A wake is a hint (another partition, say): read again, and
			// wait again if there is time left.
		case <-deadline:
			wait = 0 // read once more, then answer whatever it finds
		case <-s.drain:
			wait = 0
		case <-ctx.Done():
			gone = true
		}
		s.waiting.Add(-1)
		if gone {
			return
		}
	}
}

// writeEntries answers a read in the batch framing, or as JSON when the
// client prefers it.
func (s *Server) writeEntries(w http.ResponseWriter, r *http.Request, partition int, entries []stream.EntryValue, b stream.BoundsValue) {
	readNext := uint64(b.Next)
	if len(entries) > 0 {
		readNext = uint64(entries[len(entries)-1].Offset) + 1
	}
	h := w.Header()
	h.Set(wire.HeaderPartition, strconv.Itoa(partition))
	h.Set(wire.HeaderFirst, strconv.FormatUint(uint64(b.First), 10))
	h.Set(wire.HeaderNext, strconv.FormatUint(uint64(b.Next), 10))
	h.Set(wire.HeaderCount, strconv.Itoa(len(entries)))
	h.Set(wire.HeaderReadNext, strconv.FormatUint(readNext, 10))
	if prefersJSON(r.Header.Get("Accept")) {
		out := wire.ReadJSON{Partition: partition, First: uint64(b.First), Next: uint64(b.Next), ReadNext: readNext, Entries: make([]wire.EntryJSON, len(entries))}
		for i, e := range entries {
			out.Entries[i] = wire.EntryJSON{Offset: uint64(e.Offset), AppendedAt: e.AppendedAt.UTC(), Key: e.Record.Key, Payload: e.Record.Payload}
		}
		s.writeJSON(w, http.StatusOK, out)
		return
	}
	body := wire.EncodeEntries(entries)
	h.Set("Content-Type", wire.BatchContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// prefersJSON reports an Accept header that names JSON and not the batch
// framing.
func prefersJSON(accept string) bool {
	return strings.Contains(accept, wire.JSONContentType) && !strings.Contains(accept, wire.BatchContentType)
}

func (s *Server) bounds(w http.ResponseWriter, r *http.Request, name string) {
	partition, err := intParam(r.URL.Query(), "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.b.Bounds(r.Context(), name, partition)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set(wire.HeaderPartition, strconv.Itoa(partition))
	w.Header().Set(wire.HeaderFirst, strconv.FormatUint(uint64(b.First), 10))
	w.Header().Set(wire.HeaderNext, strconv.FormatUint(uint64(b.Next), 10))
	s.writeJSON(w, http.StatusOK, wire.BoundsResult{Partition: partition, First: uint64(b.First), Next: uint64(b.Next)})
}

func (s *Server) seek(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	partition, err := intParam(q, "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := timeValue("time", q.Get("time"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	off, err := s.b.OffsetAt(r.Context(), name, partition, t)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, wire.SeekResult{Partition: partition, Offset: off})
}

func (s *Server) trim(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	partition, err := intParam(q, "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	before, err := offsetParam(q, "before", 0, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.b.Trim(r.Context(), name, partition, before); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) compact(w http.ResponseWriter, r *http.Request, name string) {
	partition, err := intParam(r.URL.Query(), "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.b.Compact(r.Context(), name, partition)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, wire.CompactResult{Scanned: v.Scanned, Kept: v.Kept, Dropped: v.Dropped})
}

func (s *Server) commit(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	partition, err := intParam(q, "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	next, err := offsetParam(q, "next", 0, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.b.Commit(r.Context(), name, q.Get("group"), partition, next); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) committed(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	partition, err := intParam(q, "partition", 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	group := q.Get("group")
	next, err := s.b.Committed(r.Context(), name, group, partition)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, wire.CommittedResult{Group: group, Partition: partition, Next: next})
}
