package objstore

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/diskio"
	"github.com/picomq/picomq/broker/stream"
)

const (
	defaultPoolSize     = 4
	defaultMaxOpenFiles = 256
	defaultMaxHeldBytes = 64 << 20

	// maxSpare bounds the removed objects' files kept, empty and closed,
	// for reuse (see Remove).
	maxSpare = 4096
)

// Options configures Open. The zero value is usable.
type Options struct {
	// MinNextID is the lowest id the store may hand out. The caller passes
	// one more than the highest id its metadata ever knew, because a removed
	// file leaves no trace the store could see.
	MinNextID uint64

	// IDBase, when set, is the first id of this store's own range, of
	// IDSpan ids: a cluster member allocates its objects' ids there, so
	// that members never hand out the same id without asking one another
	// (the files of other members' objects, which a replica keeps here, do
	// not move this store's next id). With a range the store also reserves
	// ids ahead in a file of the directory (NEXT), fsynced, so that an id is
	// never handed out twice even when this member's metadata is not
	// replayed yet at start and an object left no file (one held in memory
	// when the process died).
	IDBase uint64

	// PoolSize is how many files the store keeps created ahead of Create:
	// 0 means 4; a negative value keeps none, so each Create pays a directory
	// fsync (for comparison and tests).
	PoolSize int

	// MaxOpenFiles bounds the read handles kept open for ReadFrame: 0 means
	// 256.
	MaxOpenFiles int

	// MaxHeldBytes bounds the frames Hold keeps in memory: past it, the
	// oldest are spilled to files until half of it is left. 0 means
	// 64 MiB; negative, no bound.
	MaxHeldBytes int64

	// CachedBytes is how many bytes of the objects it wrote last the store
	// leaves in the page cache; older objects' pages are dropped (see
	// cached.go). 0 means 256 MiB; negative, never drop.
	CachedBytes int64

	// FS is the storage seam objects are created, written and synced
	// through (default diskio.OS); tests inject faults with diskio.Faulty.
	FS diskio.FS

	// SyncFailed, when set, is told when an object's fdatasync failed:
	// the store then refuses every later Create (see Failed), since what
	// the kernel could not write may be gone from its cache as well.
	SyncFailed func(op, path string, err error)
}

// Info describes one object file.
type Info struct {
	ID      uint64
	Size    int64 // the file's length; HeaderSize or less means it holds no frame
	ModTime time.Time

	// Writing is set while a Writer of this Store has the object open, so
	// that orphan collection can leave it alone whatever its age.
	Writing bool
}

// Store is one directory of objects. It is safe for concurrent use.
type Store struct {
	fs         diskio.FS
	syncFailed func(op, path string, err error)
	failed     atomic.Pointer[error] // the first fdatasync failure: no Create after it

	idBase   uint64 // Options.IDBase: 0, or the first id of the store's range
	reserved uint64 // with a range, ids below this one are reserved in NEXT (guarded by mu)

	dir   string
	dirf  *os.File // kept open for the directory fsyncs of pool refills
	cache *handleCache

	poolSize int
	kick     chan struct{} // wakes the refill goroutine; capacity 1
	stop     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	nextID  uint64
	ready   []poolFile          // pool files ready to hand out, oldest first
	spare   []uint64            // recycled files under new ids, closed, waiting for a refill
	pooled  map[uint64]bool     // ids of pool files: ready, spare or being created
	writing map[uint64]struct{} // ids with an open Writer

	held      map[uint64]*heldObject // objects kept in memory (held.go)
	heldOrder []uint64               // held ids, oldest first; may list ids no longer held
	heldBytes int64
	maxHeld   int64
	spillMu   sync.Mutex // one spill at a time

	cachedBytes int64          // Options.CachedBytes, defaulted
	recent      []recentObject // objects written, oldest first, whose pages may be cached
	recentHead  int            // recent[:recentHead] are dropped already
	recentBytes int64          // the sizes' sum of recent[recentHead:]

	dirSyncs     atomic.Int64 // directory fsyncs done, for tests
	slowCreates  atomic.Int64 // Creates that found the pool empty, for tests
	recycled     atomic.Int64 // removed objects whose file went back to the pool
	spilled      atomic.Int64 // held objects written to files
	spilledBytes atomic.Int64 // and their bytes
	dropped      atomic.Int64 // bytes of written objects dropped from the page cache, for tests
}

