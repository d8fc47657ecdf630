package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/stream"
)

func (a *app) groupsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "groups",
		Aliases: []string{"group"},
		Short:   "consumer groups' committed offsets",
	}
	cmd.AddCommand(a.groupsCommit(), a.groupsGet(), a.groupsLag())
	return cmd
}

// groupView is a group's committed offset in one partition; Next is nil
// where the group committed nothing.
type groupView struct {
	Group     string  `json:"group"`
	Partition int     `json:"partition"`
	Next      *uint64 `json:"next"`
}

func (a *app) groupsCommit() *cobra.Command {
	var part partitionFlag
	cmd := &cobra.Command{
		Use:   "commit NAME GROUP NEXT",
		Short: "commit GROUP's position in a partition: NEXT is the offset it reads next",
		Args:  exactArgs(3, "a stream name, a group and an offset"),
		RunE: func(cmd *cobra.Command, args []string) error {
			next, err := strconv.ParseUint(args[2], 10, 64)
			if err != nil {
				return usagef("NEXT %q: not an offset", args[2])
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			s, err := a.stream(ctx, args[0])
			if err != nil {
				return err
			}
			p := 0
			if part.set {
				p = part.n
			} else if s.Partitions() > 1 {
				return usagef("the stream has %s: say which with --partition", partitionsWord(s.Partitions()))
			}
			if err := s.Commit(ctx, args[1], p, stream.Offset(next)); err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(groupView{args[1], p, &next})
			}
			_, err = fmt.Fprintf(a.out, "group %s committed partition %d at %d\n", args[1], p, next)
			return err
		},
	}
	cmd.Flags().VarP(&part, "partition", "p", "the partition (needed when the stream has several)")
	return cmd
}

func (a *app) groupsGet() *cobra.Command {
	var part partitionFlag
	cmd := &cobra.Command{
		Use:   "get NAME GROUP",
		Short: "show GROUP's committed offsets (the next offset it reads) in each partition",
		Args:  exactArgs(2, "a stream name and a group"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			s, err := a.stream(ctx, args[0])
			if err != nil {
				return err
			}
			parts, err := part.partitions(s)
			if err != nil {
				return err
			}
			views := make([]groupView, 0, len(parts))
			var unknown error // a partition the group committed nothing in
			for _, p := range parts {
				next, err := s.Committed(ctx, args[1], p)
				if errors.Is(err, stream.UnknownGroup) {
					unknown = err
					views = append(views, groupView{Group: args[1], Partition: p})
					continue
				}
				if err != nil {
					return err
				}
				n := uint64(next)
				views = append(views, groupView{args[1], p, &n})
			}
			if !slices.ContainsFunc(views, func(v groupView) bool { return v.Next != nil }) {
				return unknown // the group committed nothing in any partition asked
			}
			if a.output == "json" {
				return a.json(views)
			}
			rows := make([][]string, 0, len(views))
			for _, v := range views {
				next := "-"
				if v.Next != nil {
					next = strconv.FormatUint(*v.Next, 10)
				}
				rows = append(rows, []string{v.Group, strconv.Itoa(v.Partition), next})
			}
			return a.table([]string{"GROUP", "PARTITION", "NEXT"}, rows)
		},
	}
	cmd.Flags().VarP(&part, "partition", "p", "only this partition (default: all)")
	return cmd
}

// lagView is a group's position in one partition and how far it is
// behind the partition's end.
type lagView struct {
	Group     string `json:"group"`
	Partition int    `json:"partition"`
	Next      uint64 `json:"next"`
	End       uint64 `json:"end"`
	Lag       uint64 `json:"lag"`
}

func (a *app) groupsLag() *cobra.Command {
	var group string
	cmd := &cobra.Command{
		Use:   "lag NAME",
		Short: "show each consumer group's lag: the records between its committed offset and each partition's end",
		Args:  exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			info, err := c.GetStream(ctx, args[0])
			if err != nil {
				return err
			}
			var views []lagView
			for _, p := range info.Partitions {
				for g, next := range p.Groups {
					if group != "" && g != group {
						continue
					}
					v := lagView{Group: g, Partition: p.Partition, Next: next, End: p.End}
					if p.End > next {
						v.Lag = p.End - next
					}
					views = append(views, v)
				}
			}
			if len(views) == 0 && group != "" {
				return stream.NoCommit(group, 0)
			}
			slices.SortFunc(views, func(x, y lagView) int {
				if x.Group != y.Group {
					return strings.Compare(x.Group, y.Group)
				}
				return x.Partition - y.Partition
			})
			if a.output == "json" {
				if views == nil {
					views = []lagView{}
				}
				return a.json(views)
			}
			rows := make([][]string, 0, len(views))
			for _, v := range views {
				rows = append(rows, []string{v.Group, strconv.Itoa(v.Partition), strconv.FormatUint(v.Next, 10),
					strconv.FormatUint(v.End, 10), strconv.FormatUint(v.Lag, 10)})
			}
			return a.table([]string{"GROUP", "PARTITION", "COMMITTED", "END", "LAG"}, rows)
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "only this group")
	return cmd
}
