// Package bufpool recycles large byte buffers by size class.
//
// The broker's hot path handles buffers of tens of KiB to megabytes per
// request (bodies, encoded batches) whose life ends at a known point.
// Allocating each anew costs a large allocation, zeroed, and garbage the
// collector must then find; on the machines measured, a heap churning
// through fresh memory also costs page faults. A Pool hands such buffers
// back out instead. Small buffers are not worth it and are allocated.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	// Min is the smallest buffer a Pool recycles.
	Min = 64 << 10
	// Max is the largest: one huge request must not pin its memory for
	// good.
	Max = 8 << 20
)

// Pool recycles buffers of Min to Max bytes. The zero value is ready.
type Pool struct {
	// classes[i] holds buffers of capacity exactly Min<<i: 64 KiB to 8 MiB.
	classes [8]sync.Pool
}

// class returns the class of a buffer of n bytes, and false when none fits.
func class(n int) (int, bool) {
	if n < Min || n > Max {
		return 0, false
	}
	return bits.Len(uint((n - 1) / Min)), true
}

// Get returns an empty buffer of capacity at least n, and whether it is
// recycled: only then may it be given back with Put.
func (p *Pool) Get(n int) ([]byte, bool) {
	c, ok := class(n)
	if !ok {
		return make([]byte, 0, n), false
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:0], true
	}
	return make([]byte, 0, Min<<c), true
}

// Put gives back a buffer Get returned as recycled (or one that grew from
// it: a buffer of no class's exact capacity is left to the collector).
// Nothing may use it afterwards.
func (p *Pool) Put(b []byte) {
	c, ok := class(cap(b))
	if !ok || cap(b) != Min<<c {
		return
	}
	b = b[:0]
	p.classes[c].Put(&b)
}
