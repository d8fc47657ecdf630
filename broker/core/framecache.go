package core

import (
	"container/list"
	"sync"
)

// frameCache keeps recently read frame payloads (catch-up readers read the
// same frame many times), bounded by bytes, least recently used out first.
type frameCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	ll    *list.List
	// perObject indexes the cached frames by object, then position, so
	// that dropping an object costs its own frames, not a pass over the
	// whole cache.
	perObject map[uint64]map[int64]*list.Element
}

type frameKey struct {
	object uint64
	pos    int64
}

type frameItem struct {
	key frameKey
	p   []byte
}

func newFrameCache(limit int64) *frameCache {
	return &frameCache{limit: limit, ll: list.New(), perObject: map[uint64]map[int64]*list.Element{}}
}

func (c *frameCache) get(k frameKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.perObject[k.object][k.pos]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*frameItem).p, true
	}
	return nil, false
}

func (c *frameCache) put(k frameKey, p []byte) {
	if int64(len(p)) > c.limit/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	frames := c.perObject[k.object]
	if _, ok := frames[k.pos]; ok {
		return
	}
	if frames == nil {
		frames = map[int64]*list.Element{}
		c.perObject[k.object] = frames
	}
	frames[k.pos] = c.ll.PushFront(&frameItem{key: k, p: p})
	c.size += int64(len(p))
	for c.size > c.limit {
		c.remove(c.ll.Back())
	}
}

// dropObject forgets an object's frames (it is being deleted).
func (c *frameCache) dropObject(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, el := range c.perObject[id] {
		c.remove(el)
	}
}

// remove drops one cached frame. Called with c.mu held.
func (c *frameCache) remove(el *list.Element) {
	it := el.Value.(*frameItem)
	c.ll.Remove(el)
	c.size -= int64(len(it.p))
	frames := c.perObject[it.key.object]
	delete(frames, it.key.pos)
	if len(frames) == 0 {
		delete(c.perObject, it.key.object)
	}
}
