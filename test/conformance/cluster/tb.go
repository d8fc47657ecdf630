package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// programTB lets this program use test/clusterharness, which takes a
// testing.TB: it implements the methods the harness calls. Fatal and Skip
// panic with an abort, which run recovers into an error; Cleanup's
// functions run, last first, when the program stops. A method the harness
// does not call is the embedded nil interface's, and panics.
type programTB struct {
	testing.TB
	dir string // TempDir's folders go here, and stay: the broker logs

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	once     sync.Once
}

// abort is the panic of Fatal and Skip.
type abort struct{ msg string }

// cleanup runs the registered functions once, last registered first.
func (t *programTB) cleanup() {
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
			func() {
				defer func() {
					if r := recover(); r != nil {
						if _, ok := r.(abort); !ok {
							panic(r)
						}
					}
				}()
				f()
			}()
		}
	})
}

func (t *programTB) Helper()      {}
func (t *programTB) Name() string { return "conformance-cluster" }

func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *programTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "harness-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (t *programTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *programTB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *programTB) Log(args ...any) {
	fmt.Fprintln(os.Stderr, "conformance-cluster:", fmt.Sprint(args...))
}
func (t *programTB) Logf(format string, args ...any) { t.Log(fmt.Sprintf(format, args...)) }
func (t *programTB) Error(args ...any)               { t.fail(); t.Log(args...) }
func (t *programTB) Errorf(format string, args ...any) {
	t.fail()
	t.Logf(format, args...)
}
func (t *programTB) Fatal(args ...any) { t.fail(); panic(abort{fmt.Sprint(args...)}) }
func (t *programTB) Fatalf(format string, args ...any) {
	t.fail()
	panic(abort{fmt.Sprintf(format, args...)})
}
func (t *programTB) Skip(args ...any) { t.fail(); panic(abort{"cannot run: " + fmt.Sprint(args...)}) }
func (t *programTB) Skipf(format string, args ...any) {
	t.fail()
	panic(abort{"cannot run: " + fmt.Sprintf(format, args...)})
}
