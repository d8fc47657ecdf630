package bufpool

import "testing"

// TestClasses: a recycled buffer is at least as large as asked, of its
// class's exact capacity, the smallest that fits; small and huge ones are
// not recycled, and a buffer of any other capacity is not taken back.
func TestClasses(t *testing.T) {
	var p Pool
	for _, n := range []int{Min, Min + 1, 100 << 10, 128 << 10, 128<<10 + 1, 3 << 20, Max} {
		b, recycled := p.Get(n)
		c, _ := class(n)
		if !recycled || cap(b) < n || cap(b) != Min<<c || len(b) != 0 {
			t.Fatalf("Get(%d): len %d cap %d recycled %v", n, len(b), cap(b), recycled)
		}
		if c > 0 && Min<<(c-1) >= n {
			t.Fatalf("Get(%d): class %d, a smaller one fits", n, c)
		}
		p.Put(b)
	}
	for _, n := range []int{0, 100, Min - 1, Max + 1} {
		if b, recycled := p.Get(n); recycled || cap(b) < n {
			t.Fatalf("Get(%d): cap %d recycled %v; want a plain buffer", n, cap(b), recycled)
		}
	}
	odd := make([]byte, 0, 100<<10)
	p.Put(odd) // not a class's capacity: dropped
	for range 100 {
		if b, _ := p.Get(100 << 10); &b[:1][0] == &odd[:1][0] {
			t.Fatal("a buffer of no class's capacity was recycled")
		}
	}
	if Min<<(len(p.classes)-1) != Max {
		t.Fatalf("%d classes do not reach Max", len(p.classes))
	}
}
