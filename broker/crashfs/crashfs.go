// Package crashfs is a directory of files that keeps, at a simulated crash,
// exactly what a completed fdatasync made durable — and forgets the rest.
//
// A process killed with SIGKILL keeps the page cache: every write it made
// survives, synced or not, so crash tests on real processes say nothing
// about fsync. A power loss or a kernel crash keeps only what reached the
// disk. Dir models that for one directory (a journal's, a store's):
//
//   - a file's bytes, and its size, are durable as of its last completed
//     Sync (fdatasync); writes and truncations after it are lost at a crash,
//     or with CrashTorn kept in part, in the order they were made, the last
//     one kept perhaps only in part (a torn tail);
//   - the directory's entries — creates, renames and removes — are durable
//     as of the last completed SyncDir (fsync of the directory); at a crash a
//     file created since is gone, a file removed since is back with its
//     durable bytes, a rename since is undone;
//   - a file whose entry was never made durable keeps no bytes, synced or
//     not: they are reachable by no name.
//
// After Crash every File opened before it fails with ErrCrashed: the
// process that held it is gone. Tests then reopen the directory's files as
// a restarted process would. Kill is the other way a process ends: its
// Files die, the page cache — unsynced writes and entries — stays.
//
// Synced answers whether a range of a file is durable now, so that a test
// can check, at the moment something is acknowledged, that the bytes the
// acknowledgement promises were covered by a completed fdatasync (the trace
// check: nothing answered before its fdatasync).
//
// Everything is in memory and deterministic: a simulation runs thousands of
// crashes a second, and the same seed gives the same files.
package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
)

// ErrCrashed is what a File opened before a crash answers after it.
var ErrCrashed = errors.New("crashfs: the file was opened before a crash")

// Dir is one directory. The zero value is empty and ready to use; it is
// safe for concurrent use.
type Dir struct {
	mu sync.Mutex
	// names are the current entries; durableNames as of the last SyncDir.
	names, durableNames map[string]*inode
	gen                 int // crashes so far: a File of an older one is dead
	syncs, dirSyncs     int // completed Syncs and SyncDirs, for tests
}

// inode is a file's content: what a read sees now, what the disk holds, and
// the writes between, in order.
type inode struct {
	data    []byte
	durable []byte
	pending []write // since the last Sync, oldest first
}

// write is one WriteAt or Truncate not yet covered by a Sync.
type write struct {
	off      int64
	p        []byte // nil for a truncation
	truncate bool
	size     int64 // a truncation's new size
}

// File is an open file of a Dir.
type File struct {
	d    *Dir
	name string
	ino  *inode
	gen  int
}

func (d *Dir) init() {
	if d.names == nil {
		d.names, d.durableNames = map[string]*inode{}, map[string]*inode{}
	}
}

// Create creates an empty file name, which must not exist (O_EXCL), and
// opens it.
func (d *Dir) Create(name string) (*File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	if _, ok := d.names[name]; ok {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrExist}
	}
	ino := &inode{}
	d.names[name] = ino
	return &File{d: d, name: name, ino: ino, gen: d.gen}, nil
}

// Open opens the existing file name.
func (d *Dir) Open(name string) (*File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	ino, ok := d.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &File{d: d, name: name, ino: ino, gen: d.gen}, nil
}

// Remove removes the entry name; open Files of it go on working.
func (d *Dir) Remove(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	if _, ok := d.names[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.names, name)
	return nil
}

// Rename moves the entry from to to, replacing what to named.
func (d *Dir) Rename(from, to string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	ino, ok := d.names[from]
	if !ok {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: fs.ErrNotExist}
	}
	delete(d.names, from)
	d.names[to] = ino
	return nil
}

// List returns the current entries, sorted.
func (d *Dir) List() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.names))
	for name := range d.names {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// SyncDir makes the current entries durable (fsync of the directory).
func (d *Dir) SyncDir() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	d.durableNames = copyNames(d.names)
	d.dirSyncs++
	return nil
}

