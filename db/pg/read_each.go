package pgdb

// Written by hand, not by sqlc: ReadEvents's and ReadEventsFromConsumer's
// statements, read without a row struct a row and without decoding the
// snapshot column again; and that column's figures.
// TestReadEventsEachIsReadEvents holds the functions' arguments and
// columns to the generated functions'.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ReadEventsEach runs ReadEvents's statement and hands each row to each as
// it is read, in one ReadEventsRow reused for every row, where ReadEvents
// allocates a slice of rows (grown row by row). Every row of the statement
// carries the same Snapshot (the figures of the statement's one snapshot),
// so it is decoded from the first row only and keeps its value in the rows
// after it. Each row's Key, Payload and Headers are its own (the scan
// allocates them anew, or sets them nil for NULL): each may keep them, but
// not the row itself.
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
		each(&i)
		clear(dest[:1]) // pgx skips a nil destination
	}
	return rows.Err()
}

// ReadEventsFromConsumerEach is ReadEventsEach for ReadEventsFromConsumer.
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
		each(&i)
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

// ParsePageSnapshot reads a snapshot column: xmin, xmax, age(xmax), the
// visible head, 1 or 0 (whether the transaction holds an id) and the
// horizon, then the offset read after when withAfter, separated by single
// spaces.
func ParsePageSnapshot(s string, withAfter bool) (PageSnapshot, error) {
	want := 6
	if withAfter {
		want = 7
	}
	if strings.Count(s, " ") != want-1 {
		return PageSnapshot{}, fmt.Errorf("page snapshot %q: want %d figures", s, want)
	}
	var v [7]int64
	rest := s
	for n := range want {
		f, r, _ := strings.Cut(rest, " ")
		x, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return PageSnapshot{}, fmt.Errorf("page snapshot %q: %w", s, err)
		}
		v[n], rest = x, r
	}
	if v[4] != 0 && v[4] != 1 {
		return PageSnapshot{}, fmt.Errorf("page snapshot %q: has_xid %d", s, v[4])
	}
	p := PageSnapshot{SettledSnapshotRow: SettledSnapshotRow{Xmin: v[0], Xmax: v[1], XmaxAge: v[2], VisibleHead: v[3], HasXid: v[4] == 1},
		Horizon: v[5]}
	if withAfter {
		p.After = v[6]
	}
	return p, nil
}
