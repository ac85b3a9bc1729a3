package store

// Stream statements on PostgreSQL: publish, read, consumer offsets, trim.

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

func (o pgOps) publish(ctx context.Context, r publishReq) (int64, error) {
	topic := r.topic
	w, seq := o.carry(topic)
	p := pgdb.PublishEventNotifyParams{Stream: r.stream, Key: r.key, Payload: r.payload, Headers: pgJSONOrNull(r.headers), Wake: w}
	var id int64
	var txid pgtype.Uint64
	var err error
	switch {
	case o.offering():
		var row pgdb.PublishEventWithTxidRow
		row, err = o.q.PublishEventWithTxid(ctx, pgdb.PublishEventWithTxidParams(p))
		id, txid = row.ID, row.Txid
	case w == "": // no NOTIFY in the statement (see PublishEvent)
		id, err = o.q.PublishEvent(ctx, pgdb.PublishEventParams{Stream: p.Stream, Key: p.Key, Payload: p.Payload, Headers: p.Headers})
	default:
		id, err = o.q.PublishEventNotify(ctx, p)
	}
	o.carried(topic, w, seq, err)
	if err == nil {
		o.drew(id, txid)
	}
	return id, skipped("event", err)
}

// drew runs after a publish drew offsets up to off in transaction txid
// (not valid when the statement did not return it: see offering).
func (o pgOps) drew(off int64, txid pgtype.Uint64) {
	o.eng.horizon.saw(off)
	if txid.Valid {
		o.offer(txid)
	}
}

func (o pgOps) publishMany(ctx context.Context, r publishManyReq) ([]int64, error) {
	topic := streamTopic(r.stream)
	w, seq := o.carryBatch(topic)
	p := pgdb.PublishEventsParams{
		Stream:   r.stream,
		Wake:     w,
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
	// The keys' heads too, in one statement.
	var ids []int64
	var txid pgtype.Uint64
	var err error
	if o.offering() {
		var rows []pgdb.PublishEventsWithTxidRow
		rows, err = o.q.PublishEventsWithTxid(ctx, pgdb.PublishEventsWithTxidParams(p))
		if err == nil {
			ids = make([]int64, len(rows))
			for i, row := range rows {
				ids[i] = row.ID
			}
			if len(rows) > 0 {
				txid = rows[0].Txid
			}
		}
	} else {
		ids, err = o.q.PublishEvents(ctx, p)
	}
	ids, err = allInserted(len(r.msgs), ids, err)
	o.carried(topic, p.Wake, seq, err)
	if err == nil && len(ids) > 0 {
		o.drew(ids[len(ids)-1], txid)
	}
	return ids, err
}

// readSince reads a page in one statement that also takes the horizon's
// snapshot and cuts the page at the horizon it proves (ReadEvents), so a
// read is one round trip and nothing above the horizon crosses the wire.
func (o pgOps) readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error) {
	return o.readSettled(ctx, stream, "", after, limit)
}

// readFromConsumer is readSince after the consumer's saved offset
// (ReadEventsFromConsumer, which reads the offset in the same statement).
func (o pgOps) readFromConsumer(ctx context.Context, stream, consumer string, limit int) ([]Event, error) {
	return o.readSettled(ctx, stream, consumer, 0, limit)
}

