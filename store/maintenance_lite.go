package store

import (
	"context"
	"math"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
)

// Maintenance and Stats statements on SQLite. Each call is one
// transaction, so the writer slot is held for one bounded window at a time.

func (o liteOps) maintainedStreams(ctx context.Context) ([]streamSettings, error) {
	rows, err := o.q.MaintainedStreams(ctx)
	out := make([]streamSettings, len(rows))
	for i, r := range rows {
		out[i] = streamSettings{name: r.Name, compacted: r.Compacted != 0, retention: usPtr(r.RetentionUs),
			minCompactionLag:   time.Duration(r.MinCompactionLagUs) * time.Microsecond,
			tombstoneRetention: time.Duration(r.TombstoneRetentionUs) * time.Microsecond,
			compactedThrough:   r.CompactedThrough}
	}
	return out, err
}

func (o liteOps) streamsWithHeadless(ctx context.Context) ([]streamSettings, error) {
	rows, err := o.q.StreamsWithHeadless(ctx)
	out := make([]streamSettings, len(rows))
	for i, r := range rows {
		out[i] = streamSettings{name: r.Stream, headlessTTL: time.Duration(r.HeadlessTtlUs) * time.Microsecond}
	}
	return out, err
}

func (o liteOps) deleteExpiredHeadless(ctx context.Context, stream string, cutoff time.Time, limit int) (int64, error) {
	return o.q.DeleteExpiredHeadless(ctx, litedb.DeleteExpiredHeadlessParams{Stream: stream, Cutoff: cutoff.UnixMicro(), Batch: int64(limit)})
}

func (o liteOps) retainWindow(ctx context.Context, r retainReq) (int64, error) {
	var n int64
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		w, err := q.RetentionWindow(ctx, litedb.RetentionWindowParams{Stream: r.st.name, Compacted: boolInt(r.st.compacted),
			Cutoff: r.cutoff.UnixMicro(), Lim: int64(r.window)})
		if err != nil || w.Upto < w.FirstID {
			return err
		}
		if !r.st.compacted {
			err = q.UnheadRetained(ctx, litedb.UnheadRetainedParams{Stream: r.st.name, FirstID: w.FirstID, Upto: w.Upto, Now: r.now.UnixMicro()})
		}
		if err == nil {
			n, err = q.DeleteRetained(ctx, litedb.DeleteRetainedParams{Stream: r.st.name, FirstID: w.FirstID, Upto: w.Upto, Lim: int64(r.window)})
		}
		return err
	})
	return n, err
}

func (o liteOps) compactWindow(ctx context.Context, r compactReq) (int64, int64, error) {
	var n int64
	through := r.st.compactedThrough
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		upto, err := q.CompactionWindow(ctx, litedb.CompactionWindowParams{Stream: r.st.name, After: r.st.compactedThrough,
			Horizon: math.MaxInt64, Cutoff: r.cutoff.UnixMicro(), Lim: int64(r.window)})
		if err != nil || upto <= r.st.compactedThrough {
			return err
		}
		n, err = q.CompactWindow(ctx, litedb.CompactWindowParams{Stream: r.st.name, After: r.st.compactedThrough, Upto: upto,
			Cutoff: r.cutoff.UnixMicro(), Batch: int64(r.limit)})
		if err != nil || n >= int64(r.limit) {
			return err // the r.window again next time: it may hold more
		}
		through = upto
		return q.AdvanceCompaction(ctx, litedb.AdvanceCompactionParams{Stream: r.st.name, Upto: upto})
	})
	if err != nil {
		return 0, r.st.compactedThrough, err
	}
	return n, through, nil
}

