package litedb

// Written by hand, not by sqlc: ReadEvents's and ReadEventsFromConsumer's
// statements run on a reader connection through litedriver.Query, each
// row read column by column into one EventRow reused for every row, where
// the generated functions go through database/sql (a *sql.Rows, each
// column converted to a driver.Value and scanned again, a goroutine
// watching a context that can end) and grow a slice of rows row by row.
// TestReadEachIsGenerated holds their statements, arguments and columns to
// the generated functions'.

import (
	"context"
	"database/sql"
	"errors"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// EventRow is a row of ReadEvents or ReadEventsFromConsumer as
// ReadEventsEach and ReadEventsFromConsumerEach read it: Key, Payload and
// Headers are SQLite's bytes, nil for NULL (an empty value is empty, not
// nil), valid only until the next row. The payload is not copied here:
// a reader that drops the row (a page cut) never copies it.
type EventRow struct {
	ID        int64
	Key       []byte
	Payload   []byte
	CreatedAt int64
	Headers   []byte
}

// readEvent reads r, a row of ReadEvents or ReadEventsFromConsumer, into
// i, its columns in the statement's order.
func readEvent(r *litedriver.Row, i *EventRow) {
	i.ID = r.Int64(0)
	i.Key = r.Text(1)
	i.Payload = r.Text(2)
	i.CreatedAt = r.Int64(3)
	i.Headers = r.Text(4)
}

// ReadEventsEach runs ReadEvents's statement on a connection of db (the
// readers) and hands each row to each as it is read, in one EventRow
// reused for every row: each must copy what it keeps. each returning
// false ends the statement there: the rows after it are not read.
func (q *Queries) ReadEventsEach(ctx context.Context, db *sql.DB, arg ReadEventsParams, each func(*EventRow) bool) error {
	var i EventRow
	return stopped(litedriver.Query(ctx, db, readEvents, func(r *litedriver.Row) error {
		readEvent(r, &i)
		if !each(&i) {
			return errStop
		}
		return nil
	}, arg.Stream, arg.After, arg.Lim))
}

// ReadEventsFromConsumerEach runs ReadEventsFromConsumer's statement on a
// connection of db as ReadEventsEach runs ReadEvents's.
func (q *Queries) ReadEventsFromConsumerEach(ctx context.Context, db *sql.DB, arg ReadEventsFromConsumerParams, each func(*EventRow) bool) error {
	var i EventRow
	return stopped(litedriver.Query(ctx, db, readEventsFromConsumer, func(r *litedriver.Row) error {
		readEvent(r, &i)
		if !each(&i) {
			return errStop
		}
		return nil
	}, arg.Stream, arg.Consumer, arg.Lim))
}

// errStop ends a statement whose each returned false; stopped reads it as
// no error.
var errStop = errors.New("litedb: each stopped the rows")

func stopped(err error) error {
	if errors.Is(err, errStop) { // as litedriver returns it: joined with the connection's release
		return nil
	}
	return err
}
