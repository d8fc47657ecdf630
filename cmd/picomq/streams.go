package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

func (a *app) streamsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "streams",
		Aliases: []string{"stream"},
		Short:   "list, show, create and delete named streams",
	}
	cmd.AddCommand(a.streamsList(), a.streamsGet(), a.streamsCreate(), a.streamsDelete())
	return cmd
}

// streamView is a stream as -o json prints it: durations as Go writes
// them, times in RFC 3339, zero values left out.
type streamView struct {
	Name        string                   `json:"name"`
	ContentType string                   `json:"contentType"`
	Partitions  int                      `json:"partitions"`
	Policy      wire.Policy              `json:"policy"`
	TTL         string                   `json:"ttl,omitempty"`
	ExpiresAt   *time.Time               `json:"expiresAt,omitempty"`
	CreatedAt   time.Time                `json:"createdAt"`
	LastAccess  *time.Time               `json:"lastAccess,omitempty"`
	Closed      bool                     `json:"closed,omitempty"`
	Producers   map[string]wire.Producer `json:"producers,omitempty"`
	State       []wire.PartitionInfo     `json:"partitionState,omitempty"`
}

func viewOf(s client.StreamInfo) streamView {
	v := streamView{
		Name: s.Name, ContentType: s.ContentType, Partitions: s.PartitionCount, Policy: wire.PolicyOf(s.Policy),
		CreatedAt: s.CreatedAt, Closed: s.Closed, Producers: s.Producers, State: s.Partitions,
	}
	if s.TTL > 0 {
		v.TTL = s.TTL.String()
	}
	if !s.ExpiresAt.IsZero() {
		v.ExpiresAt = &s.ExpiresAt
	}
	if !s.LastAccess.IsZero() {
		v.LastAccess = &s.LastAccess
	}
	return v
}

func (a *app) streamsList() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the named streams (of a prefix)",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			list, err := c.ListStreams(ctx, prefix)
			if err != nil {
				return err
			}
			if a.output == "json" {
				views := make([]streamView, 0, len(list))
				for _, s := range list {
					views = append(views, viewOf(s))
				}
				return a.json(views)
			}
			rows := make([][]string, 0, len(list))
			for _, s := range list {
				rows = append(rows, []string{s.Name, strconv.Itoa(s.PartitionCount), s.ContentType, closedWord(s.Closed), when(s.CreatedAt)})
			}
			return a.table([]string{"NAME", "PARTITIONS", "CONTENT-TYPE", "CLOSED", "CREATED"}, rows)
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only streams whose name starts with this")
	return cmd
}

func closedWord(closed bool) string {
	if closed {
		return "yes"
	}
	return "no"
}

func (a *app) streamsGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "show a stream: its policy and each partition's offsets, owner and epoch",
		Args:  exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			s, err := c.GetStream(ctx, args[0])
			if err != nil {
				return err
			}
			return a.printStream(s)
		},
	}
}

// printStream prints one stream: a summary, then its partitions.
func (a *app) printStream(s client.StreamInfo) error {
	if a.output == "json" {
		return a.json(viewOf(s))
	}
	p := wire.PolicyOf(s.Policy)
	fmt.Fprintf(a.out, "Name:          %s\n", s.Name)
	fmt.Fprintf(a.out, "Content-Type:  %s\n", s.ContentType)
	fmt.Fprintf(a.out, "Partitions:    %d\n", s.PartitionCount)
	fmt.Fprintf(a.out, "Retain for:    %s\n", orDash(p.RetainFor))
	fmt.Fprintf(a.out, "Retain bytes:  %s\n", bytesOrDash(s.Policy.RetainBytes))
	fmt.Fprintf(a.out, "Max bytes:     %s\n", bytesOrDash(s.Policy.MaxBytes))
	if s.TTL > 0 {
		fmt.Fprintf(a.out, "TTL:           %s (last used %s)\n", s.TTL, when(s.LastAccess))
	}
	if !s.ExpiresAt.IsZero() {
		fmt.Fprintf(a.out, "Expires at:    %s\n", when(s.ExpiresAt))
	}
	fmt.Fprintf(a.out, "Closed:        %s\n", closedWord(s.Closed))
	fmt.Fprintf(a.out, "Created:       %s\n", when(s.CreatedAt))
	if len(s.Partitions) == 0 {
		return nil
	}
	fmt.Fprintln(a.out)
	rows := make([][]string, 0, len(s.Partitions))
	for _, pi := range s.Partitions {
		epoch, owner := "-", "-"
		if pi.Epoch >= 0 {
			epoch, owner = strconv.FormatInt(pi.Epoch, 10), orDash(pi.Owner)
		}
		rows = append(rows, []string{strconv.Itoa(pi.Partition), strconv.FormatUint(pi.Start, 10), strconv.FormatUint(pi.End, 10),
			strconv.FormatInt(pi.Bytes, 10), epoch, owner, openWord(pi)})
	}
	return a.table([]string{"PARTITION", "START", "END", "BYTES", "EPOCH", "OWNER", "STATE"}, rows)
}

