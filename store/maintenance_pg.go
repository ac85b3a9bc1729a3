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
	var n int64
	err := o.atomically(ctx, true, func(o pgOps) error {
		err := o.q.UnheadExpired(ctx, pgdb.UnheadExpiredParams{Now: now, Batch: clampLimit(batch)})
		if err == nil {
			n, err = o.q.ApplyRetention(ctx, pgdb.ApplyRetentionParams{Now: now, Batch: clampLimit(batch)})
		}
		return err
	})
	return n, err
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
				err = o.q.DeleteHead(ctx, pgdb.DeleteHeadParams{Stream: r.Stream, Key: r.Key, HeadOffset: r.HeadOffset})
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

func (o pgOps) streamCounts(ctx context.Context) ([]StreamStats, error) {
	rows, err := o.q.StreamEventStats(ctx)
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, HeadOffset: r.HeadOffset, Events: r.Events}
	}
	return out, err
}

func (o pgOps) headCounts(ctx context.Context, now time.Time) ([]StreamStats, error) {
	rows, err := o.q.StreamHeadStats(ctx, now)
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, Keys: r.KeyCount, Headless: r.Headless, OldestHeadless: now.Sub(r.OldestHeadless)}
	}
	return out, err
}

func (o pgOps) consumerLags(ctx context.Context) ([]string, []ConsumerStats, error) {
	rows, err := o.q.ConsumerLags(ctx)
	streams, lags := make([]string, len(rows)), make([]ConsumerStats, len(rows))
	for i, r := range rows {
		streams[i], lags[i] = r.Stream, ConsumerStats{Consumer: r.Consumer, Offset: r.CommittedOffset, Lag: r.Unread}
	}
	return streams, lags, err
}

func (o pgOps) compactedStreams(ctx context.Context) ([]string, error) {
	return o.q.CompactedStreams(ctx)
}

func (o pgOps) queueCounts(ctx context.Context, now time.Time) ([]NamedQueueStats, error) {
	rows, err := o.q.AllQueueStats(ctx, now)
	out := make([]NamedQueueStats, len(rows))
	for i, r := range rows {
		out[i] = NamedQueueStats{Queue: r.Queue, QueueStats: QueueStats{Ready: r.Ready, Scheduled: r.Scheduled,
			Running: r.Running, Dead: r.Dead, OldestReady: now.Sub(r.OldestReady)}}
	}
	return out, err
}

func (o pgOps) deleteFinishedJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.DeleteFinishedJobs(ctx, pgdb.DeleteFinishedJobsParams{Now: now, Batch: clampLimit(batch)})
}
