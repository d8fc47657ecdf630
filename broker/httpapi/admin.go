package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/strictjson"
)

// DefaultContentType is a stream's content type when its creation names
// none.
const DefaultContentType = "application/octet-stream"

// serveStream serves /v1/admin/streams/{name}.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, name string) string {
	switch r.Method {
	case http.MethodPut:
		s.createStream(w, r, name)
		return "admin.create"
	case http.MethodGet:
		s.getStream(w, r, name)
		return "admin.get"
	case http.MethodPatch:
		s.patchStream(w, r, name)
		return "admin.patch"
	case http.MethodDelete:
		s.deleteStream(w, r, name)
		return "admin.delete"
	}
	s.notAllowed(w, r, "GET, PUT, PATCH, DELETE")
	return "admin.stream"
}

// decodeJSON reads a JSON admin body into v, refusing unknown members; an
// empty body leaves v as it is. The Content-Type is not checked (curl -d
// sends a form type): the body is JSON or refused.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r, maxAdminBodyBytes)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := strictjson.Check(body); err != nil {
		// A repeated member or trailing data is refused, not guessed at.
		return wire.MalformedBody.With("reason", err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.MalformedBody.With("reason", err.Error())
	}
	if dec.More() {
		return wire.MalformedBody.With("reason", "more than one JSON value")
	}
	return nil
}

// createOptions reads a StreamConfig; now is when the creation is asked.
func createOptions(c wire.StreamConfig, now time.Time) (node.CreateOptions, error) {
	p, err := c.Policy.Value()
	if err != nil {
		return node.CreateOptions{}, err
	}
	ttl, err := wire.ParseDuration("ttl", c.TTL)
	if err != nil {
		return node.CreateOptions{}, err
	}
	// A lifetime over before the creation is answered would be a 201 for a
	// stream the next request finds gone. The Durable Streams protocol
	// counts TTLs in whole seconds, so less than one is not a lifetime.
	if ttl < 0 || (ttl > 0 && ttl < time.Second) {
		return node.CreateOptions{}, stream.StreamMisconfigured.With("field", "ttl", "value", ttl, "reason", "0 (none) or at least 1s")
	}
	o := node.CreateOptions{ContentType: c.ContentType, Policy: p, TTL: ttl}
	if o.ContentType == "" {
		o.ContentType = DefaultContentType
	}
	if c.ExpiresAt != nil {
		if !c.ExpiresAt.After(now) {
			return node.CreateOptions{}, stream.StreamMisconfigured.With("field", "expiresAt", "value", c.ExpiresAt.UTC().Format(time.RFC3339Nano), "reason", "already passed")
		}
		o.ExpiresAt = *c.ExpiresAt
	}
	return o, nil
}

