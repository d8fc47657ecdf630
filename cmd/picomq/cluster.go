package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "the broker's view of its cluster",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "the broker reached: its state, the metadata leader, the voters, its slots and the under-replicated objects",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			n, err := c.Node(ctx)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(n)
			}
			line := func(k, v string) { fmt.Fprintf(a.out, "%-17s %s\n", k+":", v) }
			line("Broker", n.NodeID)
			line("Ready", strconv.FormatBool(n.Ready))
			line("Raft state", n.RaftState)
			line("Metadata leader", orDash(n.Leader))
			line("Log", fmt.Sprintf("applied %d of %d", n.AppliedIndex, n.LastIndex))
			line("Streams", strconv.Itoa(n.Streams))
			if n.ClusterID == "" {
				line("Cluster", "none: a lone broker")
			} else {
				line("Cluster", n.ClusterID)
				line("Member", n.MemberID)
				line("Voters", orDash(strings.Join(n.Voters, ", ")))
				line("Non-voters", orDash(strings.Join(n.NonVoters, ", ")))
				if n.SlotsHeld != nil {
					line("Slots held", strconv.Itoa(*n.SlotsHeld))
				}
				if n.UnderReplicated != nil {
					line("Under-replicated", strconv.Itoa(*n.UnderReplicated)+" objects")
				}
			}
			if n.Drain != nil {
				line("Drain", n.Drain.Phase)
			}
			if n.Problem != "" {
				line("Problem", n.Problem)
			}
			return nil
		},
	})
	return cmd
}
