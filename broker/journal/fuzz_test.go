package journal

import (
	"testing"

	"github.com/picomq/picomq/broker/crashfs"
)

// FuzzOpen: a segment holding any bytes after its header opens without a
// panic, either damaged or holding only objects it can read back; and
// then takes appends after them.
func FuzzOpen(f *testing.F) {
	good := sealBatch(appendObject(make([]byte, batchHeader), &Object{ID: 1, Parts: []Part{{Stream: 1, Count: 1}}, Payload: []byte("x")}))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte{}, good...), 0, 0, 0))
	f.Add(append(sealBatch(appendFence(make([]byte, batchHeader), 1, 2)), good...))
	f.Fuzz(func(t *testing.T, tail []byte) {
		d := &crashfs.Dir{}
		file, _ := d.Create(segmentName(1))
		_, _ = file.WriteAt(append(appendHeader(nil, 1, "i"), tail...), 0)
		_ = file.Sync()
		_ = d.SyncDir()
		j, err := Open(memFS{d}, Options{Incarnation: "i"})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		if j.Damaged() != nil {
			return
		}
		j.mu.Lock()
		var held []uint64
		for id := range j.objects {
			held = append(held, id)
		}
		j.mu.Unlock()
		for _, id := range held {
			if _, _, err := j.Read(id); err != nil {
				t.Fatalf("object %d indexed at open cannot be read: %v", id, err)
			}
		}
		if _, _, err := j.Read(1 << 60); err == nil || j.FenceOf(9) > 0 {
			return // the tail holds that id already, or fenced the stream
		}
		if err := j.Append(Object{ID: 1 << 60, Parts: []Part{{Stream: 9}}}); err != nil {
			t.Fatalf("an append after open: %v", err)
		}
	})
}