// createStream serves PUT: 201 when created, 200 when the stream exists
// with the same configuration, 409 STREAM_EXISTS naming the first field
// that differs otherwise.
func (s *Server) createStream(w http.ResponseWriter, r *http.Request, name string) {
	var c wire.StreamConfig
	if err := s.decodeJSON(w, r, &c); err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := createOptions(c, time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if c.Policy == (wire.Policy{}) && s.opts.DefaultPolicy != nil {
		o.Policy = *s.opts.DefaultPolicy
	}
	e, created, err := s.b.Create(r.Context(), name, o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !created {
		if field := differs(e, o); field != "" {
			s.fail(w, r, node.StreamExists.With("name", name, "field", field))
			return
		}
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", wire.StreamsPrefix+name)
	}
	s.writeJSON(w, status, s.info(e, true))
}

// differs names the first configuration field of e that o does not ask
// for, or "".
func differs(e *node.Entry, o node.CreateOptions) string {
	switch {
	case e.ContentType != o.ContentType:
		return "contentType"
	case e.Policy.Normalized() != o.Policy.Normalized():
		return "policy"
	case e.TTL != o.TTL:
		return "ttl"
	case !e.ExpiresAt.Equal(o.ExpiresAt):
		return "expiresAt"
	}
	return ""
}

func (s *Server) getStream(w http.ResponseWriter, r *http.Request, name string) {
	e, err := s.b.Get(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, s.info(e, true))
}

func (s *Server) deleteStream(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.b.Delete(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// patchStream serves PATCH: {"policy": {...}}, the members given replacing
// the current ones. Partitions may only grow (PARTITIONS_SHRINK).
func (s *Server) patchStream(w http.ResponseWriter, r *http.Request, name string) {
	var u wire.PolicyUpdate
	if err := s.decodeJSON(w, r, &u); err != nil {
		s.fail(w, r, err)
		return
	}
	e, err := s.b.Get(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := u.Policy.Apply(e.Policy)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := p.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	e, err = s.b.UpdatePolicy(r.Context(), name, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, s.info(e, true))
}

// listStreams serves GET /v1/admin/streams[?prefix=P].
func (s *Server) listStreams(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	out := wire.StreamList{Streams: []wire.StreamInfo{}}
	for _, e := range s.b.List() {
		if strings.HasPrefix(e.Name, prefix) && frontend.Visible(r.Context(), e.Name) {
			out.Streams = append(out.Streams, s.info(e, false))
		}
	}
	s.writeJSON(w, http.StatusOK, out)
}

// info describes e; with detail, each partition's internal stream too.
func (s *Server) info(e *node.Entry, detail bool) wire.StreamInfo {
	out := wire.StreamInfo{
		Name: e.Name, ContentType: e.ContentType, Policy: wire.PolicyOf(e.Policy), PartitionCount: len(e.Partitions),
		CreatedAt: e.CreatedAt.UTC(), LastAccess: e.LastAccess.UTC(),
		Closed: e.Closed, LastStreamSeq: e.LastStreamSeq,
	}
	if e.TTL > 0 {
		out.TTL = e.TTL.String()
	}
	if !e.ExpiresAt.IsZero() {
		t := e.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	if len(e.Producers) > 0 {
		out.Producers = make(map[string]wire.Producer, len(e.Producers))
		for id, p := range e.Producers {
			out.Producers[id] = wire.Producer{Epoch: p.Epoch, LastSeq: p.LastSeq}
		}
	}
	if detail {
		out.Partitions = make([]wire.PartitionInfo, 0, len(e.Partitions))
		for i, id := range e.Partitions {
			pi := wire.PartitionInfo{Partition: i, ID: id, Epoch: -1}
			if in, ok := s.b.Partition(id); ok {
				pi.Epoch, pi.Owner, pi.Open = in.Epoch, in.Owner, in.Open
				pi.Start, pi.End, pi.Bytes, pi.Ranges, pi.Groups = in.Start, in.End, in.Bytes, in.Ranges, in.Groups
				pi.LocalBytes, pi.TieredBytes = in.LocalBytes, in.TieredBytes
			}
			out.Partitions = append(out.Partitions, pi)
		}
	}
	return out
}

// node serves GET /v1/admin/node.
func (s *Server) node(w http.ResponseWriter, r *http.Request) {
	st := s.b.Status()
	info := wire.NodeInfo{
		NodeID: st.NodeID, RaftState: st.LogState, Leader: st.Leader, AppliedIndex: st.AppliedIndex, LastIndex: st.LastIndex,
		Streams: len(s.b.List()), Ready: st.Leader != "" && !s.draining.Load(),
	}
	if s.opts.Cluster != nil {
		s.opts.Cluster(&info)
	}
	s.writeJSON(w, http.StatusOK, info)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 when the metadata log has a leader, the storage has
// not failed and the broker is not draining, 503 NOT_READY otherwise. A
// full volume leaves it ready: reads, deletes and trims — what frees the
// space — are still served.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.fail(w, r, wire.NotReady.With("reason", "draining"))
		return
	}
	st := s.b.Status()
	if st.StorageFailed != nil {
		s.fail(w, r, wire.NotReady.With("reason", "storage failed", "err", st.StorageFailed.Error()))
		return
	}
	if st.Leader == "" {
		s.fail(w, r, wire.NotReady.With("reason", "no metadata leader", "raftState", st.LogState))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// ManualClock is a clock that stands still until set: the broker's clock
// under cmd/broker --test-clock, so that a test in another process can date
// records and age them (retention, compaction, seek) exactly. It is safe
// for concurrent use.
type ManualClock struct {
	ns atomic.Int64
}

// NewManualClock returns a clock reading t.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.Set(t)
	return c
}

// Now returns the clock's instant.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// ClockValue is the body of GET and PUT /v1/admin/clock.
type ClockValue struct {
	Now      time.Time `json:"now"`
	UnixNano int64     `json:"unixNano"`
}

func (s *Server) getClock(w http.ResponseWriter, r *http.Request) {
	t := s.opts.TestClock.Now()
	s.writeJSON(w, http.StatusOK, ClockValue{Now: t.UTC(), UnixNano: t.UnixNano()})
}

// setClock serves PUT /v1/admin/clock?now=T (RFC 3339 or Unix ns).
func (s *Server) setClock(w http.ResponseWriter, r *http.Request) {
	t, err := timeValue("now", r.URL.Query().Get("now"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.TestClock.Set(t)
	s.getClock(w, r)
}
