package tier

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ChunkBytes is the unit the reader fetches and caches: large enough that
// a catch-up reader's GETs are few, small enough that a point read of one
// frame does not fetch a whole segment.
const ChunkBytes = 1 << 20

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	// Prefetch is how many chunks after the one read are fetched in the
	// background (0: none).
	Prefetch int
	// Timeout bounds one GET (default 10 s): a reader waits no longer
	// for a bucket that does not answer before it is told 503.
	Timeout time.Duration
	Metrics *Metrics
}

// Reader reads byte ranges of tiered segments through the cache.
type Reader struct {
	bucket Bucket
	cache  *Cache
	o      ReaderOptions

	mu       sync.Mutex
	inflight map[string]*fetch
	prefetch chan struct{} // bounds background fetches
}

type fetch struct {
	done chan struct{}
	b    []byte
	err  error
}

// NewReader reads from bucket through cache (nil: no cache).
func NewReader(bucket Bucket, cache *Cache, o ReaderOptions) *Reader {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Reader{bucket: bucket, cache: cache, o: o, inflight: map[string]*fetch{}, prefetch: make(chan struct{}, 2)}
}

// Read returns n bytes of the segment key (size bytes in all) from off.
// check vouches for the bytes (a frame's CRC): when it refuses bytes that
// came from the cache, those chunks are dropped and fetched again from the
// bucket; when it refuses fresh bytes the answer is TIER_CORRUPT.
func (r *Reader) Read(ctx context.Context, key string, size, off, n int64, check func([]byte) error) ([]byte, error) {
	first, last := off/ChunkBytes, (off+n-1)/ChunkBytes
	for attempt := 0; ; attempt++ {
		buf := make([]byte, 0, n)
		cached := false
		for k := first; k <= last; k++ {
			chunk, hit, err := r.chunk(ctx, key, size, k, attempt > 0)
			if err != nil {
				return nil, err
			}
			cached = cached || hit
			lo, hi := max(off, k*ChunkBytes)-k*ChunkBytes, min(off+n, (k+1)*ChunkBytes)-k*ChunkBytes
			if hi > int64(len(chunk)) {
				hi = int64(len(chunk)) // short: check refuses it
			}
			if lo < hi {
				buf = append(buf, chunk[lo:hi]...)
			}
		}
		r.prefetchAfter(key, size, last)
		err := check(buf)
		if err == nil {
			return buf, nil
		}
		r.o.Metrics.CorruptReads.Inc()
		for k := first; k <= last; k++ {
			r.cache.Drop(key, k)
		}
		if !cached || attempt > 0 {
			return nil, Corrupt.With("key", key, "pos", off, "err", err.Error())
		}
	}
}

// chunk returns chunk k of key, from the cache unless fresh.
func (r *Reader) chunk(ctx context.Context, key string, size, k int64, fresh bool) ([]byte, bool, error) {
	if !fresh {
		if b, ok := r.cache.Get(key, k); ok {
			r.o.Metrics.CacheHits.Inc()
			return b, true, nil
		}
	}
	r.o.Metrics.CacheMisses.Inc()
	b, err := r.fetch(ctx, key, size, k)
	return b, false, err
}

// fetch GETs chunk k once for every concurrent reader of it and caches it.
func (r *Reader) fetch(ctx context.Context, key string, size, k int64) ([]byte, error) {
	name := chunkName(key, k)
	r.mu.Lock()
	if f, ok := r.inflight[name]; ok {
		r.mu.Unlock()
		select {
		case <-f.done:
			return f.b, f.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	f := &fetch{done: make(chan struct{})}
	r.inflight[name] = f
	r.mu.Unlock()

	// Detached from the caller: a fetch others wait on, or a prefetch,
	// finishes even if the reader that started it goes away.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.Timeout)
	off := k * ChunkBytes
	n := min(ChunkBytes, size-off)
	start := time.Now()
	if n <= 0 {
		f.err = Corrupt.With("key", key, "pos", off, "err", "read past the segment's recorded size")
	} else {
		// A throttling or flaky bucket (503 SlowDown) is asked again,
		// backing off, within the timeout: an evicted segment has no other
		// copy to fall back to.
		for wait := 50 * time.Millisecond; ; wait *= 2 {
			f.b, f.err = r.bucket.GetRange(gctx, key, off, n)
			if f.err == nil || !errors.Is(f.err, Unreachable) || gctx.Err() != nil {
				break
			}
			select {
			case <-time.After(wait):
			case <-gctx.Done():
			}
		}
	}
	cancel()
	r.o.Metrics.ReadSeconds.Observe(time.Since(start).Seconds())
	if f.err == nil {
		r.o.Metrics.ReadBytes.Add(float64(len(f.b)))
		if int64(len(f.b)) == n {
			r.cache.Put(key, k, f.b)
		}
	}
	r.mu.Lock()
	delete(r.inflight, name)
	r.mu.Unlock()
	close(f.done)
	return f.b, f.err
}

// prefetchAfter fetches the chunks after chunk last in the background,
// as far as Prefetch says and the slots allow.
func (r *Reader) prefetchAfter(key string, size, last int64) {
	for k := last + 1; k <= last+int64(r.o.Prefetch) && k*ChunkBytes < size; k++ {
		if r.cache.Has(key, k) {
			continue
		}
		select {
		case r.prefetch <- struct{}{}:
		default:
			return // enough in flight
		}
		go func(k int64) {
			defer func() { <-r.prefetch }()
			r.fetch(context.Background(), key, size, k)
		}(k)
	}
}
