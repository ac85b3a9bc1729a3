package litedb

// Written by hand, not by sqlc: PublishKeyedEvent's and
// UpsertCompactionHead's statements run on a litedriver.Writer (inside
// litedriver.WriteTx's transaction, without database/sql's).
// TestKeyedWriterIsGenerated holds their statements and arguments to the
// generated PublishKeyedEvent's and UpsertCompactionHead's.

import "github.com/alkstore/alkstore/internal/litedriver"

// PublishKeyedEventOn runs PublishKeyedEvent's statement on w (q's own
// connections and prepared statements play no part): the event's offset is
// the last inserted rowid once changes is 1 (see the query).
func (q *Queries) PublishKeyedEventOn(w *litedriver.Writer, arg PublishKeyedEventParams) (lastInsertID, changes int64, err error) {
	return w.Exec(publishKeyedEvent,
		arg.Stream,
		arg.Key,
		arg.Payload,
		arg.Headers,
	)
}

// UpsertCompactionHeadOn runs UpsertCompactionHead's statement on w.
func (q *Queries) UpsertCompactionHeadOn(w *litedriver.Writer, arg UpsertCompactionHeadParams) error {
	_, _, err := w.Exec(upsertCompactionHead,
		arg.Stream,
		arg.Key,
		arg.HeadOffset,
		arg.SchemaVersion,
		arg.CompactionRank,
		arg.Now,
	)
	return err
}
