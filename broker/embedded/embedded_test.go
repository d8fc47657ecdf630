package embedded

import (
	"testing"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/streamtest"
)

func TestEngineSuite(t *testing.T) {
	t.Parallel()
	streamtest.Run(t, func(t *testing.T, policy stream.PolicyValue, clock streamtest.Clock) (streamtest.Engine, error) {
		dir := t.TempDir()
		open := func() (*Stream, error) { return Open(dir, Options{Policy: policy, Clock: clock.Now}) }
		s, err := open()
		if err != nil {
			return streamtest.Engine{}, err
		}
		cur := s
		t.Cleanup(func() { _ = cur.Close() })
		return streamtest.Engine{
			Stream: s,
			Reopen: func(t *testing.T) stream.Stream {
				if err := cur.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				next, err := open()
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				cur = next
				return next
			},
		}, nil
	})
}
