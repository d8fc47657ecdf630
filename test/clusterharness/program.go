package clusterharness

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// ProgramTB lets a main program (the bench, the conformance suite's
// cluster, a local cluster) use the harness, which takes a testing.TB: it
// implements the methods the harness calls. Fatal and Skip panic with an
// abort that Do turns back into an error; Cleanup's functions run, last
// first, at RunCleanups. A method the harness does not call is the
// embedded nil interface's, and panics.
type ProgramTB struct {
	testing.TB
	name string
	dir  string // TempDir's folders go here, and stay: the broker logs

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	once     sync.Once
}

// programAbort is the panic of Fatal and Skip.
type programAbort struct{ msg string }

// NewProgramTB returns a TB named name (its log lines' prefix) whose
// TempDir folders go under dir.
func NewProgramTB(name, dir string) *ProgramTB { return &ProgramTB{name: name, dir: dir} }

// Do runs f, turning a Fatal or Skip of the harness into an error.
func (t *ProgramTB) Do(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(programAbort)
			if !ok {
				panic(r)
			}
			err = errors.New(a.msg)
		}
	}()
	return f()
}

// RunCleanups runs the registered functions once, last registered first.
func (t *ProgramTB) RunCleanups() {
	t.once.Do(func() {
		for {
			t.mu.Lock()
			n := len(t.cleanups)
			if n == 0 {
				t.mu.Unlock()
				return
			}
			f := t.cleanups[n-1]
			t.cleanups = t.cleanups[:n-1]
			t.mu.Unlock()
			_ = t.Do(func() error { f(); return nil })
		}
	})
}

func (t *ProgramTB) Helper()      {}
func (t *ProgramTB) Name() string { return t.name }

func (t *ProgramTB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *ProgramTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "harness-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (t *ProgramTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *ProgramTB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *ProgramTB) Log(args ...any)                 { fmt.Fprintln(os.Stderr, t.name+":", fmt.Sprint(args...)) }
func (t *ProgramTB) Logf(format string, args ...any) { t.Log(fmt.Sprintf(format, args...)) }
func (t *ProgramTB) Error(args ...any)               { t.fail(); t.Log(args...) }
func (t *ProgramTB) Errorf(format string, args ...any) {
	t.fail()
	t.Logf(format, args...)
}
func (t *ProgramTB) Fatal(args ...any) { t.fail(); panic(programAbort{fmt.Sprint(args...)}) }
func (t *ProgramTB) Fatalf(format string, args ...any) {
	t.fail()
	panic(programAbort{fmt.Sprintf(format, args...)})
}

// Skip and Skipf fail: a program cannot skip what it was asked to run.
func (t *ProgramTB) Skip(args ...any) {
	t.fail()
	panic(programAbort{"cannot run: " + fmt.Sprint(args...)})
}
func (t *ProgramTB) Skipf(format string, args ...any) {
	t.fail()
	panic(programAbort{"cannot run: " + fmt.Sprintf(format, args...)})
}
