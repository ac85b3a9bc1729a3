package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
)

// Consumer group statements on SQLite. Times are unix microseconds. Other
// processes' watchers see every commit: no wakes to send.

func (o liteOps) createGroup(ctx context.Context, g groupRef, partitions int, now time.Time) (int, error) {
	var n int64
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		if err := q.CreateGroup(ctx, litedb.CreateGroupParams{Stream: g.stream, Grp: g.group, Partitions: int64(partitions), Now: now.UnixMicro()}); err != nil {
			return err
		}
		var err error
		if n, err = q.GroupPartitionCount(ctx, litedb.GroupPartitionCountParams{Stream: g.stream, Grp: g.group}); err != nil {
			return err
		}
		var parts strings.Builder
		parts.WriteByte('[')
		for i := range n {
			if i > 0 {
				parts.WriteByte(',')
			}
			parts.WriteString(strconv.FormatInt(i, 10))
		}
		parts.WriteByte(']')
		return q.CreateGroupPartitions(ctx, litedb.CreateGroupPartitionsParams{Stream: g.stream, Grp: g.group, Now: now.UnixMicro(), Parts: parts.String()})
	})
	return int(n), err
}

func (o liteOps) listGroups(ctx context.Context) ([]groupInfo, error) {
	rows, err := o.q.ListGroups(ctx)
	return mapRows(rows, err, func(r litedb.AlkConsumerGroup) groupInfo {
		return groupInfo{stream: r.Stream, group: r.Grp, partitions: int(r.Partitions), createdAt: time.UnixMicro(r.CreatedAt)}
	})
}

func (o liteOps) upsertGroupMember(ctx context.Context, g groupRef, member string, now, exp time.Time, _ bool) error {
	return o.q.UpsertGroupMember(ctx, litedb.UpsertGroupMemberParams{Stream: g.stream, Grp: g.group, Member: member,
		Now: now.UnixMicro(), ExpiresAt: exp.UnixMicro()})
}

func (o liteOps) deleteGroupMember(ctx context.Context, g groupRef, member string) error {
	return o.q.DeleteGroupMember(ctx, litedb.DeleteGroupMemberParams{Stream: g.stream, Grp: g.group, Member: member})
}

func (o liteOps) deleteExpiredGroupMembers(ctx context.Context, g groupRef, now time.Time) (int64, error) {
	return o.q.DeleteExpiredGroupMembers(ctx, litedb.DeleteExpiredGroupMembersParams{Stream: g.stream, Grp: g.group, Now: now.UnixMicro()})
}

func (o liteOps) groupMembers(ctx context.Context, g groupRef) ([]groupMemberRow, error) {
	rows, err := o.q.GroupMembers(ctx, litedb.GroupMembersParams{Stream: g.stream, Grp: g.group})
	return mapRows(rows, err, func(r litedb.GroupMembersRow) groupMemberRow {
		return groupMemberRow{member: r.Member, joinedAt: time.UnixMicro(r.JoinedAt), expiresAt: time.UnixMicro(r.ExpiresAt)}
	})
}

func (o liteOps) groupPartitions(ctx context.Context, g groupRef) ([]groupPartRow, error) {
	rows, err := o.q.GroupPartitions(ctx, litedb.GroupPartitionsParams{Stream: g.stream, Grp: g.group})
	return mapRows(rows, err, func(r litedb.GroupPartitionsRow) groupPartRow {
		row := groupPartRow{part: int(r.Part), owner: r.Owner, token: r.Token, committed: r.CommittedOffset}
		if r.LeaseExpiresAt != nil {
			t := time.UnixMicro(*r.LeaseExpiresAt)
			row.expiresAt = &t
		}
		return row
	})
}

func (o liteOps) claimGroupPartition(ctx context.Context, r groupPartReq) (int64, int64, bool, error) {
	exp := r.exp.UnixMicro()
	row, err := o.q.ClaimGroupPartition(o.queryWrite(ctx), litedb.ClaimGroupPartitionParams{Member: &r.member, ExpiresAt: &exp, Now: r.now.UnixMicro(),
		Stream: r.stream, Grp: r.group, Part: int64(r.part)})
	if errors.Is(noRows(err), ErrNotFound) {
		return 0, 0, false, nil
	}
	return row.Token, row.CommittedOffset, err == nil, err
}

func (o liteOps) renewGroupPartitions(ctx context.Context, g groupRef, member string, exp time.Time) (map[int]int64, error) {
	e := exp.UnixMicro()
	rows, err := o.q.RenewGroupPartitions(o.queryWrite(ctx), litedb.RenewGroupPartitionsParams{ExpiresAt: &e, Stream: g.stream, Grp: g.group, Member: &member})
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(rows))
	for _, r := range rows {
		out[int(r.Part)] = r.Token
	}
	return out, nil
}

func (o liteOps) releaseGroupPartition(ctx context.Context, r groupPartReq) (bool, error) {
	n, err := o.q.ReleaseGroupPartition(ctx, litedb.ReleaseGroupPartitionParams{Now: r.now.UnixMicro(), CommittedOffset: r.committed,
		Stream: r.stream, Grp: r.group, Part: int64(r.part), Member: &r.member, Token: r.token})
	return n == 1, err
}

func (o liteOps) commitGroupOffset(ctx context.Context, r groupPartReq) (bool, error) {
	n, err := o.q.CommitGroupOffset(ctx, litedb.CommitGroupOffsetParams{CommittedOffset: r.committed, Now: r.now.UnixMicro(), ExpiresAt: r.exp.UnixMicro(),
		Stream: r.stream, Grp: r.group, Part: int64(r.part), Member: &r.member, Token: r.token})
	return n == 1, err
}

func (o liteOps) groupEventKeys(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	rows, err := o.q.GroupEventKeys(ctx, litedb.GroupEventKeysParams{Stream: stream, After: after, Lim: int64(limit)})
	return mapRows(rows, err, func(r litedb.GroupEventKeysRow) Event { return Event{Offset: r.ID, Key: r.Key} })
}
