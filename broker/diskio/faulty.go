package diskio

import (
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Rule is one fault Faulty injects: on the operations Op whose path
// contains Path (every path when empty), it lets After of them through,
// then fails the next Count (0: every one from then on) with Err —
// syscall.EIO or syscall.ENOSPC, say. With Short, a write first writes
// half its bytes, as a volume filling under it does, then fails. A write
// below MinOffset is let through (an object's header is written at 0 when
// its file is made ahead, on another goroutine than the append's).
type Rule struct {
	Op        Op
	Path      string
	After     int
	Count     int
	Err       error
	Short     bool
	MinOffset int64

	seen, fired int
}

// Faulty is an FS that fails as its rules say and otherwise does what its
// Base (OS when nil) does. Safe for concurrent use.
type Faulty struct {
	Base FS

	mu    sync.Mutex
	rules []*Rule
	hits  int
}

// Add arms a rule; rules are tried in the order they were added.
func (f *Faulty) Add(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Err == nil {
		r.Err = syscall.EIO
	}
	f.rules = append(f.rules, &r)
}

// Clear disarms every rule: the volume is healthy again.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Injected is how many faults were injected so far.
func (f *Faulty) Injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits
}

// fault returns the rule that fails this operation, if any.
func (f *Faulty) fault(op Op, path string, off int64) *Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.Op != op || !strings.Contains(path, r.Path) || off < r.MinOffset {
			continue
		}
		r.seen++
		if r.seen <= r.After || r.Count > 0 && r.fired >= r.Count {
			continue
		}
		r.fired++
		f.hits++
		return r
	}
	return nil
}

func (f *Faulty) base() FS { return Or(f.Base) }

func pathErr(op Op, path string, err error) error {
	return &fs.PathError{Op: string(op), Path: path, Err: err}
}

func (f *Faulty) OpenFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	if flag&os.O_CREATE != 0 {
		if r := f.fault(OpCreate, path, 0); r != nil {
			return nil, pathErr(OpCreate, path, r.Err)
		}
	}
	return f.base().OpenFile(path, flag, perm)
}

func (f *Faulty) WriteAt(file *os.File, p []byte, off int64) (int, error) {
	if r := f.fault(OpWrite, file.Name(), off); r != nil {
		n := 0
		if r.Short && len(p) > 1 {
			n, _ = f.base().WriteAt(file, p[:len(p)/2], off)
		}
		return n, pathErr(OpWrite, file.Name(), shortErr(r))
	}
	return f.base().WriteAt(file, p, off)
}

func (f *Faulty) WriteV(file *os.File, pieces [][]byte, off int64) error {
	if r := f.fault(OpWrite, file.Name(), off); r != nil {
		if r.Short && len(pieces) > 0 {
			// Half of what was asked: the first pieces, the last one cut.
			total := 0
			for _, p := range pieces {
				total += len(p)
			}
			var half [][]byte
			for left := total / 2; left > 0 && len(pieces) > 0; pieces = pieces[1:] {
				n := min(left, len(pieces[0]))
				half = append(half, pieces[0][:n])
				left -= n
			}
			_ = f.base().WriteV(file, half, off)
		}
		return pathErr(OpWrite, file.Name(), shortErr(r))
	}
	return f.base().WriteV(file, pieces, off)
}

// shortErr is a short write's error: the rule's, or io.ErrShortWrite when
// the rule gave EIO only by default.
func shortErr(r *Rule) error {
	if r.Short && r.Err == syscall.EIO {
		return io.ErrShortWrite
	}
	return r.Err
}

func (f *Faulty) Sync(file *os.File) error {
	if r := f.fault(OpSync, file.Name(), 0); r != nil {
		return pathErr(OpSync, file.Name(), r.Err)
	}
	return f.base().Sync(file)
}

func (f *Faulty) Rename(from, to string) error {
	if r := f.fault(OpRename, from, 0); r != nil {
		return pathErr(OpRename, from, r.Err)
	}
	return f.base().Rename(from, to)
}

func (f *Faulty) Remove(path string) error {
	if r := f.fault(OpRemove, path, 0); r != nil {
		return pathErr(OpRemove, path, r.Err)
	}
	return f.base().Remove(path)
}

// Injector is what a store whose files are not *os.File (the metadata
// log's segments, raft-wal's) asks before each operation: the error to
// fail it with, or nil. Faulty is one.
type Injector interface {
	Inject(op Op, path string, off int64) error
}

// Inject fails op on path at off as the rules say (no short writes: the
// asker writes nothing when it fails).
func (f *Faulty) Inject(op Op, path string, off int64) error {
	if r := f.fault(op, path, off); r != nil {
		return pathErr(op, path, r.Err)
	}
	return nil
}
