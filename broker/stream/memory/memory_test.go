package memory_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/memory"
	"github.com/picomq/picomq/broker/stream/streamtest"
)

func factory(t *testing.T, p stream.PolicyValue, clock streamtest.Clock) (streamtest.Engine, error) {
	s, err := memory.New(p, memory.Options{Now: clock.Now})
	return streamtest.Engine{Stream: s}, err
}

// TestSuite is the engine suite: everything package stream promises.
func TestSuite(t *testing.T) { streamtest.Run(t, factory) }

func TestImplementsEverySibling(t *testing.T) {
	s, err := memory.New(stream.PolicyValue{}, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(stream.Waker); !ok {
		t.Error("no Waker")
	}
	if _, ok := s.(stream.Seeker); !ok {
		t.Error("no Seeker")
	}
	if _, ok := s.(stream.Trimmer); !ok {
		t.Error("no Trimmer")
	}
	if _, ok := s.(stream.Compactor); !ok {
		t.Error("no Compactor")
	}
	if _, ok := s.(stream.Committer); !ok {
		t.Error("no Committer")
	}
}

// The waits run on the runtime's timers; in a synctest bubble those are
// fake, so the exact instants can be checked without sleeping.

func TestBlockTimeoutIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memory.New(stream.PolicyValue{MaxRecordBytes: 10, MaxBytes: 10, BlockTimeout: 3 * time.Second}, memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(t.Context(), []stream.RecordValue{{Payload: []byte("0123456789")}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.Append(t.Context(), []stream.RecordValue{{Payload: []byte("x")}})
		if !errors.Is(err, stream.StreamFull) {
			t.Fatalf("Append = %v, want STREAM_FULL", err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Fatalf("waited %v, want exactly BlockTimeout, 3s", waited)
		}
	})
}

func TestRetentionMakesRoomDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The engine's clock is the bubble's: time.Now.
		p := stream.PolicyValue{MaxRecordBytes: 10, MaxBytes: 10, BlockTimeout: time.Hour, RetainFor: time.Minute}
		s, err := memory.New(p, memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(t.Context(), []stream.RecordValue{{Payload: []byte("0123456789")}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		v, err := s.Append(t.Context(), []stream.RecordValue{{Payload: []byte("x")}})
		if err != nil || v.First != 1 {
			t.Fatalf("Append = %+v, %v", v, err)
		}
		// Room came when the first record turned a minute old, give or take
		// one poll.
		if waited := time.Since(start); waited < time.Minute || waited > time.Minute+10*time.Millisecond {
			t.Fatalf("waited %v, want about RetainFor, 1m", waited)
		}
	})
}

func TestCanceledContextWritesNothing(t *testing.T) {
	s, err := memory.New(stream.PolicyValue{}, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("gone")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	if _, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte("x")}}); !errors.Is(err, cause) {
		t.Fatalf("Append on a done ctx = %v, want its cause", err)
	}
	if b, _ := s.Bounds(t.Context(), 0); b.Next != 0 {
		t.Fatalf("Bounds = %+v: something was written", b)
	}
	if _, err := s.Read(ctx, 0, 0, 1); !errors.Is(err, cause) {
		t.Fatalf("Read on a done ctx = %v, want its cause", err)
	}
}

func TestRefusesPolicy(t *testing.T) {
	s, err := memory.New(stream.PolicyValue{RetainBytes: -1}, memory.Options{})
	if s != nil || !errors.Is(err, stream.StreamMisconfigured) {
		t.Fatalf("New = %v, %v", s, err)
	}
}

// TestRetentionReleasesMemory checks that a long-lived stream under
// retention does not keep every record it ever held in the heap: what
// retention drops can be collected.
func TestRetentionReleasesMemory(t *testing.T) {
	s, err := memory.New(stream.PolicyValue{RetainBytes: 1 << 20}, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	payload := make([]byte, 1024)
	for range 16 << 10 { // 16 MiB through a 1 MiB retention
		if _, err := s.Append(t.Context(), []stream.RecordValue{{Payload: payload}}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b, _ := s.Bounds(t.Context(), 0)
	if b.Next-b.First != 1024 {
		t.Fatalf("Bounds = %+v, want the newest 1024 records", b)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Fatalf("heap grew by %d bytes holding 1 MiB of records", grew)
	}
	runtime.KeepAlive(s)
}
