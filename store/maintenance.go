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
// it returns batch. A pass that walks several streams commits each
// stream's (or window's) deletes on their own, so on an error (its context
// ending mid-pass, say) it still returns the rows of those that committed
// before it.
type Maintenance struct{ s *Store }

// Maintenance returns the store's maintenance passes (see package janitor,
// which runs them on a schedule).
func (s *Store) Maintenance() Maintenance { return Maintenance{s: s} }

// pass runs fn, a pass that counts only the rows of the transactions that
// committed, and returns its count with its error: run returns the zero
// value with an error, so the count is kept outside it. Without this, a
// janitor pass whose budget ended after one stream's deletes had committed
// reported none of them (as DropExpiredPartitions did before).
func (m Maintenance) pass(ctx context.Context, op string, batch int, fn func(o target, now time.Time, batch int) (int64, error)) (int64, error) {
	var done int64
	_, err := run(handle{s: m.s}, op, autoWrite(ctx), func(o target) (int64, error) {
		if batch <= 0 {
			return 0, fmt.Errorf("%w: batch must be positive", ErrInvalidArgument)
		}
		n, err := fn(o, m.s.now(), batch)
		done = n
		return n, err
	})
	return done, err
}

// streamSettings is what the passes read of a stream's settings.
type streamSettings struct {
	name               string
	compacted          bool
	retention          *time.Duration
	headlessTTL        time.Duration
	minCompactionLag   time.Duration
	tombstoneRetention time.Duration
	compactedThrough   int64 // CompactSuperseded's cursor
}

// The passes below visit streams in name order and share one batch among
// them: each statement they run changes at most what is left of it, and
// reads a bounded window of an index (see queries/*/maintenance.sql), so a
// transaction (on SQLite, the writer slot) is held for bounded work only.

// DeleteExpiredHeadless deletes headless compaction rows unused for longer
// than their stream's HeadlessTTL. A later LockCompactionHeadTx recreates
// one. Cost: one index probe per stream with headless rows, plus the rows
// it deletes.
func (m Maintenance) DeleteExpiredHeadless(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "delete expired headless", batch, func(o target, now time.Time, batch int) (int64, error) {
		streams, err := o.streamsWithHeadless(ctx)
		var n int64
		for _, st := range streams {
			if err != nil || n >= int64(batch) {
				break
			}
			var k int64
			if k, err = o.deleteExpiredHeadless(ctx, st.name, now.Add(-st.headlessTTL), batch-int(n)); err == nil {
				n += k // one auto-commit statement: committed
			}
		}
		return n, err
	})
}

// ApplyRetention deletes events older than their stream's Retention,
// sparing the current heads of compacted streams. On other streams a key
// whose head it deletes becomes headless (see Stream.TrimTo). Each stream
// with a retention is walked from its oldest event and the walk stops at
// the first one not past retention, so the cost is the rows it deletes
// (plus, on a compacted stream, the old heads it spares).
func (m Maintenance) ApplyRetention(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "apply retention", batch, func(o target, now time.Time, batch int) (int64, error) {
		streams, err := o.maintainedStreams(ctx)
		var n int64
		for _, st := range streams {
			if err != nil || n >= int64(batch) {
				break
			}
			if st.retention == nil {
				continue
			}
			var k int64
			if k, err = o.retainWindow(ctx, retainReq{st: st, cutoff: now.Add(-*st.retention), now: now, window: batch - int(n)}); err == nil {
				n += k // the stream's window committed
			}
		}
		return n, err
	})
}

// CompactSuperseded deletes keyed events of compacted streams that their
// key's head superseded (the versions before the head, and later ones that
// lost to it by rank), and every version of a key without a head (left by
// a trim or retention while the stream was not compacted), once older than
// the stream's MinCompactionLag. On PostgreSQL a window that finds a
// version another transaction holds (a janitor's window that may roll
// back) keeps the cursor below it, without waiting. It
// walks each compacted stream forward from where its last walk ended (a
// cursor kept in the stream's settings row), deleting the other versions
// of each key it meets, so each event is walked once: the cost is the events
// published since the last pass plus the rows it deletes, never the
// stream's history. The walk stops at the first event younger than the lag
// (and, on PostgreSQL, at the settled horizon).
func (m Maintenance) CompactSuperseded(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "compact", batch, func(o target, now time.Time, batch int) (int64, error) {
		streams, err := o.maintainedStreams(ctx)
		var n int64
		for _, st := range streams {
			if !st.compacted {
				continue
			}
			from := st.compactedThrough
			walked, held := false, false
			for err == nil && n < int64(batch) && ctx.Err() == nil {
				walked = true
				var k, through int64
				k, through, held, err = o.compactWindow(ctx, compactReq{st: st, cutoff: now.Add(-st.minCompactionLag), window: batch, limit: batch - int(n)})
				if err == nil {
					n += k // the window committed
				}
				if through == st.compactedThrough && k == 0 {
					break // walked up to the lag or the horizon, or held
				}
				st.compactedThrough = through
			}
			if walked && err == nil {
				m.s.compactHeld.observe(m.s.log, st.name, now, held && st.compactedThrough == from, st.compactedThrough)
			}
		}
		return n, err
	})
}

