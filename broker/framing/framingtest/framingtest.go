// Package framingtest sends requests as written, byte for byte, for tests
// of what a server does with framing net/http's client would never send.
package framingtest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Exchange sends req on a new connection to addr and reads one answer:
// its status and body.
func Exchange(t testing.TB, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}
