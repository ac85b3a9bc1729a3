package pgdb

// Written by hand, not by sqlc: ReadEvents's and ReadEventsFromConsumer's
// statements, read without a row struct a row and without decoding the
// snapshot columns again. TestReadEventsEachIsReadEvents holds their
// arguments and columns to the generated functions'.

import "context"

// ReadEventsEach runs ReadEvents's statement and hands each row to each as
// it is read, in one ReadEventsRow reused for every row, where ReadEvents
// allocates a slice of rows (grown row by row). Every row of the statement
// carries the same snapshot columns (Xmin, Xmax, XmaxAge, VisibleHead,
// HasXid, Horizon: the statement's one snapshot), so they are decoded from
// the first row only and keep its values in the rows after it. Each row's
// Key, Payload and Headers are its own (the scan allocates them anew, or
// sets them nil for NULL): each may keep them, but not the row itself.
func (q *Queries) ReadEventsEach(ctx context.Context, arg ReadEventsParams, each func(*ReadEventsRow)) error {
	rows, err := q.db.Query(ctx, readEvents,
		arg.Stream,
		arg.After,
		arg.Floor,
		arg.Heads,
		arg.Nexts,
		arg.Learn,
		arg.Lim,
	)
	if err != nil {
		return err
	}
	defer rows.Close()
	var i ReadEventsRow
	dest := []any{
		&i.Xmin,
		&i.Xmax,
		&i.XmaxAge,
		&i.VisibleHead,
		&i.HasXid,
		&i.Horizon,
		&i.ID,
		&i.Key,
		&i.Payload,
		&i.CreatedAt,
		&i.Headers,
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		each(&i)
		clear(dest[:6]) // pgx skips a nil destination
	}
	return rows.Err()
}

// ReadEventsFromConsumerEach is ReadEventsEach for ReadEventsFromConsumer,
// whose rows also carry the offset it read after (After, the same in every
// row, decoded from the first only too).
func (q *Queries) ReadEventsFromConsumerEach(ctx context.Context, arg ReadEventsFromConsumerParams, each func(*ReadEventsFromConsumerRow)) error {
	rows, err := q.db.Query(ctx, readEventsFromConsumer,
		arg.Stream,
		arg.Consumer,
		arg.Floor,
		arg.Heads,
		arg.Nexts,
		arg.Learn,
		arg.Lim,
	)
	if err != nil {
		return err
	}
	defer rows.Close()
	var i ReadEventsFromConsumerRow
	dest := []any{
		&i.Xmin,
		&i.Xmax,
		&i.XmaxAge,
		&i.VisibleHead,
		&i.HasXid,
		&i.Horizon,
		&i.After,
		&i.ID,
		&i.Key,
		&i.Payload,
		&i.CreatedAt,
		&i.Headers,
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		each(&i)
		clear(dest[:7])
	}
	return rows.Err()
}
