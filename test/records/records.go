// Package records reads a stream's partition whole through the Go client
// and compares what two reads returned: the checks the contract, fault and
// end-to-end tests make after moving data (tiering, repair, failover).
package records

import (
	"bytes"
	"context"
	"fmt"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
)

// ReadAll reads partition p of s from its first offset to its end, as its
// bounds were at the start. A read that returns nothing before that end,
// or an offset other than the next one (a gap), is an error, returned with
// what was read until then.
func ReadAll(ctx context.Context, s *client.Stream, p int) ([]stream.EntryValue, error) {
	b, err := s.Bounds(ctx, p)
	if err != nil {
		return nil, err
	}
	var out []stream.EntryValue
	for at := b.First; at < b.Next; {
		got, err := s.Read(ctx, p, at, 1000)
		if err != nil {
			return out, fmt.Errorf("read partition %d at %d: %w", p, at, err)
		}
		if len(got) == 0 {
			return out, fmt.Errorf("read partition %d at %d returned nothing before the end %d", p, at, b.Next)
		}
		for _, e := range got {
			if e.Offset != at {
				return out, fmt.Errorf("partition %d: offset %d where %d was next: a gap", p, e.Offset, at)
			}
			out = append(out, e)
			at++
		}
	}
	return out, nil
}

// Same says how got differs from want (offsets, keys, payloads), or nil.
func Same(got, want []stream.EntryValue) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d entries, want %d", len(got), len(want))
	}
	for i := range got {
		a, b := got[i], want[i]
		if a.Offset != b.Offset || !bytes.Equal(a.Record.Key, b.Record.Key) || !bytes.Equal(a.Record.Payload, b.Record.Payload) {
			return fmt.Errorf("entry %d: offset %d key %q, want offset %d key %q (or the payloads differ)", i, a.Offset, a.Record.Key, b.Offset, b.Record.Key)
		}
	}
	return nil
}
