package store

import (
	"context"
	"errors"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// Consumer group statements on PostgreSQL.

func (o pgOps) createGroup(ctx context.Context, g groupRef, partitions int, now time.Time) (int, error) {
	if err := o.q.CreateGroup(ctx, pgdb.CreateGroupParams{Stream: g.stream, Grp: g.group, Partitions: int32(partitions), Now: now}); err != nil {
		return 0, err
	}
	n, err := o.q.GroupPartitionCount(ctx, pgdb.GroupPartitionCountParams{Stream: g.stream, Grp: g.group})
	if err != nil {
		return 0, err
	}
	// Every join makes sure the rows exist: a creator that died between
	// the two statements leaves none missing for long.
	err = o.q.CreateGroupPartitions(ctx, pgdb.CreateGroupPartitionsParams{Stream: g.stream, Grp: g.group, Now: now, Partitions: n})
	return int(n), err
}

func (o pgOps) listGroups(ctx context.Context) ([]groupInfo, error) {
	rows, err := o.q.ListGroups(ctx)
	return mapRows(rows, err, func(r pgdb.AlkstoreConsumerGroup) groupInfo {
		return groupInfo{stream: r.Stream, group: r.Grp, partitions: int(r.Partitions), createdAt: r.CreatedAt}
	})
}

func (o pgOps) upsertGroupMember(ctx context.Context, g groupRef, member string, now, exp time.Time, wake bool) error {
	w, topic := "", groupTopic(g.stream, g.group)
	if wake {
		w = o.wake(topic)
	}
	err := o.q.UpsertGroupMember(ctx, pgdb.UpsertGroupMemberParams{Stream: g.stream, Grp: g.group, Member: member,
		Now: now, ExpiresAt: exp, Wake: w})
	if wake {
		o.sent(topic, w)
	}
	return err
}

func (o pgOps) deleteGroupMember(ctx context.Context, g groupRef, member string) error {
	topic := groupTopic(g.stream, g.group)
	w := o.wake(topic)
	err := o.q.DeleteGroupMember(ctx, pgdb.DeleteGroupMemberParams{Stream: g.stream, Grp: g.group, Member: member, Wake: w})
	o.sent(topic, w)
	return err
}

func (o pgOps) deleteExpiredGroupMembers(ctx context.Context, g groupRef, now time.Time) (int64, error) {
	return o.q.DeleteExpiredGroupMembers(ctx, pgdb.DeleteExpiredGroupMembersParams{Stream: g.stream, Grp: g.group, Now: now})
}

func (o pgOps) groupMembers(ctx context.Context, g groupRef) ([]groupMemberRow, error) {
	rows, err := o.q.GroupMembers(ctx, pgdb.GroupMembersParams{Stream: g.stream, Grp: g.group})
	return mapRows(rows, err, func(r pgdb.GroupMembersRow) groupMemberRow {
		return groupMemberRow{member: r.Member, joinedAt: r.JoinedAt, expiresAt: r.ExpiresAt}
	})
}

func (o pgOps) groupPartitions(ctx context.Context, g groupRef) ([]groupPartRow, error) {
	rows, err := o.q.GroupPartitions(ctx, pgdb.GroupPartitionsParams{Stream: g.stream, Grp: g.group})
	return mapRows(rows, err, func(r pgdb.GroupPartitionsRow) groupPartRow {
		return groupPartRow{part: int(r.Part), owner: r.Owner, token: r.Token, expiresAt: r.LeaseExpiresAt, committed: r.CommittedOffset}
	})
}

func (o pgOps) claimGroupPartition(ctx context.Context, r groupPartReq) (int64, int64, bool, error) {
	row, err := o.q.ClaimGroupPartition(ctx, pgdb.ClaimGroupPartitionParams{Member: &r.member, ExpiresAt: &r.exp, Now: r.now,
		Stream: r.stream, Grp: r.group, Part: int32(r.part)})
	if errors.Is(noRows(err), ErrNotFound) {
		return 0, 0, false, nil
	}
	return row.Token, row.CommittedOffset, err == nil, err
}

func (o pgOps) renewGroupPartitions(ctx context.Context, g groupRef, member string, exp time.Time) (map[int]int64, error) {
	rows, err := o.q.RenewGroupPartitions(ctx, pgdb.RenewGroupPartitionsParams{ExpiresAt: &exp, Stream: g.stream, Grp: g.group, Member: &member})
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(rows))
	for _, r := range rows {
		out[int(r.Part)] = r.Token
	}
	return out, nil
}

func (o pgOps) releaseGroupPartition(ctx context.Context, r groupPartReq) (bool, error) {
	topic := groupTopic(r.stream, r.group)
	w := o.wake(topic)
	n, err := o.q.ReleaseGroupPartition(ctx, pgdb.ReleaseGroupPartitionParams{Now: r.now, CommittedOffset: r.committed,
		Stream: r.stream, Grp: r.group, Part: int32(r.part), Member: r.member, Token: r.token, Wake: w})
	o.sent(topic, w)
	return n == 1, err
}

func (o pgOps) commitGroupOffset(ctx context.Context, r groupPartReq) (bool, error) {
	n, err := o.q.CommitGroupOffset(ctx, pgdb.CommitGroupOffsetParams{CommittedOffset: r.committed, Now: r.now, ExpiresAt: r.exp,
		Stream: r.stream, Grp: r.group, Part: int32(r.part), Member: &r.member, Token: r.token})
	return n == 1, err
}

func (o pgOps) groupEventKeys(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	rows, err := o.q.GroupEventKeys(ctx, pgdb.GroupEventKeysParams{Stream: stream, After: after, Lim: int32(limit)})
	return mapRows(rows, err, func(r pgdb.GroupEventKeysRow) Event { return Event{Offset: r.ID, Key: r.Key} })
}
