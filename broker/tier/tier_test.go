package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	k := Keys{Prefix: "ns/demo/"}
	key := k.Segment(0x1_0000_0000_002a)
	if key != "ns/demo/segments/000100000000002a.obj" {
		t.Fatalf("key = %q", key)
	}
	if id, ok := k.ParseSegment(key); !ok || id != 0x1_0000_0000_002a {
		t.Fatalf("parse = %x %v", id, ok)
	}
	for _, bad := range []string{"ns/demo/segments/2a.obj", "other/segments/000100000000002a.obj", "ns/demo/segments/000100000000002a.tmp", "ns/demo/segments/zz0100000000002a.obj"} {
		if _, ok := k.ParseSegment(bad); ok {
			t.Errorf("ParseSegment(%q) accepted", bad)
		}
	}
}

func TestCacheStaysUnderItsBoundLeastRecentFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := OpenCache(dir, 300, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 100) }
	c.Put("a", 0, chunk('a'))
	c.Put("b", 0, chunk('b'))
	c.Put("c", 0, chunk('c'))
	if _, ok := c.Get("a", 0); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.Put("d", 0, chunk('d')) // evicts b, the least recent
	if _, ok := c.Get("b", 0); ok {
		t.Fatal("b kept past the bound")
	}
	for _, k := range []string{"a", "c", "d"} {
		if got, ok := c.Get(k, 0); !ok || got[0] != k[0] {
			t.Fatalf("%s: %q %v", k, got, ok)
		}
	}
	if c.Size() != 300 {
		t.Fatalf("size %d", c.Size())
	}
	c.Put("big", 0, make([]byte, 301)) // larger than the bound: not kept
	if c.Has("big", 0) || c.Size() != 300 {
		t.Fatal("kept a chunk larger than the bound")
	}
	// Reopened under a smaller bound: the newest files stay.
	time.Sleep(10 * time.Millisecond)
	c.Put("e", 0, chunk('e'))
	c2, err := OpenCache(dir, 150, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Has("e", 0) || c2.Size() != 100 {
		t.Fatalf("reopened: has e %v size %d", c2.Has("e", 0), c2.Size())
	}
}

// memBucket is a Bucket over a map, counting GETs: a stand-in for the
// reader's own logic (chunks, cache, checks, prefetch). The real S3
// client is tested against a real server (s3_test.go).
type memBucket struct {
	mu      sync.Mutex
	objects map[string][]byte
	gets    atomic.Int64
	block   chan struct{}
	// failFirst GETs answer TIER_UNREACHABLE (a throttling bucket).
	failFirst int64
}

func (m *memBucket) Put(_ context.Context, key string, body io.Reader, _ int64, _ string) error {
	b, err := io.ReadAll(body)
	m.mu.Lock()
	m.objects[key] = b
	m.mu.Unlock()
	return err
}

