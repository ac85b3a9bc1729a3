package store

import (
	"context"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// Maintenance and Stats statements on PostgreSQL.

func (o pgOps) deleteExpiredHeadless(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.DeleteExpiredHeadless(ctx, pgdb.DeleteExpiredHeadlessParams{Now: now, Batch: clampLimit(batch)})
}

func (o pgOps) applyRetention(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.ApplyRetention(ctx, pgdb.ApplyRetentionParams{Now: now, Batch: clampLimit(batch)})
}

func (o pgOps) compactSuperseded(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.CompactSuperseded(ctx, pgdb.CompactSupersededParams{Now: now, Batch: clampLimit(batch)})
}

func (o pgOps) deleteExpiredTombstones(ctx context.Context, now time.Time, batch int) (int64, error) {
	var n int64
	err := o.atomically(ctx, true, func(o pgOps) error {
		rows, err := o.q.ExpiredTombstones(ctx, pgdb.ExpiredTombstonesParams{Now: now, Batch: clampLimit(batch)})
		for _, r := range rows {
			if err == nil {
				err = o.q.DeleteHead(ctx, pgdb.DeleteHeadParams{Stream: r.Stream, Key: r.Key, HeadOffset: &r.HeadOffset})
			}
			if err == nil {
				err = o.q.DeleteEvent(ctx, r.HeadOffset)
			}
		}
		n = int64(len(rows))
		return err
	})
	return n, err
}

func (o pgOps) sweepAllExpiredJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.SweepAllExpiredJobs(ctx, pgdb.SweepAllExpiredJobsParams{Now: now, Batch: clampLimit(batch)})
}

func (o pgOps) stats(ctx context.Context, now time.Time) (Stats, error) {
	b := streamStatsBuilder{}
	events, err := o.q.StreamEventStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	for _, r := range events {
		s := b.get(r.Stream)
		s.HeadOffset, s.Events = r.HeadOffset, r.Events
	}
	heads, err := o.q.StreamHeadStats(ctx, now)
	if err != nil {
		return Stats{}, err
	}
	for _, r := range heads {
		s := b.get(r.Stream)
		s.Keys, s.Headless, s.OldestHeadless = r.KeyCount, r.Headless, now.Sub(r.OldestHeadless)
	}
	lags, err := o.q.ConsumerLags(ctx)
	if err != nil {
		return Stats{}, err
	}
	for _, r := range lags {
		s := b.get(r.Stream)
		s.Consumers = append(s.Consumers, ConsumerStats{Consumer: r.Consumer, Offset: r.CommittedOffset, Lag: r.Unread})
	}
	compacted, err := o.q.CompactedStreams(ctx)
	if err != nil {
		return Stats{}, err
	}
	for _, name := range compacted {
		b.get(name).Compacted = true
	}
	qs, err := o.q.AllQueueStats(ctx, now)
	if err != nil {
		return Stats{}, err
	}
	queues := make([]NamedQueueStats, len(qs))
	for i, r := range qs {
		queues[i] = NamedQueueStats{Queue: r.Queue, QueueStats: QueueStats{Ready: r.Ready, Scheduled: r.Scheduled,
			Running: r.Running, Dead: r.Dead, OldestReady: now.Sub(r.OldestReady)}}
	}
	return b.build(queues), nil
}
