package s3server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credential is one S3 access key and its secret.
type Credential struct {
	AccessKey string
	SecretKey string
}

// Options configure Start.
type Options struct {
	// Dir holds the server's data; empty means a new t.TempDir(). A Dir
	// used before by a stopped server starts with that server's objects.
	Dir string
	// Credentials are the identities the S3 API accepts, each with every
	// action (Admin, Read, Write, List, Tagging). Empty means one,
	// DefaultCredential.
	Credentials []Credential
	// Buckets are created at Start (an existing one is kept).
	Buckets []string
	// StartTimeout bounds the wait for the S3 API; default 60 s.
	StartTimeout time.Duration
	// IP is the address the server and its proxies listen on; default
	// 127.0.0.1. Another address of the host (the e2e stack's end of its
	// pod network) lets clients in other network namespaces reach them.
	IP string
}

// DefaultCredential is the identity of a Start without Credentials.
var DefaultCredential = Credential{AccessKey: "picomq-test", SecretKey: "picomq-test-secret-0123456789"}

// Region is the region clients sign for; SeaweedFS accepts any, and naming
// one spares minio-go a bucket-location lookup before every first request.
const Region = "us-east-1"

// Server is one weed process serving the S3 API on loopback.
type Server struct {
	t       testing.TB
	weed    string
	ip      string // what every listener binds (Options.IP)
	dir     string // data: volumes, the master's and the filer's metadata
	home    string // the process's HOME and working folder, the S3 config
	sockets string // its unix sockets: short paths, outside t.TempDir
	logPath string
	ports   struct{ master, masterGRPC, volume, volumeGRPC, filer, filerGRPC, s3, s3GRPC int }

	mu      sync.Mutex
	creds   []Credential
	buckets []string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
}

// Start runs weed server (master, volume server, filer and S3 gateway in
// one process) on free loopback ports, waits until the S3 API answers and
// a write lands, creates o.Buckets, and stops the process at t's cleanup.
// It skips t as Require does.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{t: t, weed: Require(t), ip: o.IP, dir: o.Dir, creds: o.Credentials, buckets: o.Buckets}
	if s.ip == "" {
		s.ip = "127.0.0.1"
	}
	if len(s.creds) == 0 {
		s.creds = []Credential{DefaultCredential}
	}
	if s.dir == "" {
		s.dir = t.TempDir()
	}
	s.home = t.TempDir()
	s.logPath = filepath.Join(s.home, "weed.log")
	// The default socket paths (/tmp/seaweedfs-*-<port>.sock) are shared by
	// every server on the machine; t.TempDir paths can pass the 108-byte limit.
	var err error
	if s.sockets, err = os.MkdirTemp("", "s3srv"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*int{&s.ports.master, &s.ports.masterGRPC, &s.ports.volume, &s.ports.volumeGRPC,
		&s.ports.filer, &s.ports.filerGRPC, &s.ports.s3, &s.ports.s3GRPC} {
		if *p, err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		s.stop()
		os.RemoveAll(s.sockets)
		s.removeGRPCSockets()
		if t.Failed() {
			s.logTail()
		}
	})
	timeout := o.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	if err := s.start(timeout); err != nil {
		t.Fatalf("s3server: %v", err)
	}
	c := s.admin()
	for _, b := range o.Buckets {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.MakeBucket(ctx, b, minio.MakeBucketOptions{Region: Region})
		if err != nil {
			if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
				err = nil // a Dir from an earlier server
			}
		}
		if err == nil {
			// The first write into a bucket makes the master grow volumes
			// for it: done here, so a test's first write is not the slow one.
			err = probeWrite(ctx, c, b)
		}
		cancel()
		if err != nil {
			t.Fatalf("s3server: bucket %s: %v", b, err)
		}
	}
	return s
}

const probeKey = ".s3server-probe"

func probeWrite(ctx context.Context, c *minio.Client, bucket string) error {
	if _, err := c.PutObject(ctx, bucket, probeKey, bytes.NewReader([]byte("probe")), 5, minio.PutObjectOptions{}); err != nil {
		return err
	}
	return c.RemoveObject(ctx, bucket, probeKey, minio.RemoveObjectOptions{})
}

// Endpoint is the S3 API's URL, http://<Options.IP>:port (direct, no proxy).
func (s *Server) Endpoint() string { return "http://" + s.Addr() }

// Addr is the S3 API's host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.ip, strconv.Itoa(s.ports.s3)) }

// Pid is the weed process's id while it runs, 0 while it is stopped (a
// benchmark counts its CPU).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Dir is the data folder (Options.Dir or the one Start made).
func (s *Server) Dir() string { return s.dir }

