package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
)

// Final is what the brokers hold once the faults healed and the workload
// stopped: every partition of every stream read whole from each broker.
type Final struct {
	Brokers []int                    // the brokers read, in order
	Parts   map[int]map[Key][]Record // broker -> partition -> records as returned
	Bounds  map[int]map[Key][2]int64 // broker -> partition -> [first, next]
	Errors  []string                 // what could not be read: a checker failure
}

// Oracle is partition k as the first broker read holds it: what the
// linearizability check takes as the fate of unknown appends. The other
// brokers are compared with it by CheckAcknowledged and CheckGapFree.
func (f *Final) Oracle(k Key) []Record {
	recs, _ := f.oracle(k)
	return recs
}

func (f *Final) oracle(k Key) ([]Record, bool) {
	for _, b := range f.Brokers {
		if recs, ok := f.Parts[b][k]; ok {
			return recs, true
		}
	}
	return nil, false
}

// Snapshot reads every partition of streams from each broker of brokers
// (indexes into urls). Reads from followers may lag the owner by the time
// a commit takes to apply, so it first waits (up to settle) until every
// broker reports the same bounds for every partition.
func Snapshot(ctx context.Context, urls []string, brokers []int, streams []StreamSpec, settle time.Duration) *Final {
	f := &Final{Brokers: brokers, Parts: map[int]map[Key][]Record{}, Bounds: map[int]map[Key][2]int64{}}
	open := map[int]map[string]*client.Stream{}
	for _, b := range brokers {
		open[b] = map[string]*client.Stream{}
		c, err := client.New(urls[b], client.WithAppendsInFlight(0))
		if err != nil {
			f.Errors = append(f.Errors, fmt.Sprintf("broker-%d: %v", b, err))
			continue
		}
		defer c.Close()
		for _, s := range streams {
			st, err := c.Stream(ctx, s.Name)
			if err != nil {
				f.Errors = append(f.Errors, fmt.Sprintf("broker-%d: stream %s: %v", b, s.Name, err))
				continue
			}
			open[b][s.Name] = st
		}
	}
	bounds := func() (map[int]map[Key][2]int64, error) {
		out := map[int]map[Key][2]int64{}
		for _, b := range brokers {
			out[b] = map[Key][2]int64{}
			for _, s := range streams {
				st := open[b][s.Name]
				if st == nil {
					continue
				}
				for p := 0; p < s.partitions(); p++ {
					bv, err := st.Bounds(ctx, p)
					if err != nil {
						return out, fmt.Errorf("broker-%d: bounds of %s/%d: %v", b, s.Name, p, err)
					}
					out[b][Key{s.Name, p}] = [2]int64{int64(bv.First), int64(bv.Next)}
				}
			}
		}
		return out, nil
	}
	deadline := time.Now().Add(settle)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		bs, err := bounds()
		f.Bounds = bs
		if err == nil && agree(bs) {
			break
		}
		if time.Now().After(deadline) {
			if err != nil {
				f.Errors = append(f.Errors, err.Error())
			} else {
				f.Errors = append(f.Errors, fmt.Sprintf("the brokers still disagree on bounds after %v: %v", settle, bs))
			}
			break
		}
		select {
		case <-ctx.Done():
			f.Errors = append(f.Errors, ctx.Err().Error())
			return f
		case <-tick.C:
		}
	}
	for _, b := range brokers {
		f.Parts[b] = map[Key][]Record{}
		for k, bd := range f.Bounds[b] {
			recs, err := readRange(ctx, open[b][k.Stream], k.Partition, bd[0], bd[1])
			if err != nil {
				f.Errors = append(f.Errors, fmt.Sprintf("broker-%d: %s: %v", b, k, err))
			}
			f.Parts[b][k] = recs
		}
	}
	return f
}

// agree reports whether every broker has the same bounds for every
// partition.
func agree(bs map[int]map[Key][2]int64) bool {
	var ref map[Key][2]int64
	for _, m := range bs {
		if ref == nil {
			ref = m
			continue
		}
		if len(m) != len(ref) {
			return false
		}
		for k, v := range ref {
			if m[k] != v {
				return false
			}
		}
	}
	return true
}

// readRange reads [from, next) as the broker returns it, offsets kept as
// returned so that CheckGapFree sees a gap rather than the reader hiding it.
func readRange(ctx context.Context, st *client.Stream, p int, from, next int64) ([]Record, error) {
	var out []Record
	for at := from; at < next; {
		es, err := readRetry(ctx, st, p, at)
		if err != nil {
			return out, fmt.Errorf("read from %d: %v", at, err)
		}
		if len(es) == 0 {
			return out, fmt.Errorf("read at %d returned nothing below next %d", at, next)
		}
		for _, e := range es {
			out = append(out, Record{Offset: int64(e.Offset), Payload: string(e.Record.Payload)})
		}
		at = int64(es[len(es)-1].Offset) + 1
	}
	return out, nil
}

// readRetry reads a page, trying a few times: the cluster is healed, but a
// read may still meet a connection closed by a fault's end.
func readRetry(ctx context.Context, st *client.Stream, p int, at int64) ([]stream.EntryValue, error) {
	var err error
	for try := 0; try < 5; try++ {
		var es []stream.EntryValue
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		es, err = st.Read(rctx, p, stream.Offset(at), 1000)
		cancel()
		if err == nil {
			return es, nil
		}
		if o, _ := Classify(err); o == Refused {
			return nil, err
		}
	}
	return nil, err
}