// readSettled reads a page after offset after, or after consumer's saved
// offset when consumer is not empty. Outside a transaction, while
// committed events wait above the horizon and the page is short, it reads
// on from where the page ended a moment later (twice at most, as settled
// does): the rows already returned are not sent again.
func (o pgOps) readSettled(ctx context.Context, stream, consumer string, after int64, limit int) ([]Event, error) {
	lim := clampLimit(limit)
	cut := pageCutOf(ctx) // a group member's: see pageCut
	scratch := eventScratch.Get().(*[]Event)
	evs := (*scratch)[:0]
	defer func() {
		clear(evs) // the events are the caller's copy's alone
		*scratch = evs[:0]
		putEventScratch(scratch)
	}()
	for attempt := 1; ; attempt++ {
		// Inside a transaction a snapshot may be older than the newest one
		// seen (REPEATABLE READ, or held back by the transaction's own id),
		// so the statement gets every candidate; outside, the best settled
		// one is proven for it already.
		floor, nexts, heads := o.eng.horizon.proof(o.inTx)
		learn := o.mayLearnBefore()
		var pg pgPage
		var err error
		from := len(evs)
		if consumer != "" && attempt == 1 {
			err = o.q.ReadEventsFromConsumerEach(ctx, pgdb.ReadEventsFromConsumerParams{Stream: stream, Consumer: consumer,
				Lim: lim, Floor: floor, Nexts: nexts, Heads: heads, Learn: learn}, func(r *pgdb.ReadEventsFromConsumerRow) bool {
				if !pg.read {
					pg.read, pg.raw = true, r.Snapshot
				}
				if r.ID != 0 { // 0: the snapshot's row
					evs = append(evs, Event{Offset: r.ID, Stream: stream, Key: r.Key, Payload: r.Payload, CreatedAt: r.CreatedAt,
						Headers: decodeHeaders(r.Headers)})
				}
				return true
			})
		} else {
			p := pgdb.ReadEventsParams{Stream: stream, After: after, Lim: lim - int32(from),
				Floor: floor, Nexts: nexts, Heads: heads, Learn: learn}
			// A row past a page cut ends the rows: those after it are
			// discarded unscanned (see pageCut).
			each := func(r *pgdb.ReadEventsRow) bool {
				if !pg.read {
					pg.read, pg.raw = true, r.Snapshot
				}
				if r.ID == 0 { // the snapshot's row
					return true
				}
				if !cut.fits(len(r.Payload) + keyLen(r.Key) + len(r.Headers)) {
					return false
				}
				evs = append(evs, Event{Offset: r.ID, Stream: stream, Key: r.Key, Payload: r.Payload, CreatedAt: r.CreatedAt,
					Headers: decodeHeaders(r.Headers)})
				return true
			}
			if o.inTx {
				err = o.q.ReadEventsEach(ctx, p, each)
			} else { // it takes no transaction id: no own events to look for
				err = o.q.ReadEventsOutsideTxEach(ctx, p, each)
			}
		}
		if err != nil {
			return nil, err
		}
		if err := pg.parse(consumer != "" && attempt == 1, after); err != nil {
			return nil, err
		}
		learn = learn && !pg.snap.HasXid
		known := o.eng.horizon.observe(pg.snap, learn)
		o.eng.persist.maybe(o.eng)
		if known <= pg.horizon && pg.horizon < pg.snap.VisibleHead && attempt < settleAttempts && !cut.ended() {
			// Held back with nothing better known: another store may have
			// proved more (step 6; a store that has never read has
			// nothing). Inside a transaction a failed statement would end
			// it: a pool snapshot in the background reads the row instead,
			// for later reads.
			if o.inTx {
				o.eng.learner.learn(o.eng)
			} else {
				known = max(known, o.provenFor(ctx))
			}
		}
		if o.inTx {
			if known > pg.horizon && len(evs) < int(lim) && attempt == 1 && !cut.ended() {
				// The store learned a candidate this snapshot proves after
				// the proof was sent (another read's, while this statement
				// waited: for a lock, or for the CPU): read on above the
				// page's part at or below its horizon, with the new proof.
				// The rest of the page (above the horizon: the events up to
				// the transaction's last own one, its cut) comes again in
				// order, cut at the greater of the new horizon and that.
				after = pg.after
				kept := from
				for _, ev := range evs[from:] {
					if ev.Offset > pg.horizon {
						break
					}
					kept, after = kept+1, ev.Offset
				}
				clear(evs[kept:])
				evs = evs[:kept]
				continue
			}
			if !learn && max(known, pg.horizon) < pg.snap.VisibleHead {
				o.eng.learner.learn(o.eng)
			}
			return pageOut(evs), nil
		}
		if pg.horizon >= pg.snap.VisibleHead || attempt == settleAttempts || len(evs) == int(lim) || cut.ended() {
			o.eng.stall.observe(ctx, pg.horizon, pg.snap.VisibleHead)
			return pageOut(evs), nil
		}
		// The page held every event of the stream in (after, horizon]: go
		// on above its last one.
		after = pg.after
		if n := len(evs); n > 0 {
			after = evs[n-1].Offset
		}
		if known > pg.horizon {
			// The tracker proves more than the statement did (the stored
			// candidate it returned, step 6, or another read's): read on
			// with it at once.
			continue
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

// pgPage is what a page statement's first row says in its snapshot
// column (the other rows send NULL): its snapshot's figures, the horizon it
// cut the page at, and the offset it read after. The statement always
// returns that row first (its id is 0; the events follow it), and
// no row names the stream: the events share the caller's string.
type pgPage struct {
	read           bool   // a row came
	raw            []byte // the snapshot column, until parse
	snap           pgdb.SettledSnapshotRow
	horizon, after int64
}

// parse reads the snapshot column of the page's first row (ReadEvents',
// or ReadEventsFromConsumer's, which also says the offset it read after:
// withAfter); after is the offset ReadEvents read after. No row (never
// from the statement) reads as a snapshot of zeros.
func (pg *pgPage) parse(withAfter bool, after int64) error {
	if !pg.read {
		return nil
	}
	p, err := pgdb.ParsePageSnapshot(pg.raw, withAfter)
	if err != nil {
		return err
	}
	pg.snap, pg.horizon, pg.after = p.SettledSnapshotRow, p.Horizon, after
	if withAfter {
		pg.after = p.After
	}
	return nil
}

// eventScratch holds the slices a read collects its pages in; the read
// returns a copy of exactly its length, so a page of 1,000 events
// allocates its events once instead of in a slice grown row by row.
var eventScratch = sync.Pool{New: func() any { return new([]Event) }}

// maxScratch bounds the scratch slices kept for reuse (events).
const maxScratch = 4096

func putEventScratch(s *[]Event) {
	if cap(*s) > maxScratch {
		return
	}
	eventScratch.Put(s)
}

// pageOut returns a copy of evs, nil when empty (evs goes back to
// eventScratch).
func pageOut(evs []Event) []Event {
	if len(evs) == 0 {
		return nil
	}
	return slices.Clone(evs)
}

func (o pgOps) saveOffset(ctx context.Context, stream, consumer string, offset, acceptUpto int64) (bool, error) {
	n, err := o.q.SaveOffset(ctx, pgdb.SaveOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset, AcceptUpto: acceptUpto})
	return n > 0, err
}

func (o pgOps) resetOffset(ctx context.Context, stream, consumer string, offset, acceptUpto int64) (bool, error) {
	topic := offsetTopic(stream)
	w, granted := o.wakeRefundable(topic)
	n, err := o.q.ResetOffset(ctx, pgdb.ResetOffsetParams{Stream: stream, Consumer: consumer, CommittedOffset: offset, AcceptUpto: acceptUpto, Wake: w})
	if n > 0 {
		o.sent(topic, w)
	} else { // a refused reset changed nothing, and its statement sent no wake
		o.eng.gate.refund(topic, granted)
	}
	return n > 0, err
}

func (o pgOps) offsetBounds(ctx context.Context, stream, consumer string) (offsetBounds, error) {
	r, err := o.q.OffsetBounds(ctx, pgdb.OffsetBoundsParams{Stream: stream, Consumer: consumer})
	return offsetBounds{committed: r.CommittedOffset, newest: r.NewestOffset}, err
}

func (o pgOps) firstEventFrom(ctx context.Context, offset int64) (int64, error) {
	return o.q.FirstEventFrom(ctx, offset)
}

func (o pgOps) streamExists(ctx context.Context, stream string) (bool, error) {
	return o.q.StreamExists(ctx, stream)
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
