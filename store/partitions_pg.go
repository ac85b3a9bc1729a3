package store

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// Event partitions on PostgreSQL (docs/design/partitions.md).

func (o pgOps) createPartitions(ctx context.Context, opts PartitionOpts) (int64, error) {
	var n int64
	err := o.atomically(ctx, true, func(o pgOps) error {
		n = 0
		if locked, err := o.q.TryPartitionLock(ctx, partitionLockID); err != nil || !locked {
			return err
		}
		if err := o.q.SetLockTimeout(ctx, partitionLockTimeout.String()); err != nil {
			return err
		}
		if err := o.q.SealEventPartitions(ctx); err != nil {
			return err
		}
		f, err := o.q.PartitionFrontier(ctx)
		if err != nil {
			return err
		}
		// Ranges are carved from events_tail, which starts above every
		// range: from its lower bound while it is within Ahead partitions
		// of the newest offset. The default partition's fence lets
		// PostgreSQL skip scanning it (schema 00012).
		upto := f.LastOffset + int64(opts.Ahead)*opts.Size
		if f.TailLo > upto {
			return nil
		}
		created, err := o.q.ExtendEventPartitions(ctx, pgdb.ExtendEventPartitionsParams{Size: opts.Size, Upto: upto})
		n = int64(created)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return 0, errPartitionsDenied
	}
	if skippable(err) {
		return 0, nil
	}
	return n, err
}

// retentionHold is the offset from which ApplyRetention leaves a stream's
// events to a partition drop: the lower bound of the first range
// partition that is not sealed, or whose seal is not yet past the
// stream's retention by retentionGrace. Below it every range partition
// has had its chance to be dropped whole, so the rows left there are what
// a drop cannot take (a partition another stream or a head keeps); above
// it the drop comes first. Events in the default partition (offsets drawn
// before schema 00012 that no range covered) go by rows as before when
// they are below the ranges, and wait behind them when above.
// Without range partitions (none created, or a role without privileges)
// nothing is held.
func (o pgOps) retentionHold(ctx context.Context, retention time.Duration, now time.Time) (int64, error) {
	parts, err := o.q.EventPartitions(ctx)
	if skippable(err) {
		return math.MaxInt64, nil
	}
	if err != nil {
		return 0, err
	}
	for _, p := range parts {
		if p.SealedAt == nil || !p.SealedAt.Add(retention+retentionGrace).Before(now) {
			return p.Lo, nil
		}
	}
	return math.MaxInt64, nil
}

// skippable: partition DDL that could not get its lock in time, or lacks
// the privilege, is left for a later pass (or, for the privilege, to the
// row deletes).
func skippable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.Is(err, errPartitionSkipped) {
		return true
	}
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "55P03", // lock_not_available (lock_timeout)
		"42501": // insufficient_privilege: not the owner of alkstore.events
		return true
	}
	return false
}

// dropExpiredPartitions drops the range partitions whose every event is
// past its stream's retention or trimmed (offset <= trimHorizon of stream
// trimStream; "" trims nothing). It returns how many it dropped and, when
// trimming, how many of trimStream's events went with them (counted first:
// the count reads the rows, which a retention drop does not need to).
//
// A partition is looked at once sealed (every offset below its upper bound
// drawn, at a recorded moment after which no event in it was published)
// and at or below the settled horizon (every offset in it committed or
// gone for good in every later snapshot): the streams it holds, read from
// its (stream, id) index, are then all the streams it will ever hold, and
// each one's retention is compared with the seal instead of every row's
// publish time.
func (o pgOps) dropExpiredPartitions(ctx context.Context, now time.Time, trimStream string, trimHorizon int64) (partitions, events int64, err error) {
	// A role without privileges on event_partitions (granted before 00008
	// created it) leaves partitions alone: the row deletes do the work.
	if err := o.q.SealEventPartitions(ctx); err != nil {
		if skippable(err) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	parts, err := o.q.EventPartitions(ctx)
	if skippable(err) {
		return 0, 0, nil
	}
	if err != nil || len(parts) == 0 {
		return 0, 0, err
	}
	settled, err := o.settled(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range parts {
		if p.SealedAt == nil || p.Hi-1 > settled || trimStream != "" && p.Lo > trimHorizon {
			break // ranges do not overlap: later ones are higher (a trim leaves those above it to retention)
		}
		streams, err := o.q.PartitionStreams(ctx, pgdb.PartitionStreamsParams{Lo: p.Lo, Hi: p.Hi})
		if err != nil {
			return partitions, events, err
		}
		check := pgdb.PartitionExpiredParams{TrimStream: trimStream, TrimHorizon: trimHorizon, SealedAt: *p.SealedAt, Now: now}
		for _, st := range streams {
			check.Streams, check.Tops = append(check.Streams, st.Stream), append(check.Tops, st.Top)
		}
		expired, err := o.q.PartitionExpired(ctx, check)
		if err != nil {
			return partitions, events, err
		}
		if !deref(expired) {
			continue
		}
		var n int64
		if trimStream != "" && slices.Contains(check.Streams, trimStream) {
			if n, err = o.q.PartitionEventCount(ctx, pgdb.PartitionEventCountParams{Lo: p.Lo, Hi: p.Hi, Stream: trimStream}); err != nil {
				return partitions, events, err
			}
		}
		dropped, err := o.dropPartition(ctx, p, now, check)
		if lockTimedOut(err) {
			// A transaction holds events (a long reader or publisher): every
			// other drop would wait for the same lock. One timeout is what
			// the pass pays; the rest waits for a later one.
			return partitions, events, nil
		}
		if err != nil {
			return partitions, events, err
		}
		if dropped {
			partitions, events = partitions+1, events+n
		}
	}
	return partitions, events, nil
}

func (o pgOps) dropPartition(ctx context.Context, p pgdb.AlkstoreEventPartition, now time.Time, check pgdb.PartitionExpiredParams) (bool, error) {
	err := o.atomically(ctx, true, func(o pgOps) error {
		if locked, err := o.q.TryPartitionLock(ctx, partitionLockID); err != nil || !locked {
			return cmp.Or(err, errPartitionSkipped)
		}
		if err := o.q.SetLockTimeout(ctx, partitionLockTimeout.String()); err != nil {
			return err
		}
		// A retention lengthened since the check would make events live
		// again: hold the settings and check again.
		if err := o.q.LockStreamSettings(ctx, check.Streams); err != nil {
			return err
		}
		expired, err := o.q.PartitionExpired(ctx, check)
		if err != nil || !deref(expired) {
			return cmp.Or(err, errPartitionSkipped)
		}
		// Heads are locked before the table (SKIP LOCKED: never waiting on
		// a key's holder), then DROP waits at most the lock timeout.
		if err := o.q.UnheadPartition(ctx, pgdb.UnheadPartitionParams{Lo: p.Lo, Hi: p.Hi, Now: now}); err != nil {
			return err
		}
		held, err := o.q.PartitionHasHeads(ctx, pgdb.PartitionHasHeadsParams{Lo: p.Lo, Hi: p.Hi})
		if err != nil || held {
			return cmp.Or(err, errPartitionSkipped)
		}
		dropped, err := o.q.DropEventPartition(ctx, p.Name)
		if err != nil || !dropped {
			return cmp.Or(err, errPartitionSkipped)
		}
		return nil
	})
	if skippable(err) && !lockTimedOut(err) {
		return false, nil
	}
	return err == nil, err
}

// lockTimedOut: partition DDL waited its lock_timeout for a table another
// transaction holds.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
