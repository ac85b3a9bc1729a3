package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// Compaction statements on PostgreSQL.

func (o pgOps) publishKeyed(ctx context.Context, e keyedEvent) (int64, error) {
	topic := e.topic
	w, seq := o.carry(topic)
	p := pgdb.PublishKeyedEventNotifyParams{Stream: e.stream, Key: e.key, Payload: e.payload, Wake: w,
		Headers: pgJSONOrNull(e.headers), SchemaVersion: e.schemaVersion, CompactionRank: e.rank, Now: e.now}
	var id int64
	var txid pgtype.Uint64
	var err error
	switch {
	case o.offering():
		var row pgdb.PublishKeyedEventWithTxidRow
		row, err = o.q.PublishKeyedEventWithTxid(ctx, pgdb.PublishKeyedEventWithTxidParams(p))
		id, txid = row.ID, row.Txid
	case w == "": // no NOTIFY in the statement (see PublishKeyedEvent)
		id, err = o.q.PublishKeyedEvent(ctx, pgdb.PublishKeyedEventParams{Stream: p.Stream, Key: p.Key, Payload: p.Payload,
			Headers: p.Headers, SchemaVersion: p.SchemaVersion, CompactionRank: p.CompactionRank, Now: p.Now})
	default:
		id, err = o.q.PublishKeyedEventNotify(ctx, p)
	}
	o.carried(topic, w, seq, err)
	if err == nil {
		o.drew(id, txid)
	}
	return id, skipped("event", err)
}

func (o pgOps) getHead(ctx context.Context, stream, key string) (*Head, error) {
	r, err := o.q.GetCompactionHead(ctx, pgdb.GetCompactionHeadParams{Stream: stream, Key: key})
	if err != nil {
		return nil, err
	}
	return &Head{Key: key, Offset: r.HeadOffset, Payload: r.Payload, SchemaVersion: int(r.SchemaVersion),
		Rank: r.CompactionRank, UpdatedAt: r.UpdatedAt}, nil
}

func (o pgOps) lockHead(ctx context.Context, stream, key string) (*headRow, error) {
	rows, err := o.q.LockCompactionHead(ctx, pgdb.LockCompactionHeadParams{Stream: stream, Key: key})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	r := rows[0]
	return &headRow{offset: r.HeadOffset, schemaVersion: int(deref(r.SchemaVersion)), rank: deref(r.CompactionRank),
		updatedAt: r.UpdatedAt}, nil
}

func (o pgOps) eventPayload(ctx context.Context, id int64) ([]byte, bool, error) {
	payloads, err := o.q.GetEventPayload(ctx, id)
	if err != nil || len(payloads) == 0 {
		return nil, false, err
	}
	return payloads[0], true, nil
}

func (o pgOps) insertHeadless(ctx context.Context, stream, key string, now time.Time) error {
	return o.q.InsertHeadlessHead(ctx, pgdb.InsertHeadlessHeadParams{Stream: stream, Key: key, Now: now})
}

func (o pgOps) touchHeadless(ctx context.Context, stream, key string, now time.Time) error {
	return o.q.TouchHeadlessHead(ctx, pgdb.TouchHeadlessHeadParams{Stream: stream, Key: key, Now: now})
}

func (o pgOps) listHeads(ctx context.Context, stream, after string, limit int) ([]Head, error) {
	rows, err := o.q.ListHeads(ctx, pgdb.ListHeadsParams{Stream: stream, After: after, Lim: clampLimit(limit)})
	heads := make([]Head, len(rows))
	for i, r := range rows {
		heads[i] = Head{Key: r.Key, Offset: r.HeadOffset, Payload: r.Payload, SchemaVersion: int(r.SchemaVersion),
			Rank: r.CompactionRank, UpdatedAt: r.UpdatedAt}
	}
	return heads, err
}

func (o pgOps) configureStream(ctx context.Context, name string, c StreamConfig) error {
	p := pgdb.ConfigureStreamParams{Name: name, Compacted: c.Compacted, HeadlessTtlUs: c.HeadlessTTL.Microseconds(),
		MinCompactionLagUs: c.MinCompactionLag.Microseconds(), TombstoneRetentionUs: c.TombstoneRetention.Microseconds()}
	if c.Retention > 0 {
		us := c.Retention.Microseconds()
		p.RetentionUs = &us
	}
	return o.q.ConfigureStream(ctx, p)
}
