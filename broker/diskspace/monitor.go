package diskspace

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/picomq/picomq/broker/node"
)

// Usage is a volume's free (available to this user) and total bytes.
type Usage struct{ Free, Total int64 }

// Statfs measures the volume holding dir.
func Statfs(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, err
	}
	return Usage{Free: int64(st.Bavail) * int64(st.Bsize), Total: int64(st.Blocks) * int64(st.Bsize)}, nil
}

// reserveFile is preallocated in the data directory while there is room
// and removed when the volume is full, so that the metadata log can still
// commit a delete (and a restart elect its leader) even when something
// other than appends filled the volume, or the headroom is 0.
const reserveFile = "RESERVE"

// Options configures New. Dir is required.
type Options struct {
	Dir      string
	Headroom Headroom
	// ReserveBytes is the reserve file's size: 0 means min(4 MiB, 1/16 of
	// the volume); negative, none.
	ReserveBytes int64
	// Stat measures the volume (default Statfs): tests give a fake one.
	Stat func(dir string) (Usage, error)
	// Refresh bounds how stale the append path's view of free space may
	// be (default 2ms); statfs is a cheap call.
	Refresh    time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Monitor is one data volume's state. Safe for concurrent use.
type Monitor struct {
	o       Options
	logger  *slog.Logger
	reserve string

	last     atomic.Int64 // unix ns of the last statfs
	free     atomic.Int64
	total    atomic.Int64
	headroom atomic.Int64
	full     atomic.Bool

	mu       sync.Mutex // serializes refreshes' transitions and the reserve
	reserved int64      // the reserve file's size, 0 while released
	failed   atomic.Pointer[error]

	// What background work did below the headroom, by kind of work.
	writtenFull *prometheus.CounterVec
	deferred    *prometheus.CounterVec
}

// New measures the volume and, when the volume is full, releases the
// reserve file before anything else opens — so that the metadata log finds
// the room it needs to elect itself and replay.
func New(o Options) (*Monitor, error) {
	if o.Stat == nil {
		o.Stat = Statfs
	}
	if o.Refresh <= 0 {
		o.Refresh = 2 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Monitor{o: o, logger: o.Logger, reserve: filepath.Join(o.Dir, reserveFile),
		writtenFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_disk_background_written_while_full_bytes_total",
			Help: "Bytes background work (merges, snapshots, compactions) wrote while free space was, or would then be, below the headroom: only work that frees at least as much as it writes runs then.",
		}, []string{"work"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_disk_background_deferred_total",
			Help: "Background work put off because it would have taken free space below the headroom without freeing as much as it writes.",
		}, []string{"work"}),
	}
	if fi, err := os.Stat(m.reserve); err == nil {
		m.reserved = fi.Size()
	}
	if err := m.Refresh(); err != nil {
		return nil, err
	}
	if m.o.Registerer != nil {
		gauge := func(name, help string, f func() float64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
		}
		m.o.Registerer.MustRegister(
			gauge("picomq_disk_free_bytes", "Free bytes of the data volume, as last measured.", func() float64 { return float64(m.free.Load()) }),
			gauge("picomq_disk_headroom_bytes", "Free bytes kept for deletes, trims, merges and recovery: below them appends are refused (--disk-headroom).", func() float64 { return float64(m.headroom.Load()) }),
			gauge("picomq_disk_appends_refused", "1 while appends are refused with STORAGE_FULL because free space is below the headroom.", func() float64 { return b2f(m.full.Load()) }),
			gauge("picomq_storage_failed", "1 once a write could not be made durable: the broker acknowledges nothing until restarted.", func() float64 { return b2f(m.failed.Load() != nil) }),
			m.writtenFull, m.deferred,
		)
	}
	return m, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Refresh measures the volume now and moves to full or back, logging the
// change; it releases the reserve file when the volume is nearly full and
// makes it again once there is room.
func (m *Monitor) Refresh() error {
	u, err := m.o.Stat(m.o.Dir)
	if err != nil {
		return err
	}
	m.last.Store(time.Now().UnixNano())
	m.mu.Lock()
	defer m.mu.Unlock()
	headroom := m.o.Headroom.For(u.Total)
	size := m.reserveSize(u.Total)
	free := u.Free
	switch {
	case m.reserved > 0 && free < size:
		// Full, with the headroom exceeded (or disabled): give the
		// reserve back for the metadata log.
		if err := os.Remove(m.reserve); err == nil || errors.Is(err, os.ErrNotExist) {
			m.logger.Warn("data volume full: released the reserve file so that metadata commits (deletes) can still be made", "free", free, "reserve", m.reserved)
			free += m.reserved
			m.reserved = 0
		}
	case m.reserved == 0 && size > 0 && free >= headroom+4*size:
		if err := makeReserve(m.reserve, size); err == nil {
			m.reserved = size
			free -= size
		}
	}
	full := headroom > 0 && free < headroom
	m.free.Store(free)
	m.total.Store(u.Total)
	m.headroom.Store(headroom)
	if was := m.full.Swap(full); was != full {
		if full {
			m.logger.Warn("data volume almost full: refusing appends and creates with STORAGE_FULL until space is freed (delete or trim streams, or grow the volume)", "free", free, "headroom", headroom, "dir", m.o.Dir)
		} else {
			m.logger.Info("space returned on the data volume: accepting appends again", "free", free, "headroom", headroom, "dir", m.o.Dir)
		}
	}
	return nil
}

func (m *Monitor) reserveSize(total int64) int64 {
	switch {
	case m.o.ReserveBytes < 0:
		return 0
	case m.o.ReserveBytes > 0:
		return m.o.ReserveBytes
	}
	return min(4<<20, total/16)
}

// makeReserve writes size zeros to path (fallocate alone might leave a
// file system with copy-on-write or compression owing the blocks), synced.
func makeReserve(path string, size int64) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	zeros := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err = f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			return err
		}
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Run refreshes every interval until stop closes.
func (m *Monitor) Run(stop <-chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := m.Refresh(); err != nil {
				m.logger.Warn("cannot measure the data volume's free space", "dir", m.o.Dir, "err", err)
			}
		}
	}
}

