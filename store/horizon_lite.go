package store

// The read horizon on SQLite: it commits offsets in order, so every
// committed event is settled.

import (
	"context"
	"math"
	"time"
)

// SQLite commits offsets in order: every committed event is settled.
func (o liteOps) settledHorizon(context.Context) (int64, error) { return math.MaxInt64, nil }

func (o liteOps) firstEventAbove(context.Context, int64) (*time.Time, error) { return nil, nil }

// oldestWriteTransaction runs SQLite's twin of the statement, which names
// no transaction.
func (o liteOps) oldestWriteTransaction(ctx context.Context) (*WriteTransaction, error) {
	rows, err := o.q.OldestWriteTransaction(ctx)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &WriteTransaction{PID: int(rows[0].Pid), Database: rows[0].Datname, State: rows[0].State}, nil
}
