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

func (o liteOps) compactWindow(ctx context.Context, r compactReq) (int64, int64, bool, error) {
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
		return 0, r.st.compactedThrough, false, err
	}
	return n, through, false, nil
}

func (o liteOps) tombstoneTx(ctx context.Context, fn func(tombQueries) error) error {
	return o.atomically(ctx, func(q *litedb.Queries) error { return fn(liteTomb{q}) })
}

// liteTomb: the tombstone pass's statements (see expireTombstones). A page
// is the stream's tombstone events after an offset, heads or not, each with
// whether it is still its key's head.
type liteTomb struct{ q *litedb.Queries }

func (t liteTomb) tombstonePage(ctx context.Context, r tombReq, after tombPos, page int) ([]tombRow, tombPos, error) {
	rows, err := t.q.ExpiredTombstones(ctx, litedb.ExpiredTombstonesParams{Stream: r.stream, After: after.id, Through: r.through, Batch: int64(page)})
	out := make([]tombRow, len(rows))
	cut := r.cutoff.UnixMicro()
	for i, x := range rows {
		after.id = max(after.id, x.ID)
		out[i] = tombRow{head: x.ID, expired: x.CreatedAt < cut, take: x.CreatedAt < cut && x.Head != 0 && x.Key != nil}
		if x.Key != nil {
			out[i].key = *x.Key
		}
	}
	return out, after, err
}

func (t liteTomb) deleteKeyOtherVersions(ctx context.Context, stream, key string, head int64, lagCutoff time.Time) error {
	_, err := t.q.DeleteKeyOtherVersions(ctx, litedb.DeleteKeyOtherVersionsParams{Stream: stream, Key: &key, HeadOffset: head, Cutoff: lagCutoff.UnixMicro()})
	return err
}

func (t liteTomb) keyHasOtherVersions(ctx context.Context, stream, key string, head int64) (bool, error) {
	return t.q.KeyHasOtherVersions(ctx, litedb.KeyHasOtherVersionsParams{Stream: stream, Key: &key, HeadOffset: head})
}

func (t liteTomb) deleteTombstone(ctx context.Context, stream, key string, head int64) error {
	if err := t.q.DeleteHead(ctx, litedb.DeleteHeadParams{Stream: stream, Key: key, HeadOffset: head}); err != nil {
		return err
	}
	return t.q.DeleteEvent(ctx, head)
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
