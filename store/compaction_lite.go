package store

import (
	"context"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
	"github.com/alkstore/alkstore/internal/litedriver"
)

// Compaction statements on SQLite: the event and its head upsert run in one
// transaction on the writer slot (litedriver.WriteTx, whose failure rolls
// it back), or, inside the caller's transaction, behind a savepoint: SQLite
// keeps a transaction open after a failed statement, so a head write that
// failed (an application's trigger, a full disk) would otherwise leave the
// event, headless, for the caller's commit. Not one statement: an INSTEAD
// OF trigger on a view the publish inserts into costs SQLite as much as the
// two statements in a transaction (callgrind, SQLite alone: 185k against
// 184k instructions); one on the events table taxes every unkeyed insert
// (stop 35); and in an auto-commit statement an application trigger's
// RAISE(FAIL) would keep the event without its head.

func (o liteOps) publishKeyed(ctx context.Context, e keyedEvent) (int64, error) {
	ev := litedb.PublishKeyedEventParams{Stream: e.stream, Key: e.key, Payload: e.payload, Headers: liteHeaders(e.headers)}
	head := litedb.UpsertCompactionHeadParams{Stream: e.stream, Key: e.key,
		SchemaVersion: int64(e.schemaVersion), CompactionRank: e.rank, Now: e.now.UnixMicro()}
	if o.db != nil {
		// On the writer slot, in a transaction of its own: the same two
		// statements without database/sql's transaction (litedriver.WriteTx),
		// which cost about as much as the head's upsert (callgrind, 1,024
		// keys: 242.9k -> 207.6k instructions a keyed publish; unkeyed
		// 110.6k).
		var off int64
		err := litedriver.WriteTx(ctx, o.db, func(w *litedriver.Writer) error {
			id, n, err := o.q.PublishKeyedEventOn(w, ev)
			if err != nil {
				return err
			}
			if n != 1 { // see below
				return errSkipped("event")
			}
			off, head.HeadOffset = id, id
			return o.q.UpsertCompactionHeadOn(w, head)
		})
		return off, err
	}
	var off int64
	err := o.allOrNone(ctx, true, func(q *litedb.Queries) error {
		var err error
		res, err := q.PublishKeyedEvent(ctx, ev)
		if err != nil {
			return err
		}
		// An application's trigger may skip the row (RAISE(IGNORE)): then
		// the last inserted rowid is another row's, and nothing was
		// published (as PostgreSQL's RETURNING says with no row).
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return errSkipped("event")
		}
		if off, err = res.LastInsertId(); err != nil {
			return err
		}
		head.HeadOffset = off
		return q.UpsertCompactionHead(ctx, head)
	})
	return off, err
}

// upsertHead makes off, a batch's rank-0 event of key, the key's head by
// the winner rule.
func (o liteOps) upsertHead(ctx context.Context, stream, key string, off int64, now time.Time) error {
	return o.q.UpsertCompactionHead(ctx, litedb.UpsertCompactionHeadParams{Stream: stream, Key: key, HeadOffset: off,
		SchemaVersion: 1, CompactionRank: 0, Now: now.UnixMicro()})
}

func (o liteOps) getHead(ctx context.Context, stream, key string) (*Head, error) {
	r, err := o.q.GetCompactionHead(ctx, litedb.GetCompactionHeadParams{Stream: stream, Key: key})
	if err != nil {
		return nil, err
	}
	return &Head{Key: key, Offset: r.HeadOffset, Payload: r.Payload, SchemaVersion: int(r.SchemaVersion),
		Rank: r.CompactionRank, UpdatedAt: time.UnixMicro(r.UpdatedAt)}, nil
}

func (o liteOps) lockHead(ctx context.Context, stream, key string) (*headRow, error) {
	rows, err := o.q.LockCompactionHead(ctx, litedb.LockCompactionHeadParams{Stream: stream, Key: key})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	r := rows[0]
	return &headRow{offset: r.HeadOffset, schemaVersion: int(deref(r.SchemaVersion)), rank: deref(r.CompactionRank),
		updatedAt: time.UnixMicro(r.UpdatedAt)}, nil
}

func (o liteOps) eventPayload(ctx context.Context, id int64) ([]byte, bool, error) {
	payloads, err := o.q.GetEventPayload(ctx, id)
	if err != nil || len(payloads) == 0 {
		return nil, false, err
	}
	return payloads[0], true, nil
}

func (o liteOps) insertHeadless(ctx context.Context, stream, key string, now time.Time) error {
	return o.q.InsertHeadlessHead(ctx, litedb.InsertHeadlessHeadParams{Stream: stream, Key: key, Now: now.UnixMicro()})
}

func (o liteOps) touchHeadless(ctx context.Context, stream, key string, now time.Time) error {
	return o.q.TouchHeadlessHead(ctx, litedb.TouchHeadlessHeadParams{Stream: stream, Key: key, Now: now.UnixMicro()})
}

func (o liteOps) listHeads(ctx context.Context, stream, after string, limit int) ([]Head, error) {
	rows, err := o.q.ListHeads(ctx, litedb.ListHeadsParams{Stream: stream, After: after, Lim: int64(limit)})
	heads := make([]Head, len(rows))
	for i, r := range rows {
		heads[i] = Head{Key: r.Key, Offset: r.HeadOffset, Payload: r.Payload, SchemaVersion: int(r.SchemaVersion),
			Rank: r.CompactionRank, UpdatedAt: time.UnixMicro(r.UpdatedAt)}
	}
	return heads, err
}

func (o liteOps) configureStream(ctx context.Context, name string, c StreamConfig) error {
	p := litedb.ConfigureStreamParams{Name: name, HeadlessTtlUs: c.HeadlessTTL.Microseconds(),
		MinCompactionLagUs: c.MinCompactionLag.Microseconds(), TombstoneRetentionUs: c.TombstoneRetention.Microseconds()}
	if c.Compacted {
		p.Compacted = 1
	}
	if c.Retention > 0 {
		us := c.Retention.Microseconds()
		p.RetentionUs = &us
	}
	return o.q.ConfigureStream(ctx, p)
}
