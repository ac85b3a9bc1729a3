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
	var n int64
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		err := q.UnheadExpired(ctx, litedb.UnheadExpiredParams{Now: now.UnixMicro(), Batch: int64(batch)})
		if err == nil {
			n, err = q.ApplyRetention(ctx, litedb.ApplyRetentionParams{Now: now.UnixMicro(), Batch: int64(batch)})
		}
		return err
	})
	return n, err
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
				err = q.DeleteHead(ctx, litedb.DeleteHeadParams{Stream: r.Stream, Key: r.Key, HeadOffset: r.HeadOffset})
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
	return o.q.SweepAllExpiredJobs(ctx, litedb.SweepAllExpiredJobsParams{Now: now.UnixMicro(), Batch: int64(batch)})
}

func (o liteOps) streamCounts(ctx context.Context) ([]StreamStats, error) {
	rows, err := o.q.StreamEventStats(ctx)
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, HeadOffset: r.HeadOffset, Events: r.Events}
	}
	return out, err
}

func (o liteOps) headCounts(ctx context.Context, now time.Time) ([]StreamStats, error) {
	rows, err := o.q.StreamHeadStats(ctx, now.UnixMicro())
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, Keys: r.KeyCount, Headless: r.Headless,
			OldestHeadless: now.Sub(time.UnixMicro(r.OldestHeadless))}
	}
	return out, err
}

func (o liteOps) consumerLags(ctx context.Context) ([]string, []ConsumerStats, error) {
	rows, err := o.q.ConsumerLags(ctx)
	streams, lags := make([]string, len(rows)), make([]ConsumerStats, len(rows))
	for i, r := range rows {
		streams[i], lags[i] = r.Stream, ConsumerStats{Consumer: r.Consumer, Offset: r.CommittedOffset, Lag: r.Unread}
	}
	return streams, lags, err
}

func (o liteOps) compactedStreams(ctx context.Context) ([]string, error) {
	return o.q.CompactedStreams(ctx)
}

func (o liteOps) queueCounts(ctx context.Context, now time.Time) ([]NamedQueueStats, error) {
	rows, err := o.q.AllQueueStats(ctx, now.UnixMicro())
	out := make([]NamedQueueStats, len(rows))
	for i, r := range rows {
		out[i] = NamedQueueStats{Queue: r.Queue, QueueStats: QueueStats{Ready: r.Ready, Scheduled: r.Scheduled,
			Running: r.Running, Dead: r.Dead, OldestReady: now.Sub(time.UnixMicro(r.OldestReady))}}
	}
	return out, err
}

func (o liteOps) deleteFinishedJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.DeleteFinishedJobs(ctx, litedb.DeleteFinishedJobsParams{Now: now.UnixMicro(), Batch: int64(batch)})
}
