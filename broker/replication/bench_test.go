package replication

import (
	"strconv"
	"testing"
)

// BenchmarkSync1MiB measures Create, one 1 MiB frame by reference, Sync
// and Close: with R=1 the local fdatasync alone; with R=3 the same at
// once with two copies over loopback HTTP, each checked, fdatasynced and
// named durably by its peer. Compare the two (ns/op) for what replication
// costs an object on the append path.
func BenchmarkSync1MiB(b *testing.B) {
	for _, r := range []int{1, 3} {
		b.Run("R="+strconv.Itoa(r), func(b *testing.B) {
			c := newCluster(b, 3, Config{R: r})
			m := c.members[0]
			st := m.placement()
			p := payload(1, 1<<20)
			b.SetBytes(int64(len(p)))
			b.ResetTimer()
			for range b.N {
				w, err := st.Create()
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := w.AppendFrameRef(p); err != nil {
					b.Fatal(err)
				}
				if err := w.Sync(); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				// Keep the disk from filling: the copies go (not timed).
				b.StopTimer()
				for _, id := range w.Replicas() {
					if err := c.byID(id).store.Remove(w.ID()); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}
