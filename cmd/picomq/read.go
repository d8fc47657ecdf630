package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// readPage is how many records one read request asks for.
const readPage = 1000

// startFlags say where a read begins: an offset, a time, or the start.
type startFlags struct {
	from  int64
	since string
}

func (f *startFlags) add(cmd *cobra.Command, fromDefault int64, fromHelp string) {
	cmd.Flags().Int64Var(&f.from, "from", fromDefault, fromHelp)
	cmd.Flags().StringVar(&f.since, "since", "", "begin at the first record appended at or after this: an RFC 3339 time, or a duration ago (10m)")
}

// check refuses --from and --since together: each names the start.
func (f startFlags) check(cmd *cobra.Command) error {
	if f.since != "" && cmd.Flags().Changed("from") {
		return usagef("--from and --since each name where to begin: give one")
	}
	return nil
}

// offset is where a read of partition p begins: --since's first record,
// or --from (-1: the end), raised to the retained start.
func (f startFlags) offset(ctx context.Context, s *client.Stream, p int, now time.Time) (stream.Offset, error) {
	if f.since != "" {
		t, err := time.Parse(time.RFC3339, f.since)
		if err != nil {
			d, derr := time.ParseDuration(f.since)
			if derr != nil || d < 0 {
				return 0, usagef("--since %q: neither an RFC 3339 time nor a positive duration", f.since)
			}
			t = now.Add(-d)
		}
		return s.OffsetAt(ctx, p, t)
	}
	b, err := s.Bounds(ctx, p)
	if err != nil {
		return 0, err
	}
	switch {
	case f.from == -1: // the end
		return b.Next, nil
	case f.from < -1:
		return 0, usagef("--from %d: an offset, or -1 for the end", f.from)
	case stream.Offset(f.from) < b.First:
		return b.First, nil // trimmed below: the start
	}
	return stream.Offset(f.from), nil
}

// entryView is a record as -o json prints it: key and payload as JSON
// strings when they are UTF-8, else base64 in the ...Base64 member, so
// that no byte is lost.
type entryView struct {
	Partition     int       `json:"partition"`
	Offset        uint64    `json:"offset"`
	AppendedAt    time.Time `json:"appendedAt"`
	Key           string    `json:"key,omitempty"`
	KeyBase64     []byte    `json:"keyBase64,omitempty"`
	Payload       *string   `json:"payload,omitempty"`
	PayloadBase64 []byte    `json:"payloadBase64,omitempty"`
}

func entryViewOf(e stream.EntryValue) entryView {
	v := entryView{Partition: e.Partition, Offset: uint64(e.Offset), AppendedAt: e.AppendedAt}
	if k := e.Record.Key; utf8.Valid(k) {
		v.Key = string(k)
	} else {
		v.KeyBase64 = k
	}
	if p := e.Record.Payload; utf8.Valid(p) {
		s := string(p)
		v.Payload = &s
	} else {
		v.PayloadBase64 = p
	}
	return v
}

// printer writes records as the output format asks, one call at a time
// (tail's partitions share it).
type printer struct {
	a      *app
	mu     sync.Mutex
	header bool
}

