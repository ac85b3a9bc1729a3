package store

// Stream statements on PostgreSQL: publish, read, consumer offsets, trim.

import (
	"context"
	"time"

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

// readSince reads a page in one statement that also takes the horizon's
// snapshot and cuts the page at the horizon it proves (ReadEvents), so a
// read is one round trip and nothing above the horizon crosses the wire.
// Outside a transaction, while committed events wait above the horizon and
// the page is short, it reads on from where the page ended a moment later
// (twice at most, as settled does): the rows already returned are not
// sent again.
func (o pgOps) readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	lim := clampLimit(limit)
	var evs []Event
	for attempt := 1; ; attempt++ {
		// Inside a transaction a snapshot may be older than the newest one
		// seen (REPEATABLE READ, or held back by the transaction's own id),
		// so the statement gets every candidate; outside, the best settled
		// one is proven for it already.
		floor, nexts, heads := o.eng.horizon.proof(o.inTx)
		learn := o.mayLearnBefore()
		rows, err := o.q.ReadEvents(ctx, pgdb.ReadEventsParams{Stream: stream, After: after, Lim: lim - int32(len(evs)),
			Floor: floor, Nexts: nexts, Heads: heads, Learn: learn})
		if err != nil {
			return nil, err
		}
		r := rows[0] // the statement returns a row even for an empty page
		learn = learn && !r.HasXid
		o.eng.horizon.observe(pgdb.SettledSnapshotRow{Xmin: r.Xmin, Xmax: r.Xmax, XmaxAge: r.XmaxAge,
			VisibleHead: r.VisibleHead, HasXid: r.HasXid}, learn)
		if evs == nil {
			evs = make([]Event, 0, len(rows))
		}
		for _, row := range rows {
			if row.ID != 0 { // 0: the empty page's row
				evs = append(evs, Event{Offset: row.ID, Stream: row.Stream, Key: row.Key, Payload: row.Payload,
					CreatedAt: row.CreatedAt, Headers: decodeHeaders(row.Headers)})
			}
		}
		if o.inTx {
			if !learn && r.Horizon < r.VisibleHead {
				o.eng.learner.learn(o.eng)
			}
			return evs, nil
		}
		if r.Horizon >= r.VisibleHead || attempt == settleAttempts || len(evs) == int(lim) {
			o.eng.stall.observe(ctx, r.Horizon, r.VisibleHead)
			return evs, nil
		}
		// The page held every event of the stream in (after, horizon]: go
		// on above its last one.
		if n := len(evs); n > 0 {
			after = evs[n-1].Offset
		}
		t := time.NewTimer(time.Duration(attempt) * 300 * time.Microsecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (o pgOps) readFromConsumer(ctx context.Context, stream, consumer string, limit int) ([]Event, error) {
	hz, err := o.settled(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := o.q.ReadEventsFromConsumer(ctx, pgdb.ReadEventsFromConsumerParams{Stream: stream, Consumer: consumer, Horizon: hz, Lim: clampLimit(limit)})
	return pgEvents(rows), err
}

// pgEvents maps ReadEventsFromConsumer's rows to events.
func pgEvents(rows []pgdb.ReadEventsFromConsumerRow) []Event {
	evs := make([]Event, len(rows))
	for i, r := range rows {
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