// deleteExpiredTombstones walks the stream's tombstone events at or below
// r.through a page at a time (ExpiredTombstones), deleting those still
// their key's head and older than the cutoff, with the key's other versions
// (see DeleteKeyOtherVersions), until it has deleted limit, the tombstones
// end, or a whole page holds none older than the cutoff (offsets and
// created_at rise together, so the rest are younger). Superseded
// tombstones not yet compacted are stepped over instead of filling the
// batch.
func (o liteOps) deleteExpiredTombstones(ctx context.Context, r tombReq) (int64, error) {
	stream, through, cutoff, limit := r.stream, r.through, r.cutoff, r.limit
	var n int64
	cut := cutoff.UnixMicro()
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		n = 0
		var after int64
		for n < int64(limit) {
			rows, err := q.ExpiredTombstones(ctx, litedb.ExpiredTombstonesParams{Stream: stream, After: after, Through: through, Batch: int64(limit)})
			if err != nil {
				return err
			}
			expired := false
			for _, t := range rows {
				after = max(after, t.ID)
				if t.CreatedAt >= cut {
					continue
				}
				expired = true
				if t.Head == 0 || t.Key == nil {
					continue // superseded: CompactSuperseded's
				}
				if _, err := q.DeleteKeyOtherVersions(ctx, litedb.DeleteKeyOtherVersionsParams{Stream: stream, Key: t.Key,
					HeadOffset: t.ID, Cutoff: r.lagCutoff.UnixMicro()}); err != nil {
					return err
				}
				remain, err := q.KeyHasOtherVersions(ctx, litedb.KeyHasOtherVersionsParams{Stream: stream, Key: t.Key, HeadOffset: t.ID})
				if err != nil || remain {
					if err != nil {
						return err
					}
					continue // younger than the lag: a later pass
				}
				if err := q.DeleteHead(ctx, litedb.DeleteHeadParams{Stream: stream, Key: *t.Key, HeadOffset: t.ID}); err != nil {
					return err
				}
				if err := q.DeleteEvent(ctx, t.ID); err != nil {
					return err
				}
				if n++; n == int64(limit) {
					return nil
				}
			}
			if len(rows) < limit || !expired {
				return nil
			}
		}
		return nil
	})
	return n, err
}

func (o liteOps) sweepAllExpiredJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.SweepAllExpiredJobs(ctx, litedb.SweepAllExpiredJobsParams{Now: now.UnixMicro(), Batch: int64(batch)})
}

func (o liteOps) streamCounts(ctx context.Context, limit int) ([]StreamStats, error) {
	rows, err := o.q.StreamEventStats(ctx, int64(limit))
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, HeadOffset: r.HeadOffset, Events: r.Events}
	}
	return out, err
}

func (o liteOps) headCounts(ctx context.Context, now time.Time, limit int) ([]StreamStats, error) {
	rows, err := o.q.StreamHeadStats(ctx, litedb.StreamHeadStatsParams{Now: now.UnixMicro(), Cap: int64(limit)})
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		// Key rows (up to twice the limit) minus the headless ones: exact
		// while those are below the limit (see StreamHeadStats).
		out[i] = StreamStats{Name: r.Stream, Keys: min(r.KeyRows-r.Headless, int64(limit)), Headless: r.Headless,
			OldestHeadless: now.Sub(time.UnixMicro(r.OldestHeadless))}
	}
	return out, err
}

func (o liteOps) consumerLags(ctx context.Context, limit int) ([]string, []ConsumerStats, error) {
	rows, err := o.q.ConsumerLags(ctx, int64(limit))
	streams, lags := make([]string, len(rows)), make([]ConsumerStats, len(rows))
	for i, r := range rows {
		streams[i], lags[i] = r.Stream, ConsumerStats{Consumer: r.Consumer, Offset: r.CommittedOffset, Lag: r.Unread}
	}
	return streams, lags, err
}

func (o liteOps) compactedStreams(ctx context.Context) ([]string, error) {
	return o.q.CompactedStreams(ctx)
}

func (o liteOps) partitionsDenied(ctx context.Context) (bool, error) {
	denied, err := o.q.PartitionsDenied(ctx)
	return denied != 0, err
}

func (o liteOps) jobQueues(ctx context.Context) ([]string, error) {
	return o.q.JobQueues(ctx)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (o liteOps) deleteFinishedJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.DeleteFinishedJobs(ctx, litedb.DeleteFinishedJobsParams{Now: now.UnixMicro(), Batch: int64(batch)})
}