// poolFile is a created, durable, not yet claimed object file.
type poolFile struct {
	id uint64
	f  *os.File
}

// Open opens the objects directory dir, creating it with PrepareDir's checks
// if needed, and fills the pool of pre-created files.
func Open(dir string, opts Options) (*Store, error) {
	if err := PrepareDir(dir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "objstore.readdir", "path", dir)
	}
	next := max(opts.MinNextID, opts.IDBase, 1) // 0 is left free to mean "no object"
	ownRange := func(id uint64) bool { return opts.IDBase == 0 || id >= opts.IDBase && id-opts.IDBase < IDSpan }
	for _, e := range entries {
		if id, ok := parseName(e.Name()); ok && id >= next && ownRange(id) {
			if id == math.MaxUint64 {
				return nil, stream.StreamBackendFailed.With("op", "objstore.open", "path", dir, "reason", "object ids exhausted")
			}
			next = id + 1
		}
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "objstore.opendir", "path", dir)
	}

	var reserved uint64
	if opts.IDBase > 0 {
		if reserved, err = readReservation(dir); err != nil {
			return nil, err
		}
		next = max(next, reserved)
	}

	s := &Store{
		fs:         diskio.Or(opts.FS),
		syncFailed: opts.SyncFailed,
		idBase:     opts.IDBase,
		reserved:   reserved,
		dir:        dir,
		dirf:       dirf,
		cache:      newHandleCache(dir, opts.MaxOpenFiles),
		poolSize:   opts.PoolSize,
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		nextID:     next,
		pooled:     make(map[uint64]bool),
		writing:    make(map[uint64]struct{}),
		held:       make(map[uint64]*heldObject),
		maxHeld:    opts.MaxHeldBytes,

		cachedBytes: opts.CachedBytes,
	}
	if s.cachedBytes == 0 {
		s.cachedBytes = DefaultCachedBytes
	}
	if s.maxHeld == 0 {
		s.maxHeld = defaultMaxHeldBytes
	}
	if s.poolSize == 0 {
		s.poolSize = defaultPoolSize
	}
	if s.poolSize > 0 {
		// Fill the pool now so the first Create is as fast as the others. A
		// failure (a full disk) must not keep the broker from starting, reading
		// and collecting garbage: Create reports it when it matters.
		_ = s.refill()
	}
	s.wg.Add(1)
	go s.refillLoop() // which also spills held objects
	return s, nil
}

// Dir returns the directory the store was opened on.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(id uint64) string { return fileNameIn(s.dir, id) }

// HasFile reports whether object id is a file in the store's directory.
func (s *Store) HasFile(id uint64) bool {
	_, err := os.Stat(s.path(id))
	return err == nil
}

// fileNameIn returns the path of object id's file in dir.
func fileNameIn(dir string, id uint64) string { return filepath.Join(dir, fileName(id)) }

// allocate reserves n new ids. The caller holds s.mu.
func (s *Store) allocate(n int) ([]uint64, error) {
	ids := make([]uint64, 0, n)
	if s.idBase > 0 && s.nextID+uint64(n) > s.reserved {
		// Reserve a block ahead, durably, before handing any of it out.
		to := s.nextID + uint64(n) + reserveBlock
		if to-s.idBase > IDSpan {
			return nil, stream.StreamBackendFailed.With("op", "objstore.create", "path", s.dir, "reason", "the member's object ids are exhausted")
		}
		if err := writeReservation(s.dir, to); err != nil {
			return nil, err
		}
		s.reserved = to
	}
	for range n {
		if s.nextID == 0 { // wrapped past math.MaxUint64
			return nil, stream.StreamBackendFailed.With("op", "objstore.create", "path", s.dir, "reason", "object ids exhausted")
		}
		ids = append(ids, s.nextID)
		s.nextID++
	}
	return ids, nil
}

