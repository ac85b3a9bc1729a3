package store

import (
	"context"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
)

// Maintenance and Stats statements on SQLite.

func (o liteOps) deleteExpiredHeadless(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.DeleteExpiredHeadless(ctx, litedb.DeleteExpiredHeadlessParams{Now: now.UnixMicro(), Batch: int64(batch)})
}

func (o liteOps) applyRetention(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.ApplyRetention(ctx, litedb.ApplyRetentionParams{Now: ptrTo(now.UnixMicro()), Batch: int64(batch)})
}

func (o liteOps) compactSuperseded(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.CompactSuperseded(ctx, litedb.CompactSupersededParams{Now: now.UnixMicro(), Batch: int64(batch)})
}

func (o liteOps) deleteExpiredTombstones(ctx context.Context, now time.Time, batch int) (int64, error) {
	var n int64
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		rows, err := q.ExpiredTombstones(ctx, litedb.ExpiredTombstonesParams{Now: now.UnixMicro(), Batch: int64(batch)})
		for _, r := range rows {
			if err == nil {
				err = q.DeleteHead(ctx, litedb.DeleteHeadParams{Stream: r.Stream, Key: r.Key, HeadOffset: &r.HeadOffset})
			}
			if err == nil {
				err = q.DeleteEvent(ctx, r.HeadOffset)
			}
		}
		n = int64(len(rows))
		return err
	})
	return n, err
}

func (o liteOps) sweepAllExpiredJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.SweepAllExpiredJobs(ctx, litedb.SweepAllExpiredJobsParams{Now: ptrTo(now.UnixMicro()), Batch: int64(batch)})
}

func (o liteOps) stats(ctx context.Context, now time.Time) (Stats, error) {
	b := streamStatsBuilder{}
	events, err := o.q.StreamEventStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	for _, r := range events {
		s := b.get(r.Stream)
		s.HeadOffset, s.Events = r.HeadOffset, r.Events
	}
	heads, err := o.q.StreamHeadStats(ctx, now.UnixMicro())
	if err != nil {
		return Stats{}, err
	}
	for _, r := range heads {
		s := b.get(r.Stream)
		s.Keys, s.Headless, s.OldestHeadless = r.KeyCount, r.Headless, now.Sub(time.UnixMicro(r.OldestHeadless))
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
	qs, err := o.q.AllQueueStats(ctx, now.UnixMicro())
	if err != nil {
		return Stats{}, err
	}
	queues := make([]NamedQueueStats, len(qs))
	for i, r := range qs {
		queues[i] = NamedQueueStats{Queue: r.Queue, QueueStats: QueueStats{Ready: r.Ready, Scheduled: r.Scheduled,
			Running: r.Running, Dead: r.Dead, OldestReady: now.Sub(time.UnixMicro(r.OldestReady))}}
	}
	return b.build(queues), nil
}
