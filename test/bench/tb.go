package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// benchTB lets a main program use test/clusterharness, which takes a
// testing.TB: it implements the methods the harness calls. Fatal and Skip
// panic with a tbAbort, which do turns back into an error; Cleanup's
// functions run, last first, at cleanup. A method the harness does not
// call is the embedded nil interface's, and panics.
type benchTB struct {
	testing.TB
	name string
	dir  string // TempDir's folders go here

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	once     sync.Once
}

// tbAbort is the panic of Fatal and Skip.
type tbAbort struct{ msg string }

func newBenchTB(name, dir string) *benchTB { return &benchTB{name: name, dir: dir} }

// do runs f, turning a Fatal or Skip of the harness into an error.
func (t *benchTB) do(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(tbAbort)
			if !ok {
				panic(r)
			}
			err = errors.New(a.msg)
		}
	}()
	return f()
}

// cleanup runs the registered functions once, last registered first.
func (t *benchTB) cleanup() {
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
			_ = t.do(func() error { f(); return nil })
		}
	})
}

func (t *benchTB) Helper()      {}
func (t *benchTB) Name() string { return t.name }

func (t *benchTB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *benchTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "harness")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (t *benchTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *benchTB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *benchTB) Log(args ...any)                 { fmt.Fprintln(os.Stderr, "harness:", fmt.Sprint(args...)) }
func (t *benchTB) Logf(format string, args ...any) { t.Log(fmt.Sprintf(format, args...)) }
func (t *benchTB) Error(args ...any)               { t.fail(); t.Log(args...) }
func (t *benchTB) Errorf(format string, args ...any) {
	t.fail()
	t.Logf(format, args...)
}
func (t *benchTB) Fatal(args ...any) { t.fail(); panic(tbAbort{fmt.Sprint(args...)}) }
func (t *benchTB) Fatalf(format string, args ...any) {
	t.fail()
	panic(tbAbort{fmt.Sprintf(format, args...)})
}
func (t *benchTB) Skip(args ...any) { panic(tbAbort{"skipped: " + fmt.Sprint(args...)}) }
func (t *benchTB) Skipf(format string, args ...any) {
	panic(tbAbort{"skipped: " + fmt.Sprintf(format, args...)})
}
