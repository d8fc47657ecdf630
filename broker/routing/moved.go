package routing

import (
	"bytes"
	"net/http"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/node"
)

// A write served here can find its slot gone by the time it opens the
// partition: a hand-off (a rebalance, a broker stopping or coming back)
// began after it was routed here. The core then refuses it before
// writing anything — NOT_SLOT_OWNER, or METADATA_UNAVAILABLE from an open
// the leader change of a stopping broker cut short — and the router sends
// it again, to the slot's owner looked up again, for up to ownerWait,
// rather than hand the client a refusal for a move it planned.

// slotLeft reports whether err, a refusal of a write served here, says
// nothing was written and the slot is no longer served here — or names a
// state of the slot that is past: ownership's refusal (NOT_SLOT_OWNER)
// always names the slot's state when it refused ("handing off", "not
// held", ...), and one made while the slot was not served here, though it
// is served here now (a hand-off called off, a restarted broker taking
// its slot back), is stale. Sent again, the write finds where it is served
// now, here included (for up to ownerWait).
func (rt *Router) slotLeft(slot int, err error) bool {
	coded, ok := errs.As(err)
	if !ok || !refusedForAMove(coded) {
		return false
	}
	if rt.cfg.Serving(slot) {
		reason, _ := errs.FieldOf(coded, "reason")
		named, _ := reason.(string)
		return coded.Name() == "NOT_SLOT_OWNER" && named != ""
	}
	return true
}

// refusedForAMove reports whether a refusal of a write says its owner no
// longer held its slot, or lost the open of it to a leader change, before
// it wrote anything.
func refusedForAMove(coded *errs.Error) bool {
	switch coded.Name() {
	case "NOT_SLOT_OWNER":
		return true // ownership's refusal: nothing was written
	case node.MetadataUnavailable.Name():
		// Only an open's: the append it was for never started.
		op, _ := errs.FieldOf(coded, "op")
		return op == "metalog.apply.open"
	}
	return false
}

// refusalHold passes a local answer through, except a 503: that one is
// held (a problem body is small), for the router to decide whether it
// goes to the client (release) or the write goes elsewhere.
type refusalHold struct {
	w       http.ResponseWriter
	header  http.Header
	status  int
	held    bool
	body    bytes.Buffer
	refusal error // the held answer's problem, when it decodes as one
}

func (h *refusalHold) Header() http.Header { return h.header }

func (h *refusalHold) WriteHeader(code int) {
	if h.status != 0 {
		return
	}
	h.status = code
	if code == http.StatusServiceUnavailable {
		h.held = true
		return
	}
	for k, v := range h.header {
		h.w.Header()[k] = v
	}
	h.w.WriteHeader(code)
}

func (h *refusalHold) Write(p []byte) (int, error) {
	if h.status == 0 {
		h.WriteHeader(http.StatusOK)
	}
	if h.held {
		n, err := h.body.Write(p)
		if coded, uerr := errs.Unmarshal(h.body.Bytes()); uerr == nil {
			h.refusal = coded
		}
		return n, err
	}
	return h.w.Write(p)
}

// Flush passes a flush on, unless the answer is held.
func (h *refusalHold) Flush() {
	if f, ok := h.w.(http.Flusher); ok && !h.held && h.status != 0 {
		f.Flush()
	}
}

// release sends a held answer as it was.
func (h *refusalHold) release() {
	if !h.held {
		return
	}
	for k, v := range h.header {
		h.w.Header()[k] = v
	}
	h.w.WriteHeader(h.status)
	_, _ = h.w.Write(h.body.Bytes())
}
