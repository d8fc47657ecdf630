package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
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
	body, releaseBody, err := readAppendBody(w, r, s.opts.MaxBodyBytes)
	defer releaseBody() // the items' records are copied once each is admitted
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
	// Admit the items in order on this goroutine, then wait for them: under
	// the hold they share one object. An item whose partition must first be
	// opened (a metadata-log write) would hold up the items after it, so
	// those are admitted afterwards, concurrently, one goroutine per stream
	// (keeping each stream's items in order), and their opens share log
	// writes.
	pending := make([]node.Pending, len(items))
	release := func() {}
	if len(items) > 1 {
		release = s.b.Hold() // a lone item has nothing to share its object with
	}
	var opening map[string][]int
	for i, it := range items {
		pd, res, err := s.admitItem(r, it, true)
		if errors.Is(err, node.ErrNotOpen) {
			if opening == nil {
				opening = map[string][]int{}
			}
			opening[it.Name] = append(opening[it.Name], i)
			continue
		}
		pending[i], out[i] = pd, res
	}
	var wg sync.WaitGroup
	for _, idx := range opening {
		wg.Go(func() {
			for _, i := range idx {
				pending[i], out[i], _ = s.admitItem(r, items[i], false)
			}
		})
	}
	wg.Wait()
	release()
	for i, pd := range pending {
		if pd == nil {
			continue
		}
		res, err := pd.Wait(r.Context())
		if err != nil {
			out[i].Error = s.problem(r, err)
			continue
		}
		out[i].AppendResult = &wire.AppendResult{Partition: res.Partition, First: res.First, Last: res.Last, Next: res.Next, Duplicate: res.Duplicate}
	}
	if wire.AcceptsAppendsResult(r.Header.Get("Accept")) {
		writeAppendsBinary(w, out)
		return
	}
	s.writeJSON(w, http.StatusOK, wire.AppendsResult{Results: out})
}

// writeAppendsBinary answers an appends request in binary
// (wire.AppendsResultContentType), to a client that accepts it.
func writeAppendsBinary(w http.ResponseWriter, out []wire.AppendsItemResult) {
	body := wire.EncodeAppendsResult(nil, out)
	h := w.Header()
	h.Set("Content-Type", wire.AppendsResultContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// admitItem checks one item as append checks a request, and admits it: it
// returns the append to wait for, or the item's answer. With noOpen, an
// item whose partition is not open yet is left alone: it returns
// node.ErrNotOpen and no answer.
func (s *Server) admitItem(r *http.Request, it wire.AppendItem, noOpen bool) (node.Pending, wire.AppendsItemResult, error) {
	refuse := func(err error) (node.Pending, wire.AppendsItemResult, error) {
		switch {
		case errors.Is(err, node.ErrNotOpen):
			return nil, wire.AppendsItemResult{}, err
		case errors.Is(err, node.ErrWouldWait):
			return nil, wire.AppendsItemResult{Alone: true}, err
		}
		return nil, wire.AppendsItemResult{Error: s.problem(r, err)}, err
	}
	if err := node.ValidateName(it.Name); err != nil {
		return refuse(err)
	}
	o := node.AppendOptions{Partition: -1, NoRoomWait: true, NoOpen: noOpen}
	if it.Partition >= 0 {
		if err := s.checkPartition(it.Name, it.Partition); err != nil {
			return refuse(err)
		}
		o.Partition = it.Partition
	}
	records, err := wire.DecodeRecords(it.Batch, s.opts.MaxBatchRecords)
	if err != nil {
		return refuse(err)
	}
	pd, err := s.b.Admit(r.Context(), it.Name, records, o)
	if err != nil {
		return refuse(err)
	}
	return pd, wire.AppendsItemResult{}, nil
}

// problem encodes err as fail would, for an item of a larger answer.
func (s *Server) problem(r *http.Request, err error) []byte {
	coded := frontend.Coded(err, "http.appends")
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
