package store

// Stream statements on SQLite: publish, read, consumer offsets, trim.

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
)

func (o liteOps) publish(ctx context.Context, r publishReq) (int64, error) {
	id, err := o.q.PublishEvent(ctx, litedb.PublishEventParams{Stream: r.stream, Key: r.key, Payload: r.payload, Headers: liteHeaders(r.headers)})
	return id, skipped("event", err)
}

func (o liteOps) publishMany(ctx context.Context, r publishManyReq) ([]int64, error) {
	// A keyed message is two statements (the event, then its head).
	need := len(r.msgs) > 1 || len(r.msgs) == 1 && r.msgs[0].Key != nil
	return o.insertEach(ctx, len(r.msgs), need, func(q *litedb.Queries, i int) (int64, error) {
		m := r.msgs[i]
		p := litedb.PublishEventsParams{Stream: r.stream, Key: m.Key, Payload: m.Payload}
		if r.headers != nil {
			p.Headers = liteHeaders(r.headers[i])
		}
		id, err := q.PublishEvents(ctx, p)
		if errors.Is(err, sql.ErrNoRows) { // RETURNING gave no row
			err = errSkippedRows("row "+strconv.Itoa(i), len(r.msgs))
		}
		if err == nil && m.Key != nil {
			err = liteOps{q: q}.upsertHead(ctx, r.stream, *m.Key, id, r.now)
		}
		return id, err
	})
}

func (o liteOps) readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	rows, err := o.q.ReadEvents(ctx, litedb.ReadEventsParams{Stream: stream, After: after, Lim: int64(limit)})
	return liteEvents(rows), err
}

func (o liteOps) readFromConsumer(ctx context.Context, stream, consumer string, limit int) ([]Event, error) {
	rows, err := o.q.ReadEventsFromConsumer(ctx, litedb.ReadEventsFromConsumerParams{Stream: stream, Consumer: consumer, Lim: int64(limit)})
	return liteEvents(rows), err
}

func liteEvents(rows []litedb.AlkEvent) []Event {
	evs := make([]Event, len(rows))
	for i, r := range rows {
		evs[i] = Event{Offset: r.ID, Stream: r.Stream, Key: r.Key, Payload: r.Payload, CreatedAt: time.UnixMicro(r.CreatedAt),
			Headers: decodeHeadersPtr(r.Headers)}
	}
	return evs
}

func (o liteOps) saveOffset(ctx context.Context, stream, consumer string, offset int64) error {
	return o.q.SaveOffset(ctx, litedb.SaveOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset})
}

func (o liteOps) resetOffset(ctx context.Context, stream, consumer string, offset int64) error {
	return o.q.ResetOffset(ctx, litedb.ResetOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset})
}

func (o liteOps) getOffset(ctx context.Context, stream, consumer string) (int64, error) {
	return o.q.GetOffset(ctx, litedb.GetOffsetParams{Stream: stream, Consumer: consumer})
}

func (o liteOps) trim(ctx context.Context, stream string, horizon int64, now time.Time) (int64, error) {
	var n int64
	err := o.atomically(ctx, func(q *litedb.Queries) error {
		err := q.UnheadTrimmed(ctx, litedb.UnheadTrimmedParams{Stream: stream, Horizon: horizon, Now: now.UnixMicro()})
		if err == nil {
			n, err = q.TrimStream(ctx, litedb.TrimStreamParams{Stream: stream, Horizon: horizon})
		}
		return err
	})
	return n, err
}