func openWord(p wire.PartitionInfo) string {
	switch {
	case p.Epoch < 0:
		return "not opened yet"
	case p.Open:
		return "open"
	default:
		return "closed"
	}
}

func bytesOrDash(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func (a *app) streamsCreate() *cobra.Command {
	var (
		cfg       client.StreamConfig
		expiresAt string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "create a stream (idempotent: an existing one with the same configuration is left as it is)",
		Args:  exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if expiresAt != "" {
				t, err := time.Parse(time.RFC3339, expiresAt)
				if err != nil {
					return usagef("--expires-at %q: not an RFC 3339 time (2026-12-31T23:59:00Z)", expiresAt)
				}
				cfg.ExpiresAt = t
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			s, created, err := c.CreateStream(ctx, args[0], cfg)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(struct {
					Created bool       `json:"created"`
					Stream  streamView `json:"stream"`
				}{created, viewOf(s)})
			}
			word := "created"
			if !created {
				word = "exists, unchanged"
			}
			_, err = fmt.Fprintf(a.out, "stream %s %s (%s)\n", s.Name, word, partitionsWord(s.PartitionCount))
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Policy.Partitions, "partitions", 1, "partitions, fixed for the stream's life")
	f.StringVar(&cfg.ContentType, "content-type", "", "the records' content type (default application/octet-stream)")
	f.DurationVar(&cfg.Policy.RetainFor, "retain-for", 0, "keep records this long (0: for good)")
	f.Int64Var(&cfg.Policy.RetainBytes, "retain-bytes", 0, "keep at most this many bytes per partition (0: unbounded)")
	f.Int64Var(&cfg.Policy.MaxBytes, "max-bytes", 0, "bytes the stream may hold before appends wait for room (0: unbounded)")
	f.IntVar(&cfg.Policy.MaxRecordBytes, "max-record-bytes", 0, "largest record, key and payload together (0: the broker's default)")
	f.DurationVar(&cfg.TTL, "ttl", 0, "delete the stream once unused this long (0: never)")
	f.StringVar(&expiresAt, "expires-at", "", "delete the stream at this RFC 3339 time")
	return cmd
}

func partitionsWord(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return strconv.Itoa(n) + " partitions"
}

func (a *app) streamsDelete() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "delete a stream and its records",
		Args:  exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			if err := c.DeleteStream(ctx, args[0]); err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(map[string]any{"deleted": args[0]})
			}
			_, err = fmt.Fprintf(a.out, "stream %s deleted\n", args[0])
			return err
		},
	}
}

// partitionFlag is a --partition: unset, or a partition number.
type partitionFlag struct {
	set bool
	n   int
}

func (p *partitionFlag) String() string {
	if !p.set {
		return ""
	}
	return strconv.Itoa(p.n)
}

func (p *partitionFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("not a partition number: %q", s)
	}
	p.set, p.n = true, n
	return nil
}

func (p *partitionFlag) Type() string { return "int" }

// partitions is the partitions a read covers: the one asked, or all.
func (p partitionFlag) partitions(s *client.Stream) ([]int, error) {
	if p.set {
		if p.n >= s.Partitions() {
			return nil, stream.UnknownPartition.With("partition", p.n, "partitions", s.Partitions())
		}
		return []int{p.n}, nil
	}
	all := make([]int, s.Partitions())
	for i := range all {
		all[i] = i
	}
	return all, nil
}
