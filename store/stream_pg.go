package store

// Stream statements on PostgreSQL: publish, read, consumer offsets, trim.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

func (o pgOps) publish(ctx context.Context, r publishReq) (int64, error) {
	id, err := o.q.PublishEvent(ctx, pgdb.PublishEventParams{Stream: r.stream, Key: r.key, Payload: r.payload, Headers: r.headers,
		Wake: o.wake(streamTopic(r.stream))})
	return id, skipped("event", err)
}

func (o pgOps) publishMany(ctx context.Context, r publishManyReq) ([]int64, error) {
	p := pgdb.PublishEventsParams{
		Stream:   r.stream,
		Wake:     o.wake(streamTopic(r.stream)),
		Keyed:    make([]bool, len(r.msgs)),
		Keys:     make([]string, len(r.msgs)),
		Payloads: make([][]byte, len(r.msgs)),
		Now:      r.now,
	}
	for i, m := range r.msgs {
		if m.Key != nil {
			p.Keyed[i], p.Keys[i] = true, *m.Key
		}
		p.Payloads[i] = m.Payload
	}
	if r.headers != nil { // otherwise unnest pads the column with NULLs (see pgHeaderArray)
		p.Headers = make([]string, len(r.msgs))
		for i, h := range r.headers {
			p.Headers[i] = string(h)
		}
	}
	ids, err := o.q.PublishEvents(ctx, p) // the keys' heads too, in one statement
	return allInserted(len(r.msgs), ids, err)
}

func (o pgOps) readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	if !o.inTx {
		return o.readSincePiped(ctx, stream, after, limit)
	}
	hz, err := o.settled(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := o.q.ReadEvents(ctx, pgdb.ReadEventsParams{Stream: stream, After: after, Horizon: hz, Lim: clampLimit(limit)})
	return pgEvents(rows), err
}

func (o pgOps) readFromConsumer(ctx context.Context, stream, consumer string, limit int) ([]Event, error) {
	hz, err := o.settled(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := o.q.ReadEventsFromConsumer(ctx, pgdb.ReadEventsFromConsumerParams{Stream: stream, Consumer: consumer, Horizon: hz, Lim: clampLimit(limit)})
	return pgEvents(rows), err
}

// pgEvents maps either read query's rows (the same columns) to events.
func pgEvents[R pgdb.ReadEventsRow | pgdb.ReadEventsFromConsumerRow](rows []R) []Event {
	evs := make([]Event, len(rows))
	for i, row := range rows {
		r := pgdb.ReadEventsRow(row)
		evs[i] = Event{Offset: r.ID, Stream: r.Stream, Key: r.Key, Payload: r.Payload, CreatedAt: r.CreatedAt,
			Headers: decodeHeaders(r.Headers)}
	}
	return evs
}

func (o pgOps) saveOffset(ctx context.Context, stream, consumer string, offset int64) error {
	return o.q.SaveOffset(ctx, pgdb.SaveOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset})
}

func (o pgOps) resetOffset(ctx context.Context, stream, consumer string, offset int64) error {
	return o.q.ResetOffset(ctx, pgdb.ResetOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset})
}

func (o pgOps) getOffset(ctx context.Context, stream, consumer string) (int64, error) {
	return o.q.GetOffset(ctx, pgdb.GetOffsetParams{Stream: stream, Consumer: consumer})
}

func (o pgOps) trim(ctx context.Context, stream string, horizon int64, now time.Time) (int64, error) {
	var n int64
	err := o.atomically(ctx, true, func(o pgOps) error {
		err := o.q.UnheadTrimmed(ctx, pgdb.UnheadTrimmedParams{Stream: stream, Horizon: horizon, Now: now})
		if err == nil {
			n, err = o.q.TrimStream(ctx, pgdb.TrimStreamParams{Stream: stream, Horizon: horizon})
		}
		return err
	})
	return n, err
}

// readSincePiped is an auto-commit ReadSince in one round trip an attempt:
// the horizon's snapshot (SettledSnapshot) and the page read with no
// horizon (ReadEvents up to the largest offset) go to the server together,
// as one pipeline, and the page is then cut at the horizon the snapshot
// proves. The read's snapshot is taken after SettledSnapshot's, so it sees
// every event at or below that horizon (all their transactions had ended),
// and cutting the first limit events above after at the horizon yields the
// same page as reading up to the horizon. While the horizon stands below
// the first snapshot's head it waits and tries again, as settled does.
func (o pgOps) readSincePiped(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	arg := pgdb.ReadEventsParams{Stream: stream, After: after, Horizon: math.MaxInt64, Lim: clampLimit(limit)}
	var target int64
	for attempt := 1; ; attempt++ {
		if err := settleWait(ctx, attempt); err != nil {
			return nil, err
		}
		snap, rows, err := o.snapshotAndRead(ctx, arg)
		if err != nil {
			return nil, err
		}
		hz := o.eng.horizon.observe(snap, true) // outside a transaction every snapshot may teach (mayLearn)
		if attempt == 1 {
			target = snap.VisibleHead
		}
		if hz >= target || attempt == settleAttempts {
			o.eng.stall.observe(ctx, hz, snap.VisibleHead)
			n := len(rows)
			for n > 0 && rows[n-1].ID > hz {
				n--
			}
			return pgEvents(rows[:n]), nil
		}
	}
}

// snapshotAndRead runs SettledSnapshot and ReadEvents (arg) in one round
// trip, in that order.
func (o pgOps) snapshotAndRead(ctx context.Context, arg pgdb.ReadEventsParams) (pgdb.SettledSnapshotRow, []pgdb.ReadEventsRow, error) {
	p := &pipedRead{pool: o.eng.pool}
	q := pgdb.New(p)
	if _, err := q.ReadEvents(ctx, arg); !errors.Is(err, errPipedRecorded) {
		return pgdb.SettledSnapshotRow{}, nil, fmt.Errorf("piped read: recording the page's statement: %w", err)
	}
	snap, err := q.SettledSnapshot(ctx) // sends both statements
	var rows []pgdb.ReadEventsRow
	if err == nil {
		rows, err = q.ReadEvents(ctx, arg) // the second statement's result
	}
	if cerr := p.close(); err == nil {
		err = cerr
	}
	return snap, rows, err
}

// errPipedRecorded ends the first, recording call of a piped statement.
var errPipedRecorded = errors.New("statement recorded")

// pipedRead runs two generated statements in one round trip: the first
// Query only records the second statement; QueryRow (the first) sends both
// as one batch and returns the first's row; the next Query returns the
// recorded statement's rows. The batch's statements run in one implicit
// transaction, each with a snapshot of its own (READ COMMITTED).
type pipedRead struct {
	pool *pgxpool.Pool
	sql  string
	args []any
	br   pgx.BatchResults
}

func (p *pipedRead) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("piped read: no Exec")
}

func (p *pipedRead) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	switch {
	case p.br == nil && p.sql == "":
		p.sql, p.args = sql, args
		return nil, errPipedRecorded
	case p.br == nil || sql != p.sql:
		return nil, errors.New("piped read: not the recorded statement")
	}
	return p.br.Query()
}

func (p *pipedRead) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(p.sql, p.args...)
	p.br = p.pool.SendBatch(ctx, b)
	return p.br.QueryRow()
}

// close ends the batch and gives its connection back.
func (p *pipedRead) close() error {
	if p.br == nil {
		return nil
	}
	return p.br.Close()
}
