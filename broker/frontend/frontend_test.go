package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

var unavailable = errs.Static(0x00_10_7E_01, "TEST_UNAVAILABLE", "try again", "frontend tests", 503, 75)

func TestWriteProblem(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		method     string
		status     int
		retryAfter bool
		body       bool
	}{
		{http.MethodGet, 503, true, true},
		{http.MethodPost, 409, false, true},
		{http.MethodHead, 503, true, false},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(c.method, "/v1/x", nil)
		WriteProblem(w, r, log, unavailable.With("node", "b-1"), c.status)
		if w.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.method, w.Code, c.status)
		}
		if got := w.Header().Get("Retry-After") != ""; got != c.retryAfter {
			t.Errorf("%s %d: Retry-After set %v, want %v", c.method, c.status, got, c.retryAfter)
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: a refusal may be cached", c.method)
		}
		if !c.body {
			if w.Body.Len() != 0 {
				t.Errorf("HEAD answered a body")
			}
			continue
		}
		if ct := w.Header().Get("Content-Type"); ct != ProblemContentType {
			t.Errorf("%s: content type %q", c.method, ct)
		}
		var p map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s: body %q: %v", c.method, w.Body, err)
		}
		decoded, err := errs.Unmarshal(w.Body.Bytes())
		if err != nil || !errors.Is(decoded, unavailable) {
			t.Errorf("%s: the problem decodes to %v, want the refusal", c.method, decoded)
		}
	}
}

func TestCodedAndAbandoned(t *testing.T) {
	t.Parallel()
	plain := errors.New("disk on fire")
	if c := Coded(plain, "op.x"); !errors.Is(c, stream.StreamBackendFailed) || !errors.Is(c, plain) {
		t.Errorf("Coded(plain) = %v, want STREAM_BACKEND_FAILED wrapping it", c)
	}
	coded := unavailable.With("a", 1)
	if c := Coded(coded, "op.x"); !errors.Is(c, unavailable) || errors.Is(c, stream.StreamBackendFailed) {
		t.Errorf("Coded(coded) = %v, want it unchanged", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	if Abandoned(r, context.Canceled) {
		t.Error("a live request counted as abandoned")
	}
	cancel()
	if !Abandoned(r, context.Canceled) || Abandoned(r, plain) {
		t.Error("a cancelled request's context error is abandoned; another error is not")
	}
}
