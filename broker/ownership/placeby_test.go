package ownership

import "testing"

// TestSlotOfPlaceBy: with PlaceBy, an internal stream hashes by the id it
// maps to (a stream's first partition), so the partitions of one stream
// share a slot; without it, by its own id.
func TestSlotOfPlaceBy(t *testing.T) {
	t.Parallel()
	cfg := validConfig()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := m.SlotOf(20), m.SlotOf(21); a == b {
		t.Fatalf("without PlaceBy, ids 20 and 21 share slot %d of %d", a, cfg.Slots)
	}
	first := map[uint64]uint64{21: 20, 22: 20, 57: 20} // partitions of the stream whose first is 20
	cfg.PlaceBy = func(id uint64) uint64 {
		if f, ok := first[id]; ok {
			return f
		}
		return id
	}
	if m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{21, 22, 57} {
		if got, want := m.SlotOf(id), m.SlotOf(20); got != want {
			t.Errorf("SlotOf(%d) = %d, want its stream's slot %d", id, got, want)
		}
	}
	if got := m.SlotOf(23); got != int(23%uint64(cfg.Slots)) {
		t.Errorf("SlotOf(23), placed by itself, = %d", got)
	}
}
