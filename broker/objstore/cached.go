package objstore

import (
	"errors"
	"os"
)

// The page cache of written objects.
//
// An object's pages stay in the kernel's page cache after its fdatasync.
// Left alone, a broker writing hundreds of MB/s fills memory with them —
// charged, in Kubernetes, to the pod's memory cgroup, which then reclaims
// under the broker's feet — and each new write lands on pages never used
// before, which on a virtual machine whose memory the host backs lazily
// costs several times the copy itself (here: 1.8 ms of CPU per MB written
// into new pages, 0.4 ms into reused ones). So the store leaves the last
// CachedBytes it wrote cached — what readers close behind the tail and the
// segment merge read back — and drops the pages of older objects, clean by
// then, so that new writes reuse them. Dropping is advice: a later read
// simply reads the disk.

// DefaultCachedBytes is Options.CachedBytes unless set.
const DefaultCachedBytes = 256 << 20

// errDropUnsupported: the system has no call to drop a file's pages.
var errDropUnsupported = errors.New("objstore: dropping cached pages unsupported")

// recentObject is an object written and closed by this store, newest last.
type recentObject struct {
	id   uint64
	size int64
}

// wrote records that object id, size bytes, is durable and closed, and
// has older objects' pages dropped in the background once more than
// CachedBytes were written since them.
func (s *Store) wrote(id uint64, size int64) {
	if s.cachedBytes < 0 {
		return
	}
	s.mu.Lock()
	s.recent = append(s.recent, recentObject{id, size})
	s.recentBytes += size
	over := s.recentBytes > s.cachedBytes
	s.mu.Unlock()
	if over {
		s.kickRefill() // the refill loop calls dropOld
	}
}

// dropOld drops the pages of the objects written before the last
// CachedBytes. An object removed meanwhile has nothing left to drop.
func (s *Store) dropOld() {
	s.mu.Lock()
	k := s.recentHead
	for k < len(s.recent) && s.recentBytes > s.cachedBytes {
		s.recentBytes -= s.recent[k].size
		k++
	}
	old := append([]recentObject(nil), s.recent[s.recentHead:k]...)
	s.recentHead = k
	// Called after each object past the window, dropOld takes one or two
	// from the front: the list moves down only once half of it is spent.
	if s.recentHead > len(s.recent)/2 {
		s.recent = append(s.recent[:0], s.recent[s.recentHead:]...)
		s.recentHead = 0
	}
	s.mu.Unlock()
	for _, o := range old {
		f, err := os.Open(s.path(o.id))
		if err != nil {
			continue
		}
		if dropPages(f) == nil {
			s.dropped.Add(o.size)
		}
		f.Close()
	}
}
