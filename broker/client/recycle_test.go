package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRecycledBodyGoesBackOnce: a request body from a pool goes back to it
// exactly once, when the transport closes it — after sending it, or after
// failing without reading it —, never while it may still be read; it is
// sent with its length, not chunked. (A transport that never closes it
// only leaves the buffer to the collector.)
func TestRecycledBodyGoesBackOnce(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100<<10)
	var gotLen int64
	var sent []byte
	ok := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		gotLen = r.ContentLength
		sent, _ = io.ReadAll(r.Body)
		r.Body.Close()
		if _, err := r.Body.Read(make([]byte, 1)); !errors.Is(err, http.ErrBodyReadAfterClose) {
			t.Errorf("read after close: %v", err)
		}
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}}, nil
	})
	failing := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r.Body.Close() // as RoundTripper's contract says, even on errors
		return nil, errors.New("connection refused")
	})
	for i, rt := range []http.RoundTripper{ok, failing} {
		c, err := New("http://127.0.0.1:1", WithHTTPClient(&http.Client{Transport: rt}))
		if err != nil {
			t.Fatal(err)
		}
		var recycled [][]byte
		_, err = c.do(context.Background(), request{op: "append", method: http.MethodPost, path: "/v1/log/s", body: body,
			recycle: func(b []byte) { recycled = append(recycled, b) }})
		if len(recycled) != 1 || &recycled[0][0] != &body[0] {
			t.Fatalf("recycled %d times (err %v), want once, the body's buffer", len(recycled), err)
		}
		if i == 0 {
			if err != nil {
				t.Fatal(err)
			}
			if gotLen != int64(len(body)) || !bytes.Equal(sent, body) {
				t.Fatalf("sent %d bytes, Content-Length %d; want the body, %d", len(sent), gotLen, len(body))
			}
		}
	}
}
