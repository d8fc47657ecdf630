package client_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A broker that cannot be reached is BROKER_UNREACHABLE — retriable (503,
// exit 69), naming the endpoint, wrapping the cause — never
// STREAM_BACKEND_FAILED, which says the stream's storage failed.
func TestUnreachableBrokerIsBrokerUnreachable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	check := func(name, base string, cause func(error) bool) {
		t.Helper()
		c, err := client.New(base)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.GetStream(ctx, "x")
		switch {
		case !errors.Is(err, client.BrokerUnreachable) || errors.Is(err, stream.StreamBackendFailed):
			t.Errorf("%s: %v, want BROKER_UNREACHABLE", name, err)
		case !cause(err):
			t.Errorf("%s: %v: the cause is not kept for errors.Is/As", name, err)
		case errs.HTTPStatus(err) != http.StatusServiceUnavailable || errs.ExitCode(err) != 69:
			t.Errorf("%s: status %d exit %d, want 503 and 69 (retriable)", name, errs.HTTPStatus(err), errs.ExitCode(err))
		}
		if ep, _ := errs.FieldOf(err, "endpoint"); ep != base {
			t.Errorf("%s: endpoint field %v, want %s", name, ep, base)
		}
	}
	refused := func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
	check("connection refused", "http://"+closedAddr(t), refused)
	// HTTPS goes through net/http's Transport: the same error.
	check("connection refused over https", "https://"+closedAddr(t), refused)
	// .invalid never resolves (RFC 6761), with or without a DNS server.
	check("no such host", "http://broker-0.picomq.invalid:4437", func(err error) bool {
		var dns *net.DNSError
		return errors.As(err, &dns)
	})
}

// A broker that was reached and then failed is not "unreachable": the
// request may have been acted on.
func TestAnsweredFailureIsNotUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, _, _ := hj.Hijack()
		conn.Close() // the request was read: drop the connection unanswered
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetStream(t.Context(), "x"); errors.Is(err, client.BrokerUnreachable) || !errors.Is(err, stream.StreamBackendFailed) {
		t.Errorf("a connection dropped after the request: %v, want STREAM_BACKEND_FAILED", err)
	}
	if client.Unreachable("e", "op", errors.New("EOF")) != nil || client.Unreachable("e", "op", nil) != nil {
		t.Errorf("Unreachable classified an answered failure")
	}
	if got, ok := errs.Lookup(client.CodeBrokerUnreachable); !ok || got.Name() != "BROKER_UNREACHABLE" {
		t.Errorf("code %s not registered as BROKER_UNREACHABLE", client.CodeBrokerUnreachable)
	}
}
