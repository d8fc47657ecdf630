package core

import (
	"math/bits"
	"sync"
)

// Recycled batch buffers.
//
// A large append's encoded batch (its frame payload) lives from admission
// until its commit is answered: the flusher writes it from where it is
// (objstore's AppendFrameRef), and nothing keeps it after. Allocating one
// per append cost a large allocation, zeroed, each time — under 100 KiB
// batches a tenth of the broker's CPU and most of its garbage, and on the
// machines measured, a heap that churns through fresh memory costs more
// still. Such buffers are recycled instead; small ones, which the frame
// cache keeps for live readers, are not.
const (
	// minPooledPayload is the smallest encoded batch whose buffer is
	// recycled: smaller ones are committed inline (held in memory and
	// cached), and cost little to allocate.
	minPooledPayload = 64 << 10
	// maxPooledPayload bounds a recycled buffer, so that one huge batch
	// does not pin its memory for good.
	maxPooledPayload = 8 << 20
)

// payloadClasses[i] holds buffers of capacity exactly minPooledPayload<<i,
// up to maxPooledPayload.
var payloadClasses [8]sync.Pool // 64 KiB .. 8 MiB

// payloadClass returns the class of a buffer of n bytes, and false when
// none fits.
func payloadClass(n int) (int, bool) {
	if n < minPooledPayload || n > maxPooledPayload {
		return 0, false
	}
	return bits.Len(uint((n - 1) / minPooledPayload)), true
}

// getPayload returns an empty buffer of capacity at least n, recycled when
// n is large, and whether it is to be given back with putPayload.
func getPayload(n int) ([]byte, bool) {
	c, ok := payloadClass(n)
	if !ok {
		return make([]byte, 0, n), false
	}
	if b, ok := payloadClasses[c].Get().(*[]byte); ok {
		return (*b)[:0], true
	}
	return make([]byte, 0, minPooledPayload<<c), true
}

// putPayload gives back a buffer getPayload returned as recycled. Nothing
// may use it afterwards.
func putPayload(b []byte) {
	c, ok := payloadClass(cap(b))
	if !ok || cap(b) != minPooledPayload<<c {
		return
	}
	b = b[:0]
	payloadClasses[c].Put(&b)
}