// Admit answers whether an append or a create may write: nil, or
// STORAGE_FAILED, or STORAGE_FULL naming the free bytes and the headroom.
// It measures the volume again when its view is older than Refresh.
func (m *Monitor) Admit() error {
	if err := m.Failed(); err != nil {
		return err
	}
	m.refreshIfStale()
	if m.full.Load() {
		return node.StorageFull.With("free", m.free.Load(), "headroom", m.headroom.Load(), "dir", m.o.Dir)
	}
	return nil
}

// Background answers whether background work — a merge, a spill of held
// objects, a compaction — that writes about writes bytes and
// then frees about frees bytes may run now. The headroom exists for what
// frees space; work that only moves data must not eat it, or a full volume
// goes on filling after appends are refused, down to nothing. So it may
// run while it leaves the headroom free (or none is kept), and below that
// only when it frees at least as much as it writes: the bytes of such work
// are counted (picomq_disk_background_written_while_full_bytes_total), and
// so is the work put off (picomq_disk_background_deferred_total).
func (m *Monitor) Background(work string, writes, frees int64) bool {
	m.refreshIfStale()
	headroom := m.headroom.Load()
	switch {
	case headroom <= 0 || writes <= 0:
		return true
	case m.free.Load()-writes >= headroom:
		return true
	case frees >= writes:
		m.writtenFull.WithLabelValues(work).Add(float64(writes))
		return true
	}
	m.deferred.WithLabelValues(work).Inc()
	return false
}

// WroteWhileFull counts n bytes background work wrote while free space was
// below the headroom, for work that frees more than it writes by its
// nature (a snapshot writes what the log it lets go held).
func (m *Monitor) WroteWhileFull(work string, n int64) {
	if n > 0 {
		m.writtenFull.WithLabelValues(work).Add(float64(n))
	}
}

// BackgroundBudget is how many bytes one pass of background work may write
// in all: what is free above the headroom, or, below it, a quarter of what
// is free past a quarter of the headroom — for work that frees at least as
// much as it writes (Background), whose frees come only once the objects
// it replaced are collected, a grace later. Unbounded when no headroom is
// kept.
func (m *Monitor) BackgroundBudget() int64 {
	m.refreshIfStale()
	free, headroom := m.free.Load(), m.headroom.Load()
	if headroom <= 0 {
		return math.MaxInt64
	}
	return max(free-headroom, (free-headroom/4)/4, 0)
}

// refreshIfStale measures the volume again when the view is older than
// Refresh (one caller at a time; a failed statfs keeps the last view).
func (m *Monitor) refreshIfStale() {
	if last := m.last.Load(); time.Now().UnixNano()-last > int64(m.o.Refresh) && m.last.CompareAndSwap(last, time.Now().UnixNano()) {
		_ = m.Refresh()
	}
}

// Full reports whether appends are refused for want of space.
func (m *Monitor) Full() bool { return m.full.Load() }

// Total returns the volume's size, as last measured.
func (m *Monitor) Total() int64 { return m.total.Load() }

// HeadroomBytes returns the free bytes kept, as last computed.
func (m *Monitor) HeadroomBytes() int64 { return m.headroom.Load() }

// Free returns the free bytes last measured.
func (m *Monitor) Free() int64 { return m.free.Load() }

// Fail latches the storage as failed (the first cause is kept): from now
// on Admit answers STORAGE_FAILED.
func (m *Monitor) Fail(op, path string, cause error) {
	var err error = node.StorageFailed.Wrap(cause, "op", op, "path", path)
	if m.failed.CompareAndSwap(nil, &err) {
		m.logger.Error("storage failed: a write could not be made durable; acknowledging nothing until restarted", "op", op, "path", path, "err", cause)
	}
}

// Failed returns the STORAGE_FAILED error once Fail was called, else nil.
func (m *Monitor) Failed() error {
	if p := m.failed.Load(); p != nil {
		return *p
	}
	return nil
}
