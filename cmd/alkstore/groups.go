package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/alkstore/alkstore/store"
)

func (a *app) groupsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "groups", Aliases: []string{"group"}, Short: "List consumer groups: members, partitions and lag"}
	cmd.AddCommand(listCommand(a, "list", "Every consumer group with its members, partitions and lag (--json: the assignment too)",
		(*store.Store).Groups, toGroupJSON, a.printGroups))
	return cmd
}

type groupJSON struct {
	Stream     string               `json:"stream"`
	Group      string               `json:"group"`
	Partitions int                  `json:"partitions"`
	Lag        int64                `json:"lag"`
	Members    []groupMemberJSON    `json:"members"`
	Assignment []groupPartitionJSON `json:"assignment"`
}

type groupMemberJSON struct {
	Member     string    `json:"member"`
	JoinedAt   time.Time `json:"joined_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Partitions []int     `json:"partitions"`
	Lag        int64     `json:"lag"`
}

type groupPartitionJSON struct {
	Partition      int        `json:"partition"`
	Owner          string     `json:"owner,omitempty"`
	Token          int64      `json:"token"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	Committed      int64      `json:"committed"`
	Lag            int64      `json:"lag"`
}

func toGroupJSON(g store.GroupStats) groupJSON {
	out := groupJSON{Stream: g.Stream, Group: g.Group, Partitions: g.Partitions, Lag: g.Lag,
		Members: []groupMemberJSON{}, Assignment: []groupPartitionJSON{}}
	for _, m := range g.Members {
		out.Members = append(out.Members, groupMemberJSON{Member: m.Member, JoinedAt: m.JoinedAt, ExpiresAt: m.ExpiresAt,
			Partitions: m.Partitions, Lag: m.Lag})
	}
	for _, p := range g.Assignment {
		out.Assignment = append(out.Assignment, groupPartitionJSON{Partition: p.Partition, Owner: p.Owner, Token: p.Token,
			LeaseExpiresAt: p.LeaseExpiresAt, Committed: p.Committed, Lag: p.Lag})
	}
	return out
}

func (a *app) printGroups(list []store.GroupStats) error {
	t := newTable(a.out, "STREAM", "GROUP", "PARTITIONS", "MEMBERS", "FREE", "LAG")
	for _, g := range list {
		free := 0
		for _, p := range g.Assignment {
			if p.Owner == "" {
				free++
			}
		}
		var members []string
		for _, m := range g.Members {
			members = append(members, fmt.Sprintf("%s(%d)", m.Member, len(m.Partitions)))
		}
		t.row(g.Stream, g.Group, g.Partitions, cmpOr(strings.Join(members, " "), "-"), free, count(g.Lag, store.StatsCountLimit))
	}
	return t.flush()
}
