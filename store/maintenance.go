package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Maintenance is the janitor's access to the store's bounded maintenance
// passes. Each call changes at most batch rows, skipping rows other
// transactions hold, and returns how many it changed: call it again while
// it returns batch.
type Maintenance struct{ s *Store }

// Maintenance returns the store's maintenance passes (see package janitor,
// which runs them on a schedule).
func (s *Store) Maintenance() Maintenance { return Maintenance{s: s} }

func (m Maintenance) pass(ctx context.Context, op string, batch int, fn func(o target, now time.Time, batch int) (int64, error)) (int64, error) {
	return run(handle{s: m.s}, op, autoWrite(ctx), func(o target) (int64, error) {
		if batch <= 0 {
			return 0, fmt.Errorf("%w: batch must be positive", ErrInvalidArgument)
		}
		return fn(o, m.s.now(), batch)
	})
}

// DeleteExpiredHeadless deletes headless compaction rows unused for longer
// than their stream's HeadlessTTL. A later LockCompactionHeadTx recreates one.
func (m Maintenance) DeleteExpiredHeadless(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "delete expired headless", batch, func(o target, now time.Time, batch int) (int64, error) {
		return o.deleteExpiredHeadless(ctx, now, batch)
	})
}

// ApplyRetention deletes events older than their stream's Retention,
// sparing the current heads of compacted streams. On other streams a key
// whose head it deletes becomes headless (see Stream.TrimTo).
func (m Maintenance) ApplyRetention(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "apply retention", batch, func(o target, now time.Time, batch int) (int64, error) {
		return o.applyRetention(ctx, now, batch)
	})
}

// CompactSuperseded deletes keyed events of compacted streams that a newer
// head superseded, once older than the stream's MinCompactionLag.
func (m Maintenance) CompactSuperseded(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "compact", batch, func(o target, now time.Time, batch int) (int64, error) {
		return o.compactSuperseded(ctx, now, batch)
	})
}

// DeleteExpiredTombstones deletes, on compacted streams, keys whose head
// has been a tombstone for longer than TombstoneRetention: the head row and
// the tombstone event go together.
func (m Maintenance) DeleteExpiredTombstones(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "delete expired tombstones", batch, func(o target, now time.Time, batch int) (int64, error) {
		return o.deleteExpiredTombstones(ctx, now, batch)
	})
}

// SweepExpiredJobs ends the expired jobs of every queue as expired
// (pending ones, and running ones whose claim lapsed).
func (m Maintenance) SweepExpiredJobs(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "sweep expired jobs", batch, func(o target, now time.Time, batch int) (int64, error) {
		return o.sweepAllExpiredJobs(ctx, now, batch)
	})
}

// DeleteFinishedJobs deletes finished jobs past their queue's retention
// (QueueConfig): completed ones older than CompletedRetention, dead,
// cancelled and expired ones older than DeadRetention when it is set.
func (m Maintenance) DeleteFinishedJobs(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "delete finished jobs", batch, func(o target, now time.Time, batch int) (int64, error) {
		return o.deleteFinishedJobs(ctx, now, batch)
	})
}

// PruneNotifications deletes SQLite's stored notifications older than
// maxAge, keeping at most keep of the newest (listeners have read them on
// wake long before). On Postgres, where notifications are never stored, it
// does nothing. Unlike the other passes it is bounded by keep, not a batch.
func (m Maintenance) PruneNotifications(ctx context.Context, maxAge time.Duration, keep int) (int64, error) {
	return run(handle{s: m.s}, "prune notifications", autoWrite(ctx), func(o target) (int64, error) {
		if maxAge < 0 || keep < 0 {
			return 0, fmt.Errorf("%w: maxAge and keep must not be negative", ErrInvalidArgument)
		}
		return o.pruneNotifications(ctx, m.s.now().Add(-maxAge), keep)
	})
}

// Stats is a snapshot of the store's streams and queues.
type Stats struct {
	Streams []StreamStats
	Queues  []NamedQueueStats
}

// StreamStats describes one stream.
type StreamStats struct {
	Name       string
	HeadOffset int64 // the newest offset; 0 for none
	Events     int64
	Consumers  []ConsumerStats
	Compacted  bool
	// For keyed streams: keys with a head, headless rows, and how long the
	// oldest headless row has gone unused (0 when none).
	Keys, Headless int64
	OldestHeadless time.Duration
}

// ConsumerStats is one consumer's position and how many events it has not
// read yet.
type ConsumerStats struct {
	Consumer string
	Offset   int64
	Lag      int64
}

// NamedQueueStats is one queue's counts.
type NamedQueueStats struct {
	Queue string
	QueueStats
}

// Stats reports every stream (head offset, event count, consumers and their
// lag; keys, headless rows and the oldest headless age) and every queue
// (counts by state, oldest ready age).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	return run(handle{s: s}, "stats", autoRead, func(o target) (Stats, error) {
		now := s.now()
		byName := map[string]*StreamStats{}
		get := func(name string) *StreamStats {
			if byName[name] == nil {
				byName[name] = &StreamStats{Name: name}
			}
			return byName[name]
		}
		counts, err := o.streamCounts(ctx)
		if err != nil {
			return Stats{}, err
		}
		for _, c := range counts {
			st := get(c.Name)
			st.HeadOffset, st.Events = c.HeadOffset, c.Events
		}
		heads, err := o.headCounts(ctx, now)
		if err != nil {
			return Stats{}, err
		}
		for _, h := range heads {
			st := get(h.Name)
			st.Keys, st.Headless, st.OldestHeadless = h.Keys, h.Headless, h.OldestHeadless
		}
		streams, lags, err := o.consumerLags(ctx)
		if err != nil {
			return Stats{}, err
		}
		for i, l := range lags {
			st := get(streams[i])
			st.Consumers = append(st.Consumers, l)
		}
		compacted, err := o.compactedStreams(ctx)
		if err != nil {
			return Stats{}, err
		}
		for _, name := range compacted {
			get(name).Compacted = true
		}
		queues, err := o.queueCounts(ctx, now)
		if err != nil {
			return Stats{}, err
		}
		out := Stats{Queues: queues}
		for _, st := range byName {
			out.Streams = append(out.Streams, *st)
		}
		slices.SortFunc(out.Streams, func(a, b StreamStats) int { return strings.Compare(a.Name, b.Name) })
		return out, nil
	})
}