// createFiles creates the object files ids, writes their headers and fsyncs
// the directory once for all of them. The headers are not synced: the
// writer's first fdatasync carries them along with its frames. On failure
// nothing it created is left behind (as far as the system lets it).
func (s *Store) createFiles(ids []uint64) ([]poolFile, error) {
	files := make([]poolFile, 0, len(ids))
	fail := func(op string, id uint64, err error) ([]poolFile, error) {
		for _, pf := range files {
			pf.f.Close()
			os.Remove(s.path(pf.id))
		}
		return nil, stream.StreamBackendFailed.Wrap(err, "op", op, "object", id)
	}
	var hdr [HeaderSize]byte
	for _, id := range ids {
		// O_EXCL: an id is never handed out twice, even if something else
		// put a file with its name in the directory meanwhile.
		f, err := s.fs.OpenFile(s.path(id), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fail("objstore.create", id, err)
		}
		files = append(files, poolFile{id: id, f: f})
		if _, err := s.fs.WriteAt(f, appendHeader(hdr[:0], id), 0); err != nil {
			return fail("objstore.write", id, err)
		}
	}
	if err := s.dirf.Sync(); err != nil {
		return fail("objstore.fsyncdir", ids[0], err)
	}
	s.dirSyncs.Add(1)
	return files, nil
}

// refill tops the pool up to its size with one directory fsync, from the
// recycled spares first and new files after. It runs on one goroutine (the
// refill loop, or Open before the loop starts).
func (s *Store) refill() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	// A kick that arrives after a refill already topped the pool up finds
	// it above the low-water mark and waits for the next one, so every
	// refill covers half the pool.
	want := s.poolSize - len(s.ready)
	if len(s.ready) > s.poolSize/2 || want <= 0 {
		s.mu.Unlock()
		return nil
	}
	k := min(want, len(s.spare))
	spares := append([]uint64(nil), s.spare[:k]...)
	s.spare = append(s.spare[:0], s.spare[k:]...)
	ids, err := s.allocate(want - k)
	if err != nil {
		s.spare = append(spares, s.spare...)
		s.mu.Unlock()
		return err
	}
	for _, id := range ids {
		s.pooled[id] = true
	}
	s.mu.Unlock()

	var files []poolFile
	for _, id := range spares {
		f, err := os.OpenFile(s.path(id), os.O_RDWR, 0)
		if err != nil { // gone or unusable: forget it
			os.Remove(s.path(id))
			s.mu.Lock()
			delete(s.pooled, id)
			s.mu.Unlock()
			continue
		}
		files = append(files, poolFile{id: id, f: f})
	}
	// One directory fsync makes the spares' new names durable along with
	// the new files' (createFiles does it), or alone.
	if len(ids) > 0 {
		var created []poolFile
		created, err = s.createFiles(ids)
		files = append(files, created...)
	} else if len(files) > 0 {
		if err = s.dirf.Sync(); err == nil {
			s.dirSyncs.Add(1)
		} else {
			err = stream.StreamBackendFailed.Wrap(err, "op", "objstore.fsyncdir", "path", s.dir)
		}
	}

	return s.addToPool(ids, files, err)
}

// addToPool ends a refill: it adds the files made for ids to the pool, or,
// when the refill failed (err) or the store closed meanwhile, removes them.
func (s *Store) addToPool(ids []uint64, files []poolFile, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.closed {
		for _, id := range ids {
			delete(s.pooled, id)
		}
		for _, pf := range files {
			delete(s.pooled, pf.id)
			pf.f.Close()
			os.Remove(s.path(pf.id))
		}
		if err == nil {
			err = ErrClosed
		}
		return err
	}
	s.ready = append(s.ready, files...)
	return nil
}

