package tier

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Cache keeps chunks of tiered segments on local disk, least recently
// used first out, under a byte bound. It is a cache: nothing is synced,
// a file a crash tore is caught by the readers' frame checks (and dropped),
// and the directory may be emptied at any time.
type Cache struct {
	dir     string
	limit   int64
	metrics *Metrics

	mu    sync.Mutex
	size  int64
	lru   *list.List // of *cacheEntry, most recent at the front
	index map[string]*list.Element
}

type cacheEntry struct {
	name string
	size int64
}

// OpenCache opens dir (created when missing), keeping what a previous
// process left under the bound, newest first.
func OpenCache(dir string, limit int64, m *Metrics) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, limit: limit, metrics: m, lru: list.New(), index: map[string]*list.Element{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type found struct {
		name string
		size int64
		mod  int64
	}
	var fs []found
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp") {
			os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		fs = append(fs, found{e.Name(), info.Size(), info.ModTime().UnixNano()})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mod > fs[j].mod })
	for _, f := range fs {
		if c.size+f.size > limit {
			os.Remove(filepath.Join(dir, f.name))
			continue
		}
		c.index[f.name] = c.lru.PushBack(&cacheEntry{f.name, f.size})
		c.size += f.size
	}
	c.gauge()
	return c, nil
}

func chunkName(key string, chunk int64) string {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-%d", hex.EncodeToString(sum[:16]), chunk)
}

// Get returns a cached chunk.
func (c *Cache) Get(key string, chunk int64) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	name := chunkName(key, chunk)
	c.mu.Lock()
	el, ok := c.index[name]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(c.dir, name))
	if err != nil {
		c.Drop(key, chunk)
		return nil, false
	}
	return b, true
}

// Has says whether a chunk is cached, without touching its place.
func (c *Cache) Has(key string, chunk int64) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.index[chunkName(key, chunk)]
	return ok
}

// Put caches a chunk, evicting the least recently used ones to stay under
// the bound; a chunk larger than the bound is not kept.
func (c *Cache) Put(key string, chunk int64, b []byte) {
	if c == nil || int64(len(b)) > c.limit {
		return
	}
	name := chunkName(key, chunk)
	tmp, err := os.CreateTemp(c.dir, ".tmp")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), filepath.Join(c.dir, name)) != nil {
		os.Remove(tmp.Name())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[name]; ok {
		c.size -= el.Value.(*cacheEntry).size
		c.lru.Remove(el)
	}
	c.index[name] = c.lru.PushFront(&cacheEntry{name, int64(len(b))})
	c.size += int64(len(b))
	for c.size > c.limit {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.index, e.name)
		c.size -= e.size
		os.Remove(filepath.Join(c.dir, e.name))
	}
	c.gauge()
}

// Drop forgets a chunk (one that failed its checks).
func (c *Cache) Drop(key string, chunk int64) {
	if c == nil {
		return
	}
	name := chunkName(key, chunk)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[name]; ok {
		c.size -= el.Value.(*cacheEntry).size
		c.lru.Remove(el)
		delete(c.index, name)
		os.Remove(filepath.Join(c.dir, name))
		c.gauge()
	}
}

// Size is the bytes cached.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

func (c *Cache) gauge() {
	if c.metrics != nil {
		c.metrics.CacheBytes.Set(float64(c.size))
	}
}
