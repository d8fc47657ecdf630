package diskio

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestPwritevWritesEveryPieceInOrder: more pieces than one pwritev takes
// still land one after the other from the offset given.
func TestPwritevWritesEveryPieceInOrder(t *testing.T) {
	t.Parallel()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pieces [][]byte
	var want []byte
	for i := range 2*maxIOV + 500 {
		p := bytes.Repeat([]byte{byte(i)}, 1+i%5)
		pieces = append(pieces, p)
		want = append(want, p...)
	}
	if err := pwritev(f, pieces, 3); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3+len(want) || !bytes.Equal(got[3:], want) || !bytes.Equal(got[:3], []byte{0, 0, 0}) {
		t.Fatalf("file is %d bytes, want 3 zeros then the %d bytes of the pieces", len(got), len(want))
	}
}