func (pr *printer) print(es []stream.EntryValue) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	a := pr.a
	switch a.output {
	case "json":
		for _, e := range es { // one JSON object a line, so that tail's output streams
			if err := a.jsonLine(entryViewOf(e)); err != nil {
				return err
			}
		}
	case "raw":
		for _, e := range es {
			if _, err := fmt.Fprintf(a.out, "%s\n", e.Record.Payload); err != nil {
				return err
			}
		}
	default:
		if !pr.header {
			pr.header = true
			if _, err := fmt.Fprintf(a.out, "%-9s  %-8s  %-20s  %-12s  %s\n", "PARTITION", "OFFSET", "APPENDED", "KEY", "PAYLOAD"); err != nil {
				return err
			}
		}
		for _, e := range es {
			if _, err := fmt.Fprintf(a.out, "%-9d  %-8d  %-20s  %-12s  %s\n", e.Partition, e.Offset, when(e.AppendedAt), printable(e.Record.Key), printable(e.Record.Payload)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *app) readCommand() *cobra.Command {
	var (
		start startFlags
		part  partitionFlag
		max   int
	)
	cmd := &cobra.Command{
		Use:   "read NAME",
		Short: "read the records of a stream from an offset, a time or the start, up to its end",
		Args:  exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if max < 0 {
				return usagef("--max must not be negative")
			}
			if err := start.check(cmd); err != nil {
				return err
			}
			// --timeout bounds each request, not the whole read.
			octx, cancel := a.call(cmd.Context())
			s, err := a.stream(octx, args[0])
			cancel()
			if err != nil {
				return err
			}
			parts, err := part.partitions(s)
			if err != nil {
				return err
			}
			pr := &printer{a: a}
			left := max
			for _, p := range parts {
				octx, cancel := a.call(cmd.Context())
				from, err := start.offset(octx, s, p, time.Now())
				cancel()
				if err != nil {
					return err
				}
				for max == 0 || left > 0 {
					n := readPage
					if max > 0 {
						n = min(n, left)
					}
					rctx, rcancel := a.call(cmd.Context())
					es, err := s.Read(rctx, p, from, n)
					rcancel()
					if errors.Is(err, stream.OffsetAhead) {
						break // --from past the end: nothing
					}
					if err != nil {
						return err
					}
					if len(es) == 0 {
						break
					}
					if err := pr.print(es); err != nil {
						return err
					}
					left -= len(es)
					from = es[len(es)-1].Offset + 1
				}
			}
			return nil
		},
	}
	start.add(cmd, 0, "begin at this offset (below the retained start: the start)")
	cmd.Flags().VarP(&part, "partition", "p", "read only this partition (default: each in turn)")
	cmd.Flags().IntVar(&max, "max", 0, "stop after this many records (0: up to the end)")
	return cmd
}

func (a *app) tailCommand() *cobra.Command {
	var (
		start startFlags
		part  partitionFlag
		wait  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail NAME",
		Short: "follow a stream: print records as they are appended, until interrupted",
		Long: "tail waits at each partition's end with long-polls and prints each record as it is appended,\n" +
			"from the end (default), an offset (--from) or a time (--since), until interrupted (Ctrl-C).",
		Args: exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait <= 0 {
				return usagef("--wait must be positive")
			}
			if err := start.check(cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			octx, cancel := a.call(ctx)
			s, err := a.stream(octx, args[0])
			cancel()
			if err != nil {
				return err
			}
			parts, err := part.partitions(s)
			if err != nil {
				return err
			}
			pr := &printer{a: a}
			errc := make(chan error, len(parts))
			for _, p := range parts {
				go func() { errc <- a.follow(ctx, s, p, start, wait, pr) }()
			}
			var first error
			for range parts {
				if err := <-errc; err != nil && first == nil {
					first = err
				}
			}
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of a tail
			}
			return first
		},
	}
	start.add(cmd, -1, "begin at this offset (-1: the end)")
	cmd.Flags().VarP(&part, "partition", "p", "follow only this partition (default: all)")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long one long-poll waits for a record")
	return cmd
}

// follow prints partition p's records from start until ctx ends; a
// retriable refusal (a failover, no owner for a moment) is retried.
func (a *app) follow(ctx context.Context, s *client.Stream, p int, start startFlags, wait time.Duration, pr *printer) error {
	octx, cancel := a.call(ctx)
	from, err := start.offset(octx, s, p, time.Now())
	cancel()
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		es, err := s.ReadWait(ctx, p, from, readPage, wait)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && retriable(err):
			a.pause(ctx, time.Second)
			continue
		case err != nil:
			return fmt.Errorf("partition %s: %w", strconv.Itoa(p), err)
		}
		if len(es) == 0 {
			continue
		}
		if err := pr.print(es); err != nil {
			return err
		}
		from = es[len(es)-1].Offset + 1
	}
	return nil
}

// retriable: the broker asked to be asked again later (503-class codes).
func retriable(err error) bool {
	code := errs.ExitCode(err)
	return code == 69 || code == 75
}

func (a *app) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
