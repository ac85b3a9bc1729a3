package store

// Stream statements on SQLite: publish, read, consumer offsets, trim.

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
)

// publish takes the event's offset from the insert's last_insert_rowid
// (PublishEvent has no RETURNING; see queries/lite/streams.sql).
func (o liteOps) publish(ctx context.Context, r publishReq) (int64, error) {
	res, err := o.q.PublishEvent(ctx, litedb.PublishEventParams{Stream: r.stream, Key: r.key, Payload: r.payload, Headers: liteHeaders(r.headers)})
	if err != nil {
		return 0, err
	}
	id, stored, err := insertedRow(res)
	if err == nil && !stored {
		err = errSkipped("event")
	}
	return id, err
}

// insertedRow reads a one-row INSERT's result without RETURNING: the row's
// id (the statement's last_insert_rowid, which an application's trigger's
// own inserts leave as it was once the trigger ends), and whether it stored
// the row at all (a trigger's RAISE(IGNORE) skips it: changes() is 0).
func insertedRow(res sql.Result) (int64, bool, error) {
	n, err := res.RowsAffected()
	if err != nil || n != 1 {
		return 0, false, err
	}
	id, err := res.LastInsertId()
	return id, err == nil, err
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
		res, err := q.PublishEvents(ctx, p)
		if err != nil {
			return 0, err
		}
		id, stored, err := insertedRow(res)
		if err == nil && !stored {
			err = errSkippedRows("row "+strconv.Itoa(i), len(r.msgs))
		}
		if err == nil && m.Key != nil {
			err = liteOps{q: q}.upsertHead(ctx, r.stream, *m.Key, id, r.now)
		}
		return id, err
	})
}

// readSince reads a page: outside a transaction on a reader connection
// without database/sql's rows (readPage), inside one on its connection.
func (o liteOps) readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	p := litedb.ReadEventsParams{Stream: stream, After: after, Lim: int64(limit)}
	if o.readers != nil {
		return readPage(stream, pageCutOf(ctx), func(each func(*litedb.EventRow) bool) error { return o.q.ReadEventsEach(ctx, o.readers, p, each) })
	}
	rows, err := o.q.ReadEvents(ctx, p)
	return liteEvents(stream, rows), err
}

func (o liteOps) readFromConsumer(ctx context.Context, stream, consumer string, limit int) ([]Event, error) {
	p := litedb.ReadEventsFromConsumerParams{Stream: stream, Consumer: consumer, Lim: int64(limit)}
	if o.readers != nil {
		return readPage(stream, nil, func(each func(*litedb.EventRow) bool) error {
			return o.q.ReadEventsFromConsumerEach(ctx, o.readers, p, each)
		})
	}
	rows, err := o.q.ReadEventsFromConsumer(ctx, p)
	return liteEvents(stream, rows), err
}

// liteEvents are the events of stream in rows, the generated functions'
// (ReadEvents's or ReadEventsFromConsumer's, which have the same columns).
func liteEvents[R litedb.ReadEventsRow | litedb.ReadEventsFromConsumerRow](stream string, rows []R) []Event {
	evs := make([]Event, len(rows))
	for i, row := range rows {
		r := litedb.ReadEventsRow(row)
		evs[i] = Event{Offset: r.ID, Stream: stream, Key: r.Key, Payload: r.Payload, CreatedAt: time.UnixMicro(r.CreatedAt),
			Headers: decodeHeadersPtr(r.Headers)}
	}
	return evs
}

// readPage collects the rows read builds into events of stream, straight
// from each row into a pooled scratch slice (eventScratch), and returns an
// exact copy: one allocation for the page's events, however many rows,
// where a slice of rows grown row by row and a second slice of events
// cost several. Each event's payload, key and headers are made from
// SQLite's bytes before the next row. A page cut (a pager's, see pageCut)
// ends the statement at the first row that does not fit: that row is
// neither copied nor kept, and the rows after it are not read.
func readPage(stream string, cut *pageCut, read func(each func(*litedb.EventRow) bool) error) ([]Event, error) {
	scratch := eventScratch.Get().(*[]Event)
	evs := (*scratch)[:0]
	defer func() {
		clear(evs) // the events are the caller's copy's alone
		*scratch = evs[:0]
		putEventScratch(scratch)
	}()
	err := read(func(r *litedb.EventRow) bool {
		if !cut.fits(len(r.Payload) + len(r.Key) + len(r.Headers)) {
			return false
		}
		ev := Event{Offset: r.ID, Stream: stream, Payload: ownBytes(r.Payload), CreatedAt: time.UnixMicro(r.CreatedAt)}
		if r.Key != nil {
			k := string(r.Key)
			ev.Key = &k
		}
		if r.Headers != nil {
			ev.Headers = decodeHeaders(r.Headers)
		}
		evs = append(evs, ev)
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return []Event{}, nil // as before: an empty page, not nil
	}
	return slices.Clone(evs), nil
}

// ownBytes is a copy of b of exactly its length: nil for nil, non-nil
// empty for empty (a payload's NULL and empty BLOB stay apart).
func ownBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func (o liteOps) saveOffset(ctx context.Context, stream, consumer string, offset, acceptUpto int64) (bool, error) {
	n, err := o.q.SaveOffset(ctx, litedb.SaveOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset, AcceptUpto: acceptUpto})
	return n > 0, err
}

func (o liteOps) resetOffset(ctx context.Context, stream, consumer string, offset, acceptUpto int64) (bool, error) {
	n, err := o.q.ResetOffset(ctx, litedb.ResetOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset, AcceptUpto: acceptUpto})
	return n > 0, err
}

func (o liteOps) offsetBounds(ctx context.Context, stream, consumer string) (offsetBounds, error) {
	r, err := o.q.OffsetBounds(ctx, litedb.OffsetBoundsParams{Stream: stream, Consumer: consumer})
	return offsetBounds{committed: r.CommittedOffset, newest: r.NewestOffset}, err
}

func (o liteOps) firstEventFrom(ctx context.Context, offset int64) (int64, error) {
	return o.q.FirstEventFrom(ctx, offset)
}

func (o liteOps) streamExists(ctx context.Context, stream string) (bool, error) {
	n, err := o.q.StreamExists(ctx, stream)
	return n != 0, err
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
