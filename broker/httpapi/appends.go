package httpapi

import (
	"errors"
	"net/http"
	"sync"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

// appends serves POST /v1/appends: several independent appends in one
// request (see wire.AppendsPath). Each is checked and run exactly as a
// single append would be — concurrently, so they share the broker's group
// commit — and answered in its own item; one refused append does not
// refuse the others.
func (s *Server) appends(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.notAllowed(w, r, "POST")
		return
	}
	if ct := mediaType(r.Header.Get("Content-Type")); ct != wire.AppendsContentType {
		s.fail(w, r, wire.UnsupportedMediaType.With("contentType", ct, "accepted", wire.AppendsContentType))
		return
	}
	body, err := readBody(w, r, s.opts.MaxBodyBytes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items, err := wire.DecodeAppends(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]wire.AppendsItemResult, len(items))
	var wg, queued sync.WaitGroup
	release := s.b.Hold()
	queued.Add(len(items))
	for i, it := range items {
		wg.Go(func() {
			res, err := s.appendItem(r, it, queued.Done)
			if errors.Is(err, core.ErrWouldWait) {
				out[i].Alone = true
				return
			}
			if err != nil {
				out[i].Error = s.problem(r, err)
				return
			}
			out[i].AppendResult = &wire.AppendResult{Partition: res.Partition, First: res.First, Last: res.Last, Next: res.Next, Duplicate: res.Duplicate}
		})
	}
	queued.Wait()
	release()
	wg.Wait()
	s.writeJSON(w, http.StatusOK, wire.AppendsResult{Results: out})
}

// appendItem checks one item as append checks a request, and appends it.
func (s *Server) appendItem(r *http.Request, it wire.AppendItem, queued func()) (core.AppendResult, error) {
	var once sync.Once
	done := func() { once.Do(queued) }
	defer done() // refused before it reached the broker
	if err := core.ValidateName(it.Name); err != nil {
		return core.AppendResult{}, err
	}
	o := core.AppendOptions{Partition: -1, Queued: done, NoRoomWait: true}
	if it.Partition >= 0 {
		if err := s.checkPartition(it.Name, it.Partition); err != nil {
			return core.AppendResult{}, err
		}
		o.Partition = it.Partition
	}
	records, err := wire.DecodeRecords(it.Batch, s.opts.MaxBatchRecords)
	if err != nil {
		return core.AppendResult{}, err
	}
	return s.b.Append(r.Context(), it.Name, records, o)
}

// problem encodes err as fail would, for an item of a larger answer.
func (s *Server) problem(r *http.Request, err error) []byte {
	coded := codedOf(err, "http.appends")
	body, merr := errs.Marshal(coded)
	if merr != nil {
		s.log.Error("cannot encode a problem", "err", merr, "cause", err)
		body, _ = errs.Marshal(stream.StreamBackendFailed.With("op", "http.appends", "reason", "unencodable problem"))
	}
	if errs.HTTPStatus(coded) >= 500 {
		s.log.Error("append failed", "path", r.URL.Path, "err", coded)
	}
	return body
}
