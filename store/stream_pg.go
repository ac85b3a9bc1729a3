package store

// Stream statements on PostgreSQL: publish, read, consumer offsets, trim.

import (
	"context"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

func (o pgOps) publish(ctx context.Context, r publishReq) (int64, error) {
	topic := streamTopic(r.stream)
	w := o.wake(topic)
	id, err := o.q.PublishEvent(ctx, pgdb.PublishEventParams{Stream: r.stream, Key: r.key, Payload: r.payload, Headers: r.headers,
		Wake: w})
	o.sent(topic, w)
	return id, skipped("event", err)
}

func (o pgOps) publishMany(ctx context.Context, r publishManyReq) ([]int64, error) {
	topic := streamTopic(r.stream)
	p := pgdb.PublishEventsParams{
		Stream:   r.stream,
		Wake:     o.wake(topic),
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
	o.sent(topic, p.Wake)
	return allInserted(len(r.msgs), ids, err)
}

func (o pgOps) readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
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