func (m *memBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if m.gets.Add(1) <= m.failFirst {
		return nil, Unreachable.With("op", "get", "key", key, "err", "503 SlowDown")
	}
	if m.block != nil {
		select {
		case <-m.block:
		case <-ctx.Done():
			return nil, Unreachable.With("op", "get", "key", key, "err", "timeout")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[key]
	if !ok {
		return nil, NotFound.With("op", "get", "key", key)
	}
	return append([]byte(nil), b[off:min(off+n, int64(len(b)))]...), nil
}

func (m *memBucket) Delete(context.Context, string) error { return nil }
func (m *memBucket) List(context.Context, string, func(string, int64, time.Time) error) error {
	return nil
}
func (m *memBucket) Probe(context.Context) error { return nil }
func (m *memBucket) Describe() (string, string)  { return "mem", "mem" }
func (m *memBucket) set(key string, b []byte)    { m.mu.Lock(); m.objects[key] = b; m.mu.Unlock() }
func sameAs(want []byte) func([]byte) error {
	return func(got []byte) error {
		if !bytes.Equal(got, want) {
			return fmt.Errorf("bytes differ")
		}
		return nil
	}
}

func TestReaderChunksCacheChecksAndPrefetch(t *testing.T) {
	t.Parallel()
	obj := make([]byte, 3*ChunkBytes+100)
	for i := range obj {
		obj[i] = byte(i * 7)
	}
	m := &memBucket{objects: map[string][]byte{"k": obj}}
	cache, err := OpenCache(t.TempDir(), 16*ChunkBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(m, cache, ReaderOptions{Prefetch: 0})
	size := int64(len(obj))
	// A range across a chunk boundary: two GETs, then none.
	off, n := int64(ChunkBytes-10), int64(30)
	got, err := r.Read(t.Context(), "k", size, off, n, sameAs(obj[off:off+n]))
	if err != nil || !bytes.Equal(got, obj[off:off+n]) || m.gets.Load() != 2 {
		t.Fatalf("read = %v, %d GETs", err, m.gets.Load())
	}
	if _, err := r.Read(t.Context(), "k", size, off, n, sameAs(obj[off:off+n])); err != nil || m.gets.Load() != 2 {
		t.Fatalf("cached read: %v, %d GETs", err, m.gets.Load())
	}
	// The tail chunk is short: read to the object's end.
	off = size - 50
	if _, err := r.Read(t.Context(), "k", size, off, 50, sameAs(obj[off:])); err != nil {
		t.Fatal(err)
	}

	// A cached chunk that fails its check is dropped and fetched again.
	cache.Put("k", 0, bytes.Repeat([]byte{0xff}, ChunkBytes))
	before := m.gets.Load()
	if _, err := r.Read(t.Context(), "k", size, 5, 10, sameAs(obj[5:15])); err != nil || m.gets.Load() != before+1 {
		t.Fatalf("damaged cache: %v, %d GETs", err, m.gets.Load()-before)
	}
	// The bucket's copy damaged too: TIER_CORRUPT, never the bytes.
	bad := append([]byte(nil), obj...)
	bad[7] ^= 1
	m.set("k", bad)
	cache.Drop("k", 0)
	if _, err := r.Read(t.Context(), "k", size, 5, 10, sameAs(obj[5:15])); !errors.Is(err, Corrupt) {
		t.Fatalf("damaged bucket: %v", err)
	}
	m.set("k", obj)

	// Prefetch: reading chunk 0 fetches chunks 1 and 2 in the background.
	cache2, _ := OpenCache(t.TempDir(), 16*ChunkBytes, nil)
	r2 := NewReader(m, cache2, ReaderOptions{Prefetch: 2})
	if _, err := r2.Read(t.Context(), "k", size, 0, 10, sameAs(obj[:10])); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !(cache2.Has("k", 1) && cache2.Has("k", 2)) {
		if time.Now().After(deadline) {
			t.Fatal("chunks 1 and 2 were not prefetched")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if cache2.Has("k", 3) {
		t.Fatal("prefetched past what was asked")
	}
}

func TestReaderFetchesAChunkOnceForConcurrentReaders(t *testing.T) {
	t.Parallel()
	obj := bytes.Repeat([]byte("x"), ChunkBytes)
	m := &memBucket{objects: map[string][]byte{"k": obj}, block: make(chan struct{})}
	r := NewReader(m, nil, ReaderOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Read(context.Background(), "k", int64(len(obj)), 0, 10, sameAs(obj[:10]))
			errs <- err
		}()
	}
	for m.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the others join the fetch in flight
	close(m.block)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if g := m.gets.Load(); g != 1 {
		t.Fatalf("%d GETs for one chunk read by 8 readers at once", g)
	}
}

func TestReaderTimesOutOnABucketThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	m := &memBucket{objects: map[string][]byte{"k": make([]byte, 100)}, block: make(chan struct{})}
	r := NewReader(m, nil, ReaderOptions{Timeout: 50 * time.Millisecond})
	if _, err := r.Read(context.Background(), "k", 100, 0, 10, func([]byte) error { return nil }); !errors.Is(err, Unreachable) {
		t.Fatalf("read of a bucket that does not answer = %v, want TIER_UNREACHABLE", err)
	}
}

func TestReaderAsksAThrottlingBucketAgain(t *testing.T) {
	t.Parallel()
	obj := bytes.Repeat([]byte("y"), 100)
	m := &memBucket{objects: map[string][]byte{"k": obj}, failFirst: 3}
	r := NewReader(m, nil, ReaderOptions{})
	if _, err := r.Read(context.Background(), "k", 100, 0, 10, sameAs(obj[:10])); err != nil || m.gets.Load() != 4 {
		t.Fatalf("read = %v after %d GETs, want success on the 4th", err, m.gets.Load())
	}
}
