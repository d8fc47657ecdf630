package client

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestHTTPSUsesHTTP2: over TLS the client speaks HTTP/2 to a server that
// offers it (a TLS configuration of its own given, as for a cluster's CA).
func TestHTTPSUsesHTTP2(t *testing.T) {
	var h2 atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"streams": []any{}})
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	conf := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	conf.NextProtos = nil
	c, err := New(srv.URL, WithTLSConfig(conf))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ListStreams(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if h2.Load() != 1 {
		t.Fatal("the client did not speak HTTP/2 to a TLS server offering it")
	}
}
