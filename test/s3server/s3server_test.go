package s3server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/picomq/picomq/test/s3server"
)

const bucket = "tier"

var (
	first  = s3server.Credential{AccessKey: "first-key", SecretKey: "first-secret-0123456789abcdef"}
	second = s3server.Credential{AccessKey: "second-key", SecretKey: "second-secret-0123456789abcdef"}
)

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// readErr is the error of a GET read at once: minio-go's Stat would send
// a HEAD, whose error has no body to name its code.
func readErr(c *minio.Client, t *testing.T, key string) error {
	o, err := c.GetObject(ctx(t, 10*time.Second), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer o.Close()
	_, err = io.ReadAll(o)
	return err
}

func payload(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestServer: one server, its proxy, and every fault mode in turn.
func TestServer(t *testing.T) {
	start := time.Now()
	s := s3server.Start(t, s3server.Options{Credentials: []s3server.Credential{first, second}, Buckets: []string{bucket}})
	t.Logf("Start (weed up, S3 answering, bucket made and written): %v", time.Since(start))
	f := s.Proxy(t)
	c := f.Client(first)
	data := payload(5 << 20)

	t.Run("PutGetRangeThroughProxy", func(t *testing.T) {
		if _, err := c.PutObject(ctx(t, 30*time.Second), bucket, "seg/0001", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		o, err := c.GetObject(ctx(t, 30*time.Second), bucket, "seg/0001", minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(o)
		o.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes (err %v), want the %d put", len(got), err, len(data))
		}
		var opts minio.GetObjectOptions
		opts.SetRange(1<<20, 1<<20+4095)
		o, err = c.GetObject(ctx(t, 30*time.Second), bucket, "seg/0001", opts)
		if err != nil {
			t.Fatal(err)
		}
		got, err = io.ReadAll(o)
		o.Close()
		if err != nil || !bytes.Equal(got, data[1<<20:1<<20+4096]) {
			t.Fatalf("ranged read: %d bytes (err %v), want bytes [1MiB, 1MiB+4096)", len(got), err)
		}
		if keys := s.Keys(t, bucket, "seg/"); !slices.Equal(keys, []string{"seg/0001"}) {
			t.Fatalf("keys %v", keys)
		}
		if n := f.Counts()["GET"].Seen; n < 2 {
			t.Fatalf("proxy saw %d GETs, want the 2 made through it: %v", n, f)
		}
	})

	t.Run("Fail503", func(t *testing.T) {
		// The same 200 requests after the same seed fail the same way,
		// about half of them, each with S3's SlowDown.
		run := func(n int) []bool {
			f.Seed(42)
			f.ResetCounts()
			f.Fail(http.StatusServiceUnavailable, 0.5)
			defer f.Pass()
			failed := make([]bool, n)
			for i := range failed {
				_, err := c.StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{})
				if err != nil {
					if r := minio.ToErrorResponse(err); r.StatusCode != http.StatusServiceUnavailable {
						t.Fatalf("request %d: %v (status %d), want 503 or success", i, err, r.StatusCode)
					}
					failed[i] = true
				}
			}
			return failed
		}
		a := run(200)
		n := 0
		for _, x := range a {
			if x {
				n++
			}
		}
		if n < 60 || n > 140 {
			t.Fatalf("%d of 200 requests failed at fraction 0.5", n)
		}
		if got := f.Total(); got.Seen != 200 || got.Failed != n {
			t.Fatalf("counts %+v, want 200 seen and %d failed", got, n)
		}
		// minio-go pauses after each refusal even without retries: a
		// shorter second run keeps the test quick.
		if b := run(60); !slices.Equal(a[:60], b) {
			t.Fatal("the same seed failed other requests")
		}
		t.Logf("%d of 200 failed", n)

		// A GET's error carries S3's XML: the client parses the code.
		f.Fail(http.StatusServiceUnavailable, 1)
		err := readErr(c, t, "seg/0001")
		if r := minio.ToErrorResponse(err); r.Code != "SlowDown" || r.StatusCode != 503 {
			t.Fatalf("GET at 100%% 503: %v (%+v), want SlowDown", err, r)
		}
		f.Fail(http.StatusInternalServerError, 1)
		err = c.MakeBucket(ctx(t, 10*time.Second), "other", minio.MakeBucketOptions{Region: s3server.Region})
		if r := minio.ToErrorResponse(err); r.Code != "InternalError" || r.StatusCode != 500 {
			t.Fatalf("PUT at 100%% 500: %v (%+v), want InternalError", err, r)
		}
		f.Pass()
	})

	t.Run("CutFailsFastPassRestores", func(t *testing.T) {
		// A keep-alive connection is open from the requests above: Cut
		// must close it too.
		f.Cut()
		begin := time.Now()
		_, err := c.StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{})
		if err == nil {
			t.Fatal("a request through a cut proxy succeeded")
		}
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("a cut request took %v to fail, want at once", d)
		}
		f.Pass()
		if _, err := c.StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{}); err != nil {
			t.Fatalf("after Pass: %v", err)
		}
	})

	t.Run("BlackholeTimesOut", func(t *testing.T) {
		f.Blackhole()
		begin := time.Now()
		_, err := c.StatObject(ctx(t, time.Second), bucket, "seg/0001", minio.StatObjectOptions{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("through a blackhole: %v after %v, want the 1 s deadline", err, time.Since(begin))
		}
		f.Pass()
		if _, err := c.StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{}); err != nil {
			t.Fatalf("after Pass: %v", err)
		}
	})

	t.Run("Slow", func(t *testing.T) {
		f.Slow(300 * time.Millisecond)
		begin := time.Now()
		if _, err := c.StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d < 300*time.Millisecond {
			t.Fatalf("a request at 300 ms latency took %v", d)
		}
		f.Pass()
	})

	t.Run("Corrupt", func(t *testing.T) {
		i := s.Corrupt(t, bucket, "seg/0001")
		got := s.Get(t, bucket, "seg/0001")
		if len(got) != len(data) {
			t.Fatalf("corrupt object is %d bytes, was %d", len(got), len(data))
		}
		if bytes.Equal(got, data) || got[i] != ^data[i] {
			t.Fatalf("byte %d not inverted", i)
		}
		s.Put(t, bucket, "seg/0001", data)
	})

	t.Run("RestartKeepsData", func(t *testing.T) {
		s.Restart()
		if got := s.Get(t, bucket, "seg/0001"); !bytes.Equal(got, data) {
			t.Fatalf("after a restart: %d bytes, not the object put", len(got))
		}
		// The proxy follows: same port.
		if _, err := c.StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{}); err != nil {
			t.Fatalf("through the proxy after a restart: %v", err)
		}
	})

	t.Run("KillThenRestart", func(t *testing.T) {
		s.Put(t, bucket, "seg/0002", []byte("acknowledged before the kill"))
		s.Kill()
		if _, err := c.StatObject(ctx(t, 5*time.Second), bucket, "seg/0001", minio.StatObjectOptions{}); err == nil {
			t.Fatal("a killed server answered")
		}
		s.Restart()
		if got := s.Get(t, bucket, "seg/0002"); string(got) != "acknowledged before the kill" {
			t.Fatalf("after kill -9 and restart: %q", got)
		}
	})

	t.Run("RotatedCredentials", func(t *testing.T) {
		s.Restart(second)
		_, err := f.Client(first).StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{})
		if r := minio.ToErrorResponse(err); r.StatusCode != http.StatusForbidden {
			t.Fatalf("the dropped key: %v (%+v), want 403", err, r)
		}
		// A GET's body names the reason.
		err = readErr(f.Client(first), t, "seg/0001")
		if r := minio.ToErrorResponse(err); r.StatusCode != http.StatusForbidden || r.Code != "InvalidAccessKeyId" {
			t.Fatalf("the dropped key's GET: %v (%+v), want InvalidAccessKeyId", err, r)
		}
		if _, err := f.Client(second).StatObject(ctx(t, 10*time.Second), bucket, "seg/0001", minio.StatObjectOptions{}); err != nil {
			t.Fatalf("the kept key: %v", err)
		}
	})
}
