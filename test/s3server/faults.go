package s3server

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// mode is what a Faults proxy does with requests.
type mode int

const (
	modePass mode = iota
	modeCut
	modeBlackhole
)

func (m mode) String() string {
	switch m {
	case modePass:
		return "pass"
	case modeCut:
		return "cut"
	case modeBlackhole:
		return "blackhole"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Count is what a Faults proxy saw of one method.
type Count struct {
	Seen   int // requests that reached the proxy
	Failed int // of those, answered or dropped by the proxy, not the server
}

// Faults is an HTTP reverse proxy on its own loopback port in front of an
// S3 server: the URL a broker is given, so a test can break the object
// store under it at run time. Unlike clusterharness.Proxy (TCP, bytes
// only) it sees requests, so it can answer some with S3's own errors.
type Faults struct {
	t      testing.TB
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy

	mu       sync.Mutex
	mode     mode
	slow     time.Duration
	status   int
	fraction float64
	rnd      *rand.Rand
	changed  chan struct{} // closed and replaced at every change
	conns    map[net.Conn]struct{}
	counts   map[string]*Count
}

// DefaultSeed seeds the choice of failed requests until Seed changes it:
// the same requests in the same order fail the same way on every run.
const DefaultSeed = 1

// Proxy starts a Faults proxy in front of the server's S3 API. It follows
// Restart (same port); it is closed at t's cleanup.
func (s *Server) Proxy(t testing.TB) *Faults {
	t.Helper()
	return NewFaults(t, s.Endpoint())
}

// NewFaults starts a Faults proxy in front of target (http://host:port),
// passing everything until told otherwise; it is closed at t's cleanup.
// It listens on the target's IP (127.0.0.1 for a host name).
func NewFaults(t testing.TB, target string) *Faults {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		t.Fatalf("s3server: proxy target %q: not a URL (%v)", target, err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	// On the target's address: a server of Options.IP is proxied there.
	ip := "127.0.0.1"
	if a := net.ParseIP(u.Hostname()); a != nil {
		ip = a.String()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	f := &Faults{
		t: t, target: u,
		changed: make(chan struct{}),
		conns:   map[net.Conn]struct{}{},
		counts:  map[string]*Count{},
		rnd:     rand.New(rand.NewPCG(DefaultSeed, DefaultSeed)),
	}
	f.ln = &faultListener{Listener: ln, f: f}
	f.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			// SigV4 signs the Host header: keep the one the client signed.
			r.Out.Host = r.In.Host
		},
		// Bytes reach the client as the server sends them, so a blackhole
		// switched on mid-body holds the rest.
		FlushInterval: -1,
		Transport:     &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &heldBody{ReadCloser: resp.Body, f: f, done: resp.Request.Context().Done()}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The server is down (killed, restarting): a gateway's answer.
			f.count(r.Method, true)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ErrorLog: nil}
	go f.srv.Serve(f.ln)
	t.Cleanup(f.Close)
	return f
}

// Endpoint is the proxy's URL, http://<its target's IP>:port: what the broker dials.
func (f *Faults) Endpoint() string { return "http://" + f.Addr() }

// Addr is the proxy's host:port.
func (f *Faults) Addr() string { return f.ln.Addr().String() }

// Client is an S3 client through the proxy, signing as cred (NewClient).
func (f *Faults) Client(cred Credential) *minio.Client {
	f.t.Helper()
	c, err := NewClient(f.Endpoint(), cred)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// Pass forwards every request again, without latency or failures; held
// requests go on.
func (f *Faults) Pass() { f.set(modePass, 0, 0, 0) }

// Cut closes every connection, open ones (keep-alive, in flight) included,
// and closes new ones as soon as they are accepted: clients fail at once,
// as when the server's host is gone.
func (f *Faults) Cut() { f.set(modeCut, 0, 0, 0) }

// Blackhole accepts connections and holds every request, and every
// response body in flight, until another mode: clients see nothing and
// time out, as behind a silent network.
func (f *Faults) Blackhole() { f.set(modeBlackhole, 0, 0, 0) }

// Slow forwards every request after d (Slow(0) is Pass).
func (f *Faults) Slow(d time.Duration) { f.set(modePass, d, 0, 0) }

// Fail answers fraction (0 to 1) of the requests itself with status and
// S3's XML error for it (503 SlowDown, 500 InternalError, ...) and
// forwards the rest. Which ones fail follows the seeded generator: the
// same sequence of requests fails the same way on every run.
func (f *Faults) Fail(status int, fraction float64) {
	if fraction < 0 || fraction > 1 {
		panic(fmt.Sprintf("s3server: Fail fraction %v outside [0, 1]", fraction))
	}
	f.set(modePass, 0, status, fraction)
}

// Seed restarts the generator choosing failed requests from seed.
func (f *Faults) Seed(seed uint64) {
	f.mu.Lock()
	f.rnd = rand.New(rand.NewPCG(seed, seed))
	f.mu.Unlock()
}

// Counts is a copy of the counts per method (GET, PUT, HEAD, ...).
func (f *Faults) Counts() map[string]Count {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Count, len(f.counts))
	for m, c := range f.counts {
		out[m] = *c
	}
	return out
}

// Total is the counts of every method summed.
func (f *Faults) Total() Count {
	var t Count
	for _, c := range f.Counts() {
		t.Seen += c.Seen
		t.Failed += c.Failed
	}
	return t
}

// ResetCounts zeroes the counts.
func (f *Faults) ResetCounts() {
	f.mu.Lock()
	f.counts = map[string]*Count{}
	f.mu.Unlock()
}

// String is the mode and counts, for a test's messages.
func (f *Faults) String() string {
	f.mu.Lock()
	m, slow, status, fraction := f.mode, f.slow, f.status, f.fraction
	f.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s mode=%s slow=%v fail=%d×%.2f", f.Endpoint(), m, slow, status, fraction)
	counts := f.Counts()
	methods := make([]string, 0, len(counts))
	for m := range counts {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	for _, m := range methods {
		fmt.Fprintf(&b, " %s=%d/%d", m, counts[m].Failed, counts[m].Seen)
	}
	return b.String()
}

// Close stops the proxy: its listener and every connection.
func (f *Faults) Close() {
	f.srv.Close()
	f.Pass() // held handlers whose connection Close missed go on and end
}

func (f *Faults) set(m mode, slow time.Duration, status int, fraction float64) {
	f.mu.Lock()
	f.mode, f.slow, f.status, f.fraction = m, slow, status, fraction
	close(f.changed)
	f.changed = make(chan struct{})
	var victims []net.Conn
	if m == modeCut {
		for c := range f.conns {
			victims = append(victims, c)
		}
	}
	f.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
}

func (f *Faults) state() (mode, time.Duration, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mode, f.slow, f.changed
}

// waitPass blocks while blackholed; false when cut or done first.
func (f *Faults) waitPass(done <-chan struct{}) bool {
	for {
		m, _, ch := f.state()
		switch m {
		case modePass:
			return true
		case modeCut:
			return false
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

func (f *Faults) count(method string, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts[method]
	if c == nil {
		c = &Count{}
		f.counts[method] = c
	}
	if failed {
		c.Failed++
	} else {
		c.Seen++
	}
}

func (f *Faults) serve(w http.ResponseWriter, r *http.Request) {
	f.count(r.Method, false)
	if !f.waitPass(r.Context().Done()) {
		f.count(r.Method, true)
		panic(http.ErrAbortHandler) // closes the connection, no answer
	}
	_, slow, _ := f.state()
	if slow > 0 {
		// Not a wait for a condition: the latency the test asked for.
		t := time.NewTimer(slow)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			f.count(r.Method, true)
			return
		}
	}
	f.mu.Lock()
	status := f.status
	fail := f.fraction > 0 && f.rnd.Float64() < f.fraction
	f.mu.Unlock()
	if !fail {
		f.rp.ServeHTTP(w, r)
		return
	}
	f.count(r.Method, true)
	// Read the body as a server would before refusing: the client's write
	// of a large PUT must not fail before it reads the answer.
	io.Copy(io.Discard, io.LimitReader(r.Body, 1<<30))
	code, msg := s3Error(status)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", "s3server-faults")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>s3server-faults</RequestId></Error>`,
		code, msg, xmlEscape(r.URL.Path))
}

// s3Error is S3's error code and message for status.
func s3Error(status int) (code, msg string) {
	switch status {
	case http.StatusServiceUnavailable:
		return "SlowDown", "Please reduce your request rate."
	case http.StatusInternalServerError:
		return "InternalError", "We encountered an internal error. Please try again."
	case http.StatusForbidden:
		return "AccessDenied", "Access Denied"
	case http.StatusNotFound:
		return "NoSuchKey", "The specified key does not exist."
	case http.StatusBadRequest:
		return "BadRequest", "Bad Request"
	case http.StatusRequestTimeout:
		return "RequestTimeout", "Your socket connection to the server was not read from or written to within the timeout period."
	}
	return "InternalError", http.StatusText(status)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(s)
}

// heldBody holds a response body's bytes while blackholed and ends it
// when cut.
type heldBody struct {
	io.ReadCloser
	f    *Faults
	done <-chan struct{}
}

var errCut = errors.New("s3server: cut by the Faults proxy")

func (b *heldBody) Read(p []byte) (int, error) {
	if !b.f.waitPass(b.done) {
		return 0, errCut
	}
	return b.ReadCloser.Read(p)
}

// faultListener closes connections accepted while cut, and tracks the
// others so that Cut can close them.
type faultListener struct {
	net.Listener
	f *Faults
}

func (l *faultListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.f.mu.Lock()
		if l.f.mode == modeCut {
			l.f.mu.Unlock()
			c.Close() // refused: the client sees its connection end at once
			continue
		}
		tc := &trackedConn{Conn: c, f: l.f}
		l.f.conns[tc] = struct{}{}
		l.f.mu.Unlock()
		return tc, nil
	}
}

type trackedConn struct {
	net.Conn
	f    *Faults
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}