// DeleteExpiredTombstones deletes, on compacted streams, keys whose head
// has been a tombstone for longer than TombstoneRetention: the head row and
// the tombstone event go together. A tombstone goes only once
// CompactSuperseded has walked past it (after MinCompactionLag), so the
// key's other versions are gone first: deleted before them, it would leave
// them without the head row through which compaction finds them. The
// key's other versions (before the tombstone, or lost to it by rank) go
// with it, those older than MinCompactionLag (compaction leaves one that
// was younger than the lag when it walked past: on PostgreSQL an event's
// created_at is its transaction's start, so a tombstone can be older than
// the value before it); while one is left, the tombstone stays. It reads
// each compacted stream's oldest expired tombstones a page at a time on a
// partial index: of tombstone heads on PostgreSQL (schema 00042), of
// tombstone events on SQLite, paging past those it keeps
// (expireTombstones).
func (m Maintenance) DeleteExpiredTombstones(ctx context.Context, batch int) (int64, error) {
	return m.pass(ctx, "delete expired tombstones", batch, func(o target, now time.Time, batch int) (int64, error) {
		streams, err := o.maintainedStreams(ctx)
		var n int64
		for _, st := range streams {
			if err != nil || n >= int64(batch) {
				break
			}
			if !st.compacted {
				continue
			}
			var k int64
			var from tombPos
			if v, ok := m.s.tombFrom.Load(st.name); ok {
				from = v.(tombPos)
			}
			k, from, err = expireTombstones(ctx, o, tombReq{stream: st.name, through: st.compactedThrough,
				cutoff: now.Add(-st.tombstoneRetention), lagCutoff: now.Add(-st.minCompactionLag), limit: batch - int(n)}, from)
			m.s.tombFrom.Store(st.name, from)
			n += k // the pages that committed
		}
		return n, err
	})
}

// expireTombstones is one stream's tombstone pass, on both engines: a page
// of its tombstones at a time (tombstonePage), each page in a transaction
// of its own, deleting the expired ones still their key's head with the
// key's other versions older than the lag, and keeping one whose key has
// a version left (younger than the lag, or held), until it has deleted
// r.limit, the tombstones end (a short page), or a whole page holds none
// older than the cutoff (SQLite reads tombstones younger than the cutoff
// too; offsets and created_at rise together, so the rest are younger). It
// pages past the tombstones it keeps, and on SQLite past those superseded
// and not yet compacted: read as the only candidates, either kind filled
// every batch ahead of the expired tombstones (until the lag passed, or
// CompactSuperseded removed them). A pass checks about r.limit kept
// tombstones at most, from where this store's last pass stopped (from),
// and returns where the next starts: the start again once it read to the
// end. It returns the deletes of the pages that committed.
func expireTombstones(ctx context.Context, o maintenanceOps, r tombReq, from tombPos) (int64, tombPos, error) {
	var n int64
	after := from
	kept := 0 // tombstones checked and kept: a pass checks about r.limit
	for n < int64(r.limit) {
		var k int64
		more := false
		start := after
		err := o.tombstoneTx(ctx, func(q tombQueries) error {
			k = 0
			rows, next, err := q.tombstonePage(ctx, r, after, r.limit)
			if err != nil {
				return err
			}
			expired := false
			for _, t := range rows {
				if !t.expired {
					continue
				}
				expired = true
				if !t.take {
					continue // superseded (CompactSuperseded's), or a stale mark put right
				}
				// The key's other versions (before it, or lost to it by
				// rank) go first; one left (younger than the lag, or held)
				// keeps the tombstone for a later pass.
				if err := q.deleteKeyOtherVersions(ctx, r.stream, t.key, t.head, r.lagCutoff); err != nil {
					return err
				}
				remain, err := q.keyHasOtherVersions(ctx, r.stream, t.key, t.head)
				if err != nil {
					return err
				}
				if remain {
					kept++
					continue
				}
				if err := q.deleteTombstone(ctx, r.stream, t.key, t.head); err != nil {
					return err
				}
				if k++; n+k == int64(r.limit) {
					return nil
				}
			}
			after, more = next, len(rows) == r.limit && expired
			return nil
		})
		if err != nil {
			return n, start, err
		}
		n += k
		switch {
		case !more:
			return n, tombPos{}, nil // the end: the next pass starts over
		case n >= int64(r.limit):
			return n, start, nil // this page may hold more to delete
		case kept >= r.limit:
			// Kept tombstones fill the pass: it stops after this page, as
			// a pass that deletes does after its batch, and the next pass
			// goes on from here. Read all in one pass, thousands of them
			// (each two statements) used every pass's time budget on
			// PostgreSQL, and no task after this one ever ran.
			return n, after, nil
		}
	}
	return n, after, nil
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
	Horizon HorizonStats // how far stream delivery trails the newest committed event
	// PartitionsDenied: on PostgreSQL, this role does not own
	// alkstore.events, so it can neither create nor drop event partitions;
	// retention and trims delete events row by row (the janitor logs it
	// once). Always false on SQLite, which has no partitions.
	PartitionsDenied bool
}