// LogPath is the process's log file; every start appends to it.
func (s *Server) LogPath() string { return s.logPath }

// Credentials are the identities the running server accepts.
func (s *Server) Credentials() []Credential {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Credential(nil), s.creds...)
}

// Restart stops the server (SIGTERM; a killed one is just started) and
// starts it again on the same data folder and ports, and returns once a
// write into the first of Options.Buckets lands (about 17 s: see below).
// With creds, the new process accepts those identities only: a key left
// out is refused (403), as after a rotation.
func (s *Server) Restart(creds ...Credential) {
	s.t.Helper()
	s.stop()
	if len(creds) > 0 {
		s.mu.Lock()
		s.creds = append([]Credential(nil), creds...)
		s.mu.Unlock()
	}
	if err := s.start(60 * time.Second); err != nil {
		s.t.Fatalf("s3server: restart: %v", err)
	}
	if len(s.buckets) == 0 {
		return
	}
	// A restarted master refuses to place new writes for 15 s (three of
	// its fixed 5 s pulses: its volume servers may not have reported yet);
	// the gateway holds a PUT meanwhile. Restart returns once writes land,
	// so that a test's first write after it is not a 15 s outlier.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := probeWrite(ctx, s.admin(), s.buckets[0])
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("s3server: restart: no write accepted after 60 s: %v", err)
		}
	}
}

// Kill SIGKILLs the process, as a crash would, and waits for it to be gone.
// Requests then fail with connection refused until Restart.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// Client is an S3 client of the server's API, direct (no proxy), signing
// as cred.
func (s *Server) Client(cred Credential) *minio.Client {
	s.t.Helper()
	c, err := NewClient(s.Endpoint(), cred)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// NewClient is an S3 client of endpoint (http://host:port: a Server's or a
// Faults proxy's) signing as cred. It makes one attempt per request (no
// retry), so a test sees every refusal as the server or the proxy gave it.
func NewClient(endpoint string, cred Credential) (*minio.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	return minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cred.AccessKey, cred.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
}

// admin is a client signing as the first current identity.
func (s *Server) admin() *minio.Client { return s.Client(s.Credentials()[0]) }

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// Keys lists the keys under prefix in bucket, sorted, recursively.
func (s *Server) Keys(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	var keys []string
	for o := range s.admin().ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("s3server: list %s/%s: %v", bucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	sort.Strings(keys)
	return keys
}

// Get reads an object whole.
func (s *Server) Get(t testing.TB, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	o, err := s.admin().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err == nil {
		defer o.Close()
		var b []byte
		if b, err = io.ReadAll(o); err == nil {
			return b
		}
	}
	t.Fatalf("s3server: get %s/%s: %v", bucket, key, err)
	return nil
}

// Put writes an object.
func (s *Server) Put(t testing.TB, bucket, key string, b []byte) {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	if _, err := s.admin().PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("s3server: put %s/%s: %v", bucket, key, err)
	}
}

// Corrupt overwrites an object with the same bytes but one, in its middle,
// inverted: same key, same length, so only a check of the contents (a
// checksum) can tell. It returns the offset changed.
func (s *Server) Corrupt(t testing.TB, bucket, key string) int {
	t.Helper()
	b := s.Get(t, bucket, key)
	if len(b) == 0 {
		t.Fatalf("s3server: corrupt %s/%s: the object is empty", bucket, key)
	}
	i := len(b) / 2
	b[i] ^= 0xff
	s.Put(t, bucket, key, b)
	return i
}

// s3Config is SeaweedFS's -s3.config file (its identities' JSON form).
type s3Config struct {
	Identities []s3Identity `json:"identities"`
}

type s3Identity struct {
	Name        string         `json:"name"`
	Credentials []s3Credential `json:"credentials"`
	Actions     []string       `json:"actions"`
}

type s3Credential struct {
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
}

func (s *Server) writeConfig() (string, error) {
	var c s3Config
	for i, cr := range s.Credentials() {
		c.Identities = append(c.Identities, s3Identity{
			Name:        fmt.Sprintf("picomq-%d", i),
			Credentials: []s3Credential{{AccessKey: cr.AccessKey, SecretKey: cr.SecretKey}},
			Actions:     []string{"Admin", "Read", "Write", "List", "Tagging"},
		})
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(s.home, "s3.json")
	return p, os.WriteFile(p, b, 0o600)
}

// args are weed's arguments: everything on Options.IP with ports of ours
// (gRPC ports included: weed's default, port+10000, may be taken), the
// extra listeners (Iceberg, Lance, IAM) off, telemetry off.
func (s *Server) args(config string) []string {
	p := s.ports
	itoa := strconv.Itoa
	return []string{
		"-logtostderr", // glog's files would otherwise land in /tmp
		"server",
		"-dir=" + s.dir,
		"-ip=" + s.ip,
		"-ip.bind=" + s.ip,
		"-master.port=" + itoa(p.master),
		"-master.port.grpc=" + itoa(p.masterGRPC),
		"-master.telemetry=false",
		// A lone master waits a whole election timeout (10 s by default)
		// before it leads, and nothing is written until it does.
		"-master.electionTimeout=1s",
		"-master.heartbeatInterval=100ms",
		"-master.volumeSizeLimitMB=256",
		"-volume.port=" + itoa(p.volume),
		"-volume.port.grpc=" + itoa(p.volumeGRPC),
		"-volume.max=16",
		// Its default 10 s pause before stopping would slow every Restart.
		"-volume.preStopSeconds=0",
		"-filer",
		"-filer.port=" + itoa(p.filer),
		"-filer.port.grpc=" + itoa(p.filerGRPC),
		"-filer.localSocket=" + filepath.Join(s.sockets, "filer.sock"),
		"-s3",
		"-s3.port=" + itoa(p.s3),
		"-s3.port.grpc=" + itoa(p.s3GRPC),
		"-s3.port.iceberg=0",
		"-s3.port.lance=0",
		"-s3.iam=false",
		"-s3.config=" + config,
		"-s3.localSocket=" + filepath.Join(s.sockets, "s3.sock"),
		// As on AWS: a write into a bucket nobody created is refused.
		"-s3.autoCreateBucket=false",
	}
}

// env is the test's environment without what weed would take as
// configuration: AWS_* credentials (merged into its identities), WEED_*
// settings, a Sentry DSN; HOME is ours, so no ~/.seaweedfs/*.toml applies.
func (s *Server) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "AWS_"), strings.HasPrefix(k, "WEED_"), strings.HasPrefix(k, "SENTRY_"), k == "HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+s.home,
		// A master that has just minted its topology holds volume
		// allocation ~5 s, against a volume server still reporting an older
		// cluster's ids; here the only volume server is its own.
		"WEED_MASTER_VOLUME_GROWTH_ALLOCATION_DEFERRAL=0s")
}

