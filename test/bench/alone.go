package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// groupCommitAlone measures the broker's durability contract with nothing
// else behind it, on this machine, as the batched scenario drives the
// broker: writers closed-loop clients POST body over keep-alive HTTP
// connections; a net/http handler reads each into a pooled buffer and
// queues it; one goroutine takes what is queued (waiting up to 500 µs for
// 1 MiB, as the broker's group commit does), writes it as CRC-32C frames
// into a new file, fdatasyncs it and drops its pages; a second appends a
// 512-byte record to a log file and fdatasyncs that (the metadata commit);
// then each request is answered. No streams, offsets, record decoding,
// state machine or raft; the clients write each request with one writev.
// It is a reference for what any broker keeping this contract could reach
// here, not a target: it returns the requests answered per second.
func groupCommitAlone(dir string, writers int, body []byte, d time.Duration) (float64, error) {
	work, err := os.MkdirTemp(dir, "alone")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	log, err := os.Create(filepath.Join(work, "log"))
	if err != nil {
		return 0, err
	}
	defer log.Close()
	q := &aloneQueue{signal: make(chan struct{}, 1)}
	failed := make(chan error, 1) // the first failure; the others are dropped
	fail := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	committed := make(chan []*aloneItem, 16)
	stop := make(chan struct{})
	var stages sync.WaitGroup
	stages.Add(2)
	go func() { // the group commit: frames in a new file, fdatasync
		defer stages.Done()
		defer close(committed)
		for n := 0; ; n++ {
			batch := q.take(stop)
			if batch == nil {
				return
			}
			if err := writeObject(filepath.Join(work, fmt.Sprintf("%016x.obj", n)), batch); err != nil {
				fail(err)
			}
			committed <- batch
		}
	}()
	go func() { // the metadata commit: a small record, fdatasync
		defer stages.Done()
		rec := make([]byte, 512)
		for batch := range committed {
			if _, err := log.Write(rec); err != nil {
				fail(err)
			} else if err := unix.Fdatasync(int(log.Fd())); err != nil {
				fail(err)
			}
			for _, it := range batch {
				close(it.done)
			}
		}
	}()
	bufs := sync.Pool{New: func() any { b := make([]byte, len(body)); return &b }}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bp := bufs.Get().(*[]byte)
		defer bufs.Put(bp)
		n, err := io.ReadFull(r.Body, *bp)
		if err != nil || r.ContentLength != int64(n) {
			http.Error(w, "short body", http.StatusBadRequest)
			return
		}
		it := &aloneItem{payload: (*bp)[:n], done: make(chan struct{})}
		q.add(it)
		<-it.done
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"partition":0,"first":0,"last":99,"next":100}`))
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	addr := l.Addr().String()
	head := []byte("POST /v1/log/alone HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/vnd.picomq.batch\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	var count atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	var clients sync.WaitGroup
	for range writers {
		clients.Add(1)
		go func() {
			defer clients.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for time.Now().Before(deadline) && len(failed) == 0 {
				req := net.Buffers{head, body}
				if _, err := req.WriteTo(conn); err != nil {
					fail(err)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					fail(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					fail(fmt.Errorf("group commit alone: %s", resp.Status))
					return
				}
				count.Add(1)
			}
		}()
	}
	clients.Wait()
	elapsed := time.Since(start)
	close(stop)
	stages.Wait()
	select {
	case err := <-failed:
		return 0, err
	default:
	}
	return float64(count.Load()) / elapsed.Seconds(), nil
}

type aloneItem struct {
	payload []byte
	done    chan struct{}
}

// aloneQueue is the group commit's queue.
type aloneQueue struct {
	mu     sync.Mutex
	items  []*aloneItem
	bytes  int
	signal chan struct{}
}

func (q *aloneQueue) add(it *aloneItem) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.bytes += len(it.payload)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take returns what is queued once something is, waiting up to 500 µs
// for 1 MiB; nil once stop is closed.
func (q *aloneQueue) take(stop <-chan struct{}) []*aloneItem {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			q.mu.Unlock()
			break
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-stop:
			return nil
		}
	}
	linger := time.NewTimer(500 * time.Microsecond)
	defer linger.Stop()
	for {
		q.mu.Lock()
		enough := q.bytes >= 1<<20
		q.mu.Unlock()
		if enough {
			break
		}
		select {
		case <-q.signal:
			continue
		case <-linger.C:
		}
		break
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.items
	q.items, q.bytes = nil, 0
	return batch
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeObject writes batch as length+CRC-32C frames into a new file with
// one pwritev, fdatasyncs it and drops its pages, as the broker's objects.
func writeObject(path string, batch []*aloneItem) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	headers := make([]byte, 8*len(batch))
	iov := make([][]byte, 0, 2*len(batch))
	for i, it := range batch {
		h := headers[8*i : 8*i+8]
		binary.LittleEndian.PutUint32(h, uint32(len(it.payload)))
		binary.LittleEndian.PutUint32(h[4:], crc32.Checksum(it.payload, castagnoli))
		iov = append(iov, h, it.payload)
	}
	var off int64
	for len(iov) > 0 {
		k := min(len(iov), 1024)
		n, err := unix.Pwritev(int(f.Fd()), iov[:k], off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite // as objstore's pwritev: never spin on a write that writes nothing
		}
		off += int64(n)
		// A short write leaves the rest of the pieces to the next call.
		for n > 0 && len(iov) > 0 {
			if n >= len(iov[0]) {
				n -= len(iov[0])
				iov = iov[1:]
			} else {
				iov[0] = iov[0][n:]
				n = 0
			}
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