func copyNames(m map[string]*inode) map[string]*inode {
	out := make(map[string]*inode, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Crash forgets everything no completed Sync or SyncDir made durable, as a
// power loss would, and ends every File opened before it.
func (d *Dir) Crash() { d.crash(nil) }

// CrashTorn is Crash where each file also keeps a part of what was written
// since its last Sync, chosen by rng: its first k pending writes, in order,
// and a prefix of the next — the disk wrote some pages of the page cache
// before the power went. (Pages written out of order are not modelled: a
// file system may, but the journal's torn-tail rule does not depend on it.)
func (d *Dir) CrashTorn(rng *rand.Rand) { d.crash(rng) }

// Kill ends every File opened before it, as killing the process that held
// them would, and keeps everything else: the page cache survives a kill,
// unsynced writes and entries included, still unsynced. (A program that
// reads them back after a restart must sync them before it answers for
// them: the power may go next.)
func (d *Dir) Kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
}

func (d *Dir) crash(rng *rand.Rand) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	d.gen++
	d.names = copyNames(d.durableNames)
	names := make([]string, 0, len(d.names))
	for name := range d.names {
		names = append(names, name)
	}
	slices.Sort(names) // the same seed tears the same files
	seen := map[*inode]bool{}
	for _, name := range names {
		ino := d.names[name]
		if seen[ino] {
			continue
		}
		seen[ino] = true
		data := slices.Clone(ino.durable)
		if rng != nil && len(ino.pending) > 0 {
			keep := rng.IntN(len(ino.pending) + 1)
			for i, w := range ino.pending[:keep] {
				p := w.p
				if i == keep-1 && !w.truncate && len(p) > 0 {
					p = p[:rng.IntN(len(p)+1)] // the last one kept, torn
				}
				data = apply(data, write{off: w.off, p: p, truncate: w.truncate, size: w.size})
			}
		}
		ino.data, ino.durable, ino.pending = data, slices.Clone(data), nil
	}
}

// Syncs returns how many Syncs and SyncDirs completed so far.
func (d *Dir) Syncs() (files, dirs int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncs, d.dirSyncs
}

// Synced reports whether bytes [off, off+n) of file name are durable now:
// its entry is, and the last completed Sync covered them with these very
// bytes. (A range written again since its last Sync is not durable as now
// read.)
func (d *Dir) Synced(name string, off, n int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	ino, ok := d.durableNames[name]
	if !ok || d.names[name] != ino || off < 0 || off+n > int64(len(ino.durable)) || off+n > int64(len(ino.data)) {
		return false
	}
	for _, w := range ino.pending {
		if w.truncate && w.size < off+n {
			return false
		}
		if !w.truncate && w.off < off+n && w.off+int64(len(w.p)) > off {
			return false
		}
	}
	return true
}

func apply(data []byte, w write) []byte {
	if w.truncate {
		if w.size <= int64(len(data)) {
			return data[:w.size]
		}
		return append(data, make([]byte, w.size-int64(len(data)))...)
	}
	if end := w.off + int64(len(w.p)); end > int64(len(data)) {
		data = append(data, make([]byte, end-int64(len(data)))...)
	}
	copy(data[w.off:], w.p)
	return data
}

// live checks f belongs to the current run. Called with d.mu held.
func (f *File) live(op string) error {
	if f.gen != f.d.gen {
		return &fs.PathError{Op: op, Path: f.name, Err: ErrCrashed}
	}
	return nil
}

// WriteAt writes p at off (into the page cache: durable once Synced).
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrInvalid}
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.live("write"); err != nil {
		return 0, err
	}
	w := write{off: off, p: slices.Clone(p)}
	f.ino.data = apply(f.ino.data, w)
	f.ino.pending = append(f.ino.pending, w)
	return len(p), nil
}

// ReadAt reads what the file holds now (synced or not), io.EOF past its end.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.live("read"); err != nil {
		return 0, err
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Size is the file's size now.
func (f *File) Size() (int64, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.live("stat"); err != nil {
		return 0, err
	}
	return int64(len(f.ino.data)), nil
}

// Truncate sets the file's size (durable once Synced).
func (f *File) Truncate(size int64) error {
	if size < 0 {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: fs.ErrInvalid}
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.live("truncate"); err != nil {
		return err
	}
	w := write{truncate: true, size: size}
	f.ino.data = apply(f.ino.data, w)
	f.ino.pending = append(f.ino.pending, w)
	return nil
}

// Sync makes what the file holds durable (fdatasync: its bytes and size,
// not its directory entry).
func (f *File) Sync() error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.live("sync"); err != nil {
		return err
	}
	f.ino.durable, f.ino.pending = slices.Clone(f.ino.data), nil
	f.d.syncs++
	return nil
}

// Close releases f; it never fails for a live file.
func (f *File) Close() error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	return f.live("close")
}

func (f *File) String() string { return fmt.Sprintf("crashfs file %s", f.name) }