// refillLoop refills the pool whenever Create took it down to half, spills
// held objects when Hold found too many bytes held, and drops old objects'
// pages when Writer.Close found too many written since. An error
// is left for the next Create to find: it creates its file itself and
// reports the failure to its caller.
func (s *Store) refillLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		_ = s.refill()
		_ = s.spillOver()
		s.dropOld()
	}
}

// Create returns a Writer on a new, empty object whose directory entry is
// already durable: the writer's Sync makes the object durable with nothing
// but the file's own fdatasync. It takes a file from the pool and has the pool
// refilled in the background; when the pool is empty it creates the file
// itself, paying one directory fsync.
func (s *Store) Create() (*Writer, error) {
	if err := s.Failed(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	pf, fromPool := s.takeLocked()
	// Refill once the pool is half empty rather than after every Create, so
	// that each directory fsync covers several files while the other half
	// still serves Create.
	lowWater := len(s.ready) <= s.poolSize/2
	s.mu.Unlock()
	if s.poolSize > 0 && lowWater {
		s.kickRefill()
	}
	if !fromPool {
		var err error
		if pf, err = s.createOne(); err != nil {
			return nil, err
		}
	}
	return newWriter(s, pf.id, pf.f), nil
}

// Failed returns the error of the first fdatasync that failed (nil while
// none has): from then on Create refuses with it. The store never retries
// such a sync nor assumes what it covered is durable.
func (s *Store) Failed() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail latches the store as failed by err, an fdatasync's failure.
func (s *Store) fail(op, path string, err error) {
	if s.failed.CompareAndSwap(nil, &err) && s.syncFailed != nil {
		s.syncFailed(op, path, err)
	}
}

// takeLocked hands out the pool's first file, if any, as a file being
// written. The caller holds s.mu.
func (s *Store) takeLocked() (poolFile, bool) {
	if len(s.ready) == 0 {
		return poolFile{}, false
	}
	pf := s.ready[0]
	s.ready = append(s.ready[:0], s.ready[1:]...)
	delete(s.pooled, pf.id)
	s.writing[pf.id] = struct{}{}
	return pf, true
}

// kickRefill wakes the refill goroutine, unless a refill is already due.
func (s *Store) kickRefill() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// createOne creates a file for a writer on the caller's path, when the pool
// had none left.
func (s *Store) createOne() (poolFile, error) {
	s.mu.Lock()
	ids, err := s.allocate(1)
	if err == nil {
		s.writing[ids[0]] = struct{}{}
	}
	s.mu.Unlock()
	if err != nil {
		return poolFile{}, err
	}
	s.slowCreates.Add(1)
	files, err := s.createFiles(ids)
	if err != nil {
		s.doneWriting(ids[0])
		return poolFile{}, err
	}
	return files[0], nil
}

// doneWriting forgets id's writer.
func (s *Store) doneWriting(id uint64) {
	s.mu.Lock()
	delete(s.writing, id)
	s.mu.Unlock()
}

// List returns every object file in the directory, sorted by id, leaving out
// the unclaimed files of the pool. Objects a Writer has open are included,
// with Writing set.
func (s *Store) List() ([]Info, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "objstore.readdir", "path", s.dir)
	}
	// The pool is read after the directory: a pool file created since is not
	// in entries, and one claimed since is in s.writing instead.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	infos := make([]Info, 0, len(entries))
	for _, e := range entries {
		id, ok := parseName(e.Name())
		if !ok || s.pooled[id] {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the directory was read
		}
		if err != nil {
			return nil, stream.StreamBackendFailed.Wrap(err, "op", "objstore.stat", "object", id)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		_, w := s.writing[id]
		infos = append(infos, Info{ID: id, Size: fi.Size(), ModTime: fi.ModTime(), Writing: w})
	}
	return infos, nil // os.ReadDir sorts by name, and fixed-width hex sorts as the ids do
}

