package dsapi

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPageIsRenderedOnceForTheReadersOfOneWake: readers asking at once for
// the page at one offset, with the same tail, get one rendering.
func TestPageIsRenderedOnceForTheReadersOfOneWake(t *testing.T) {
	t.Parallel()
	c := newPageCache(1 << 20)
	var renders atomic.Int32
	release := make(chan struct{})
	render := func() (uint64, uint64, []byte, error) {
		renders.Add(1)
		<-release // every reader asks while the first still reads
		return 10, 10, []byte("page"), nil
	}
	k := pageKey{stream: 1, from: 7, kind: asBody}
	var wg sync.WaitGroup
	got := make([]string, 50)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next, out, err := c.get(k, 10, render)
			if err != nil || next != 10 {
				t.Errorf("reader %d: next %d, %v", i, next, err)
			}
			got[i] = string(out)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := renders.Load(); n != 1 {
		t.Fatalf("%d renderings for 50 readers of one page, want 1", n)
	}
	for i, g := range got {
		if g != "page" {
			t.Fatalf("reader %d got %q", i, g)
		}
	}
}

// TestPageReadBeforeTheReadersTailIsNotShared: a reader whose tail is past
// the one a page was read at gets a page read again, never the older one.
func TestPageReadBeforeTheReadersTailIsNotShared(t *testing.T) {
	t.Parallel()
	c := newPageCache(1 << 20)
	k := pageKey{stream: 1, from: 0, kind: asSSEEvent}
	tail := uint64(3)
	render := func() (uint64, uint64, []byte, error) {
		return tail, tail, []byte(fmt.Sprintf("records 0..%d", tail)), nil
	}
	if _, out, _ := c.get(k, 3, render); string(out) != "records 0..3" {
		t.Fatalf("first: %q", out)
	}
	tail = 5
	if next, out, _ := c.get(k, 5, render); next != 5 || string(out) != "records 0..5" {
		t.Fatalf("after an append: next %d %q, want the page read again", next, out)
	}
	// A reader that saw an older tail may take the newer page.
	if next, out, _ := c.get(k, 4, render); next != 5 || string(out) != "records 0..5" {
		t.Fatalf("older tail: next %d %q", next, out)
	}
	// Another kind or stream is another page.
	if _, out, _ := c.get(pageKey{stream: 2, from: 0, kind: asSSEEvent}, 5, func() (uint64, uint64, []byte, error) { return 5, 5, []byte("other"), nil }); string(out) != "other" {
		t.Fatalf("another stream shared a page: %q", out)
	}
}

// TestFailedPageIsNotShared: a rendering that failed is not handed to the
// next reader: it reads for itself.
func TestFailedPageIsNotShared(t *testing.T) {
	t.Parallel()
	c := newPageCache(1 << 20)
	k := pageKey{stream: 1, from: 0, kind: asBody}
	boom := errors.New("boom")
	if _, _, err := c.get(k, 1, func() (uint64, uint64, []byte, error) { return 0, 0, nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("first: %v", err)
	}
	if _, out, err := c.get(k, 1, func() (uint64, uint64, []byte, error) { return 1, 1, []byte("ok"), nil }); err != nil || string(out) != "ok" {
		t.Fatalf("after a failure: %q %v", out, err)
	}
}

// TestPageCacheKeepsItsBound: pages over the bound evict the oldest.
func TestPageCacheKeepsItsBound(t *testing.T) {
	t.Parallel()
	c := newPageCache(10 << 10)
	page := make([]byte, 1<<10)
	for i := range 100 {
		c.get(pageKey{stream: 1, from: uint64(i)}, uint64(i+1), func() (uint64, uint64, []byte, error) { return uint64(i + 1), uint64(i + 1), page, nil })
		c.mu.Lock()
		held, pages := c.bytes, len(c.pages)
		c.mu.Unlock()
		if held > 10<<10 || pages > 10 {
			t.Fatalf("after %d pages: %d bytes in %d pages held, bound 10 KiB", i+1, held, pages)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.order) > 2*len(c.pages)+64 {
		t.Fatalf("%d keys in order for %d pages", len(c.order), len(c.pages))
	}
}

// TestLiveReadersOfOneStreamEachGetEveryRecord: 40 long-polls and 40 SSE
// responses wait on one stream; appends wake them all, and each reader
// receives every record, in order, once.
func TestLiveReadersOfOneStreamEachGetEveryRecord(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), nil)
	s.want(s.do(http.MethodPut, "live/shared", "", "Content-Type", "text/plain"), http.StatusCreated, "create")
	const readers, appends = 40, 20
	var wg sync.WaitGroup
	got := make([]string, 2*readers)
	for i := range readers {
		wg.Add(2)
		go func() { // long-poll, from the start, until it has every record
			defer wg.Done()
			offset := "-1"
			for strings.Count(got[i], ";") < appends {
				r := s.do(http.MethodGet, "live/shared?live=long-poll&offset="+offset, "")
				if r.status == http.StatusOK {
					got[i] += r.body
				}
				if next := r.h.Get(hNextOffset); next != "" {
					offset = next
				}
			}
		}()
		go func() { // SSE
			defer wg.Done()
			got[readers+i] = sseRecords(t, s.url+"live/shared?live=sse&offset=-1", appends)
		}()
	}
	s.eventuallyWaiting(t, 2*readers)
	for n := range appends {
		s.want(s.do(http.MethodPost, "live/shared", fmt.Sprintf("r%d;", n), "Content-Type", "text/plain"), http.StatusNoContent, "append")
	}
	wg.Wait()
	var want strings.Builder
	for n := range appends {
		fmt.Fprintf(&want, "r%d;", n)
	}
	for i, g := range got {
		if g != want.String() {
			t.Fatalf("reader %d received %q, want %q", i, g, want.String())
		}
	}
}

// sseRecords follows url with SSE and returns the text of its data events
// once they hold n records (";"-terminated), or what it has when the
// response ends.
func sseRecords(t *testing.T, url string, n int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	var got strings.Builder
	event := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && strings.Count(got.String(), ";") < n {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:") && event == "data":
			got.WriteString(strings.TrimPrefix(line, "data:"))
		}
	}
	return got.String()
}
