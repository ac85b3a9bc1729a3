package store

import (
	"context"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// Maintenance and Stats statements on PostgreSQL.

func (o pgOps) maintainedStreams(ctx context.Context) ([]streamSettings, error) {
	rows, err := o.q.MaintainedStreams(ctx)
	out := make([]streamSettings, len(rows))
	for i, r := range rows {
		out[i] = streamSettings{name: r.Name, compacted: r.Compacted, retention: usPtr(r.RetentionUs),
			minCompactionLag:   time.Duration(r.MinCompactionLagUs) * time.Microsecond,
			tombstoneRetention: time.Duration(r.TombstoneRetentionUs) * time.Microsecond,
			compactedThrough:   r.CompactedThrough}
	}
	return out, err
}

func (o pgOps) streamsWithHeadless(ctx context.Context) ([]streamSettings, error) {
	rows, err := o.q.StreamsWithHeadless(ctx)
	out := make([]streamSettings, len(rows))
	for i, r := range rows {
		out[i] = streamSettings{name: r.Stream, headlessTTL: time.Duration(r.HeadlessTtlUs) * time.Microsecond}
	}
	return out, err
}

func (o pgOps) deleteExpiredHeadless(ctx context.Context, stream string, cutoff time.Time, limit int) (int64, error) {
	return o.q.DeleteExpiredHeadless(ctx, pgdb.DeleteExpiredHeadlessParams{Stream: stream, Cutoff: cutoff, Batch: clampLimit(limit)})
}

func (o pgOps) retainWindow(ctx context.Context, r retainReq) (int64, error) {
	hold, err := o.retentionHold(ctx, *r.st.retention, r.now)
	if err != nil {
		return 0, err
	}
	var n int64
	err = o.atomically(ctx, true, func(o pgOps) error {
		w, err := o.q.RetentionWindow(ctx, pgdb.RetentionWindowParams{Stream: r.st.name, Compacted: r.st.compacted,
			Cutoff: r.cutoff, Hold: hold, Lim: clampLimit(r.window)})
		if err != nil || w.Upto < w.FirstID {
			return err
		}
		if !r.st.compacted {
			err = o.q.UnheadRetained(ctx, pgdb.UnheadRetainedParams{Stream: r.st.name, FirstID: w.FirstID, Upto: w.Upto, Now: r.now})
		}
		if err == nil {
			n, err = o.q.DeleteRetained(ctx, pgdb.DeleteRetainedParams{Stream: r.st.name, FirstID: w.FirstID, Upto: w.Upto, Lim: clampLimit(r.window)})
		}
		return err
	})
	return n, err
}

func (o pgOps) compactWindow(ctx context.Context, r compactReq) (int64, int64, bool, error) {
	// The walk never passes an event still in flight: one committed later
	// below the cursor would never be walked.
	hz, err := o.settled(ctx)
	if err != nil {
		return 0, r.st.compactedThrough, false, err
	}
	var n int64
	held := false
	through := r.st.compactedThrough
	err = o.atomically(ctx, true, func(o pgOps) error {
		upto, err := o.q.CompactionWindow(ctx, pgdb.CompactionWindowParams{Stream: r.st.name, After: r.st.compactedThrough,
			Horizon: hz, Cutoff: r.cutoff, Lim: clampLimit(r.window)})
		if err != nil || upto <= r.st.compactedThrough {
			return err
		}
		w, err := o.q.CompactWindow(ctx, pgdb.CompactWindowParams{Stream: r.st.name, After: r.st.compactedThrough, Upto: upto,
			Cutoff: r.cutoff, Batch: clampLimit(r.limit)})
		n = w.Deleted
		if err != nil || n >= int64(r.limit) {
			return err // the r.window again next time: it may hold more
		}
		if w.Found > w.Deleted {
			// Versions another transaction holds (a janitor's window that
			// may yet roll back) or deleted since: the window again next
			// time, as walked past now a version back after a rollback
			// stayed for good. Nothing waits for the holder
			// (CompactSuperseded warns when it keeps the cursor long).
			held = true
			return nil
		}
		through = upto
		return o.q.AdvanceCompaction(ctx, pgdb.AdvanceCompactionParams{Stream: r.st.name, Upto: upto})
	})
	if err != nil {
		return 0, r.st.compactedThrough, false, err
	}
	return n, through, held, nil
}

func (o pgOps) tombstoneTx(ctx context.Context, fn func(tombQueries) error) error {
	return o.atomically(ctx, true, func(o pgOps) error { return fn(pgTomb{o.q}) })
}

// pgTomb: the tombstone pass's statements (see expireTombstones). A page
// is the stream's tombstone heads older than the cutoff after a
// (tombstone_at, key), locked, skipping held rows (schema 00042).
type pgTomb struct{ q *pgdb.Queries }

func (t pgTomb) tombstonePage(ctx context.Context, r tombReq, after tombPos, page int) ([]tombRow, tombPos, error) {
	rows, err := t.q.ExpiredTombstones(ctx, pgdb.ExpiredTombstonesParams{Stream: r.stream, Through: r.through, Cutoff: r.cutoff,
		AfterAt: after.at, AfterKey: after.key, Batch: clampLimit(page)})
	out := make([]tombRow, len(rows))
	for i, x := range rows {
		after = tombPos{at: x.TombstoneAt, key: x.Key} // in (tombstone_at, key) order
		out[i] = tombRow{key: x.Key, head: x.HeadOffset, expired: true, take: x.Take}
	}
	return out, after, err
}

func (t pgTomb) deleteKeyOtherVersions(ctx context.Context, stream, key string, head int64, lagCutoff time.Time) error {
	_, err := t.q.DeleteKeyOtherVersions(ctx, pgdb.DeleteKeyOtherVersionsParams{Stream: stream, Key: key, HeadOffset: head, Cutoff: lagCutoff})
	return err
}

func (t pgTomb) keyHasOtherVersions(ctx context.Context, stream, key string, head int64) (bool, error) {
	return t.q.KeyHasOtherVersions(ctx, pgdb.KeyHasOtherVersionsParams{Stream: stream, Key: key, HeadOffset: head})
}

func (t pgTomb) deleteTombstone(ctx context.Context, stream, key string, head int64) error {
	if err := t.q.DeleteHead(ctx, pgdb.DeleteHeadParams{Stream: stream, Key: key, HeadOffset: head}); err != nil {
		return err
	}
	return t.q.DeleteEvent(ctx, head)
}

func (o pgOps) sweepAllExpiredJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.SweepAllExpiredJobs(ctx, pgdb.SweepAllExpiredJobsParams{Now: now, Batch: clampLimit(batch)})
}

