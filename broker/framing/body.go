package framing

import (
	"io"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// bytesPerSecond is the slowest a body may arrive once its grace is spent.
const bytesPerSecond = 4 << 10

// BodyDeadline bounds how long a request body may take: grace plus 1 s per
// 4 KiB (announced by Content-Length, or received so far when chunked), so
// a client trickling a body cannot hold a connection and a handler. A body
// read past the deadline fails with REQUEST_TIMEOUT (408); the connection
// is closed after the answer. Once the body is read the deadline is lifted,
// so a handler that then waits (a long-poll) is not cut off.
func BodyDeadline(h http.Handler, grace time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		d := &deadlineBody{body: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: grace, known: r.ContentLength > 0}
		if d.known {
			d.set(r.ContentLength)
		}
		r.Body = d
		h.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	known bool // Content-Length set the deadline once
	read  int64
	at    time.Time
	done  bool
}

func (d *deadlineBody) set(bytes int64) {
	d.at = d.start.Add(d.grace + time.Duration(bytes/bytesPerSecond)*time.Second)
	_ = d.rc.SetReadDeadline(d.at)
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	if !d.known {
		d.set(d.read)
	}
	n, err := d.body.Read(p)
	d.read += int64(n)
	switch {
	case err == io.EOF && !d.done:
		d.done = true
		_ = d.rc.SetReadDeadline(time.Time{})
	case err != nil && err != io.EOF && isTimeout(err):
		return n, wire.RequestTimeout.Wrap(err, "deadline", d.at.Sub(d.start).String(), "received", d.read)
	}
	return n, err
}

func (d *deadlineBody) Close() error { return d.body.Close() }