// Remove deletes object id and closes its cached read handle. Removing an
// object that does not exist, or an unclaimed pool file (which is not an
// object yet), is not an error. An object a Writer has open is refused with
// ErrInUse: its writer is the one to Abort it. A held object is forgotten.
//
// The file itself is usually recycled rather than unlinked: renamed to a
// new id, truncated to a bare header and put back in the pool. Creating a
// file is the costliest step of a group commit on some systems (an inode
// allocation and a directory insertion, ~0.4 ms of CPU on the machine the
// benchmarks run on, against ~12 µs for a rename), and the garbage
// collector removes objects at the rate the flusher creates them. The old
// id's name is gone either way.
//
// The removal is not made durable: a file a crash brings back, under its
// old id or its new one, is an orphan, collected again, and no id is
// reused.
func (s *Store) Remove(id uint64) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.pooled[id] {
		s.mu.Unlock()
		return nil
	}
	if s.dropHeldLocked(id) { // never a file
		s.mu.Unlock()
		return nil
	}
	if _, ok := s.writing[id]; ok {
		s.mu.Unlock()
		return fmt.Errorf("objstore: remove object %016x: %w", id, ErrInUse)
	}
	s.mu.Unlock()
	if s.poolSize > 0 && s.recycle(id) {
		return nil
	}
	return s.remove(id)
}

// recycle renames object id's file to a new pool id, truncates it to a
// fresh header and queues it for the next refill's directory fsync. It
// returns false when the file should be unlinked instead: maxSpare files
// wait already, a reader holds it, or the rename failed; true when the old
// name is gone (even if a later step failed and the file went too).
func (s *Store) recycle(id uint64) bool {
	s.mu.Lock()
	if s.closed || len(s.spare) >= maxSpare {
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	// A reader holding the file would see it truncated under it: such a
	// file is unlinked instead, which leaves the reader its bytes.
	if !s.cache.retire(id) {
		return false
	}
	defer s.cache.unretire(id)
	s.mu.Lock()
	ids, err := s.allocate(1)
	if err != nil {
		s.mu.Unlock()
		return false
	}
	nid := ids[0]
	s.pooled[nid] = true
	s.mu.Unlock()
	unpool := func() {
		s.mu.Lock()
		delete(s.pooled, nid)
		s.mu.Unlock()
	}
	if err := os.Rename(s.path(id), s.path(nid)); err != nil {
		unpool()
		// Already gone is a removal done; otherwise let remove try.
		return errors.Is(err, fs.ErrNotExist)
	}
	var hdr [HeaderSize]byte
	f, err := os.OpenFile(s.path(nid), os.O_RDWR, 0)
	if err == nil {
		err = f.Truncate(HeaderSize)
		if err == nil {
			_, err = f.WriteAt(appendHeader(hdr[:0], nid), 0)
		}
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		os.Remove(s.path(nid)) // the old name is gone: the object is removed
		unpool()
		return true
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		os.Remove(s.path(nid))
		unpool()
		return true
	}
	s.spare = append(s.spare, nid)
	s.mu.Unlock()
	s.recycled.Add(1)
	return true
}

func (s *Store) remove(id uint64) error {
	s.cache.evict(id)
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.remove", "object", id)
	}
	return nil
}

// Close stops the pool, deletes its unclaimed files and closes the read
// handles. Writers still open keep working until they are closed; Create,
// ReadFrame, Scan, List and Remove return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ready, spare := s.ready, s.spare
	s.ready, s.spare = nil, nil
	// What is held is in the caller's log, whose replay writes it.
	s.held, s.heldOrder, s.heldBytes = map[uint64]*heldObject{}, nil, 0
	s.mu.Unlock()

	close(s.stop)
	s.wg.Wait() // a refill in flight sees s.closed and removes its own files

	// The pool's files were never objects: deleting them keeps a clean
	// shutdown from leaving orphans. Best effort; after a crash they are
	// orphans anyway.
	for _, pf := range ready {
		pf.f.Close()
		os.Remove(s.path(pf.id))
	}
	for _, id := range spare {
		os.Remove(s.path(id))
	}
	s.mu.Lock()
	clear(s.pooled)
	s.mu.Unlock()
	s.cache.close()
	return s.dirf.Close()
}