// StatsCountLimit caps every count in Stats and Queue.Stats: each is read
// from an index range that stops after this many rows, so that Stats costs
// the same on a table of a billion rows as on one of a thousand. A count
// equal to it means "at least this many". Below it, counts are exact.
const StatsCountLimit = 10_000

// StreamStats describes one stream. HeadOffset and OldestHeadless are exact
// (each the first entry of an index); Events, Keys and Headless are exact
// below StatsCountLimit and capped at it.
type StreamStats struct {
	Name       string
	HeadOffset int64 // the newest offset; 0 for none
	Events     int64 // capped at StatsCountLimit
	Consumers  []ConsumerStats
	Compacted  bool
	// For keyed streams: keys with a head, headless rows (each capped at
	// StatsCountLimit), and how long the oldest headless row has gone
	// unused (0 when none). Keys is the stream's first 2 × StatsCountLimit
	// key rows minus its headless ones, so it is exact while Headless is
	// below the limit; with Headless at it, Keys may count up to Headless -
	// StatsCountLimit too many.
	Keys, Headless int64
	OldestHeadless time.Duration
}

// ConsumerStats is one consumer's position (exact) and how many events it
// has not read yet (exact below StatsCountLimit, capped at it).
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

// Stats reports every stream with events or keys (head offset, event
// count, consumers and their lag; keys, headless rows and the oldest
// headless age) and every queue with pending, running or dead jobs (counts
// by state, oldest ready age). It reads indexes only: its cost grows with
// the number of streams, consumers and queues, not with their rows, and
// its counts stop at StatsCountLimit (see StreamStats and QueueStats for
// which figures are exact).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	return run(handle{s: s}, "stats", autoRead, func(o target) (Stats, error) {
		now := s.now()
		streams, err := streamStats(ctx, o, now)
		if err != nil {
			return Stats{}, err
		}
		names, err := o.jobQueues(ctx)
		if err != nil {
			return Stats{}, err
		}
		out := Stats{Streams: streams, Queues: make([]NamedQueueStats, len(names))}
		if out.PartitionsDenied, err = o.partitionsDenied(ctx); err != nil {
			return Stats{}, err
		}
		for i, name := range names {
			out.Queues[i].Queue = name
			if out.Queues[i].QueueStats, err = o.queueStats(ctx, name, now); err != nil {
				return Stats{}, err
			}
		}
		var head int64
		for _, st := range streams {
			head = max(head, st.HeadOffset)
		}
		if out.Horizon, err = horizonStats(ctx, o, head, now); err != nil {
			return Stats{}, err
		}
		return out, nil
	})
}

// Streams is the streams part of Stats, without its queues (Store.Queues
// lists those, idle ones included): every stream with events or keys, by
// name, with its head offset, event count, consumers and their lag, keys,
// headless rows and the oldest headless age. Its cost is Stats's.
func (s *Store) Streams(ctx context.Context) ([]StreamStats, error) {
	return run(handle{s: s}, "streams", autoRead, func(o target) ([]StreamStats, error) {
		return streamStats(ctx, o, s.now())
	})
}

func streamStats(ctx context.Context, o target, now time.Time) ([]StreamStats, error) {
	byName := map[string]*StreamStats{}
	get := func(name string) *StreamStats {
		if byName[name] == nil {
			byName[name] = &StreamStats{Name: name}
		}
		return byName[name]
	}
	counts, err := o.streamCounts(ctx, StatsCountLimit)
	if err != nil {
		return nil, err
	}
	for _, c := range counts {
		st := get(c.Name)
		st.HeadOffset, st.Events = c.HeadOffset, c.Events
	}
	heads, err := o.headCounts(ctx, now, StatsCountLimit)
	if err != nil {
		return nil, err
	}
	for _, h := range heads {
		st := get(h.Name)
		st.Keys, st.Headless, st.OldestHeadless = h.Keys, h.Headless, h.OldestHeadless
	}
	streams, lags, err := o.consumerLags(ctx, StatsCountLimit)
	if err != nil {
		return nil, err
	}
	for i, l := range lags {
		st := get(streams[i])
		st.Consumers = append(st.Consumers, l)
	}
	compacted, err := o.compactedStreams(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range compacted {
		get(name).Compacted = true
	}
	var out []StreamStats
	for _, st := range byName {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b StreamStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// usPtr reads an optional duration stored in microseconds.
func usPtr(us *int64) *time.Duration {
	if us == nil {
		return nil
	}
	d := time.Duration(*us) * time.Microsecond
	return &d
}
