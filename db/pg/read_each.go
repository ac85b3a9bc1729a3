package pgdb

// Written by hand, not by sqlc: ReadEvents's and ReadEventsFromConsumer's
// statements, read without a row struct a row and without decoding the
// snapshot column again; and that column's figures.
// TestReadEventsEachIsReadEvents holds the functions' arguments and
// columns to the generated functions'.

import (
	"context"
	"encoding/binary"
	"fmt"
)

// ReadEventsEach runs ReadEvents's statement and hands each row to each as
// it is read, in one ReadEventsRow reused for every row, where ReadEvents
// allocates a slice of rows (grown row by row). The statement's first row
// alone carries the Snapshot (the figures of the statement's one snapshot;
// its ID is 0): it is decoded from the first row only and keeps its value
// in the rows after it. Each row's Key, Payload and Headers are its own (the scan
// allocates them anew, or sets them nil for NULL): each may keep them, but
// not the row itself. each returning false ends the rows there: those
// after it are not scanned (the server still sends them; they are
// discarded unread).
func (q *Queries) ReadEventsEach(ctx context.Context, arg ReadEventsParams, each func(*ReadEventsRow) bool) error {
	return q.readEventsEach(ctx, readEvents, arg, each)
}

// ReadEventsOutsideTxEach is ReadEventsEach for ReadEventsOutsideTx, the
// read outside a transaction, whose arguments and columns are ReadEvents's
// (TestReadEventsOutsideTxIsReadEvents).
func (q *Queries) ReadEventsOutsideTxEach(ctx context.Context, arg ReadEventsParams, each func(*ReadEventsRow) bool) error {
	return q.readEventsEach(ctx, readEventsOutsideTx, arg, each)
}

// readEventsEach runs stmt, ReadEvents's statement or its twin.
func (q *Queries) readEventsEach(ctx context.Context, stmt string, arg ReadEventsParams, each func(*ReadEventsRow) bool) error {
	rows, err := q.db.Query(ctx, stmt,
		arg.Stream,
		arg.Floor,
		arg.Heads,
		arg.Nexts,
		arg.Learn,
		arg.After,
		arg.Lim,
	)
	if err != nil {
		return err
	}
	defer rows.Close()
	var i ReadEventsRow
	dest := []any{
		&i.Snapshot,
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
		if !each(&i) {
			rows.Close() // the rest unscanned; an error of the statement's still counts
			break
		}
		clear(dest[:1]) // pgx skips a nil destination
	}
	return rows.Err()
}

// ReadEventsFromConsumerEach is ReadEventsEach for ReadEventsFromConsumer.
func (q *Queries) ReadEventsFromConsumerEach(ctx context.Context, arg ReadEventsFromConsumerParams, each func(*ReadEventsFromConsumerRow) bool) error {
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
		&i.Snapshot,
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
		if !each(&i) {
			rows.Close()
			break
		}
		clear(dest[:1])
	}
	return rows.Err()
}

// PageSnapshot is what the snapshot column of ReadEvents and
// ReadEventsFromConsumer says: SettledSnapshot's figures of the
// statement's snapshot, the horizon it cut the page at, and (of
// ReadEventsFromConsumer only) the offset it read after.
type PageSnapshot struct {
	SettledSnapshotRow
	Horizon, After int64
}

// ParsePageSnapshot reads a snapshot column: xmin, xmax, age(xmax) and the
// visible head (8 bytes each, big-endian, as int8send sends them), whether
// the transaction holds an id (1 byte, as boolsend), the horizon (8), then
// the offset read after (8) when withAfter.
func ParsePageSnapshot(b []byte, withAfter bool) (PageSnapshot, error) {
	want := 41
	if withAfter {
		want = 49
	}
	if len(b) != want || b[32] > 1 {
		return PageSnapshot{}, fmt.Errorf("page snapshot %x: want %d bytes", b, want)
	}
	at := func(i int) int64 { return int64(binary.BigEndian.Uint64(b[i:])) }
	p := PageSnapshot{SettledSnapshotRow: SettledSnapshotRow{Xmin: at(0), Xmax: at(8), XmaxAge: at(16), VisibleHead: at(24),
		HasXid: b[32] == 1}, Horizon: at(33)}
	if withAfter {
		p.After = at(41)
	}
	return p, nil
}