func (o pgOps) streamCounts(ctx context.Context, limit int) ([]StreamStats, error) {
	rows, err := o.q.StreamEventStats(ctx, clampLimit(limit))
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, HeadOffset: r.HeadOffset, Events: r.Events}
	}
	return out, err
}

func (o pgOps) headCounts(ctx context.Context, now time.Time, limit int) ([]StreamStats, error) {
	rows, err := o.q.StreamHeadStats(ctx, pgdb.StreamHeadStatsParams{Now: now, Cap: clampLimit(limit)})
	out := make([]StreamStats, len(rows))
	for i, r := range rows {
		out[i] = StreamStats{Name: r.Stream, Keys: r.KeyCount, Headless: r.Headless, OldestHeadless: now.Sub(r.OldestHeadless)}
	}
	return out, err
}

func (o pgOps) consumerLags(ctx context.Context, limit int) ([]string, []ConsumerStats, error) {
	rows, err := o.q.ConsumerLags(ctx, clampLimit(limit))
	streams, lags := make([]string, len(rows)), make([]ConsumerStats, len(rows))
	for i, r := range rows {
		streams[i], lags[i] = r.Stream, ConsumerStats{Consumer: r.Consumer, Offset: r.CommittedOffset, Lag: r.Unread}
	}
	return streams, lags, err
}

func (o pgOps) compactedStreams(ctx context.Context) ([]string, error) {
	return o.q.CompactedStreams(ctx)
}

func (o pgOps) partitionsDenied(ctx context.Context) (bool, error) {
	return o.q.PartitionsDenied(ctx)
}

func (o pgOps) jobQueues(ctx context.Context) ([]string, error) {
	return o.q.JobQueues(ctx)
}

func (o pgOps) deleteFinishedJobs(ctx context.Context, now time.Time, batch int) (int64, error) {
	return o.q.DeleteFinishedJobs(ctx, pgdb.DeleteFinishedJobsParams{Now: now, Batch: clampLimit(batch)})
}