func (s *Server) start(timeout time.Duration) error {
	config, err := s.writeConfig()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	args := s.args(config)
	fmt.Fprintf(log, "=== s3server %s: %s %s\n", time.Now().Format(time.RFC3339Nano), s.weed, strings.Join(args, " "))
	cmd := exec.Command(s.weed, args...)
	cmd.Dir = s.home
	cmd.Env = s.env()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return s.waitReady(exited, timeout)
}

// waitReady polls a signed ListBuckets until it succeeds: then the filer
// behind the gateway answers and the identities are loaded.
func (s *Server) waitReady(exited <-chan struct{}, timeout time.Duration) error {
	c := s.admin()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, last = c.ListBuckets(ctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("weed exited before its S3 API answered (log: %s)", s.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("S3 API not ready after %v: %v (log: %s)", timeout, last, s.logPath)
		}
		time.Sleep(50 * time.Millisecond) // polling a process that gives no readiness signal
	}
}

// stop sends SIGTERM, then SIGKILL after 2 s, and waits for the process.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	// weed server's volume server and filer stop and flush within
	// milliseconds of a SIGTERM, but its master and S3 gateway keep the
	// process alive past any wait: what is left is killed.
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// removeGRPCSockets removes the unix sockets weed makes beside its gRPC
// ports at paths it does not let us choose (/tmp/seaweedfs-<kind>-grpc-
// <port>.sock) and leaves behind when killed.
func (s *Server) removeGRPCSockets() {
	p := s.ports
	for kind, port := range map[string]int{"master": p.masterGRPC, "volume": p.volumeGRPC, "filer": p.filerGRPC, "s3": p.s3GRPC} {
		os.Remove(fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", kind, port))
	}
}

// logTail logs the end of the process's log, for a failed test.
func (s *Server) logTail() {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		s.t.Logf("s3server: no weed log: %v", err)
		return
	}
	const max = 32 << 10
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	s.t.Logf("s3server: weed log (%s, last %d bytes):\n%s", s.logPath, len(b), b)
}

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// freePort is a loopback port free now and not handed out before by this
// process (a server keeps its ports across restarts, when they are closed).
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("s3server: no free loopback port after 100 tries")
}
