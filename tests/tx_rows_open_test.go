package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Business rows left open in a Tx (attack56a F3): a statement run through
// the Tx while a Query's rows are open (a write in a rows loop, a Tx form,
// another query), and the Tx's end with rows still open (a forgotten
// Close, a QueryRow never scanned), work on SQLite, where database/sql
// closes open rows at the end. Before the fix, on PostgreSQL, the
// statement failed "conn busy: rows of an earlier query of the transaction
// are still open" and the commit failed "conn busy", losing the
// transaction; a WorkTx handler doing it was retried until dead. Now
// PostgreSQL reads the rest of the open rows into memory when a statement
// needs the connection, and closes them at the end, as SQLite does.

// openRowsTables creates src (ids 1, 2, 3) and dst.
func openRowsTables(t *testing.T, s *store.Store) {
	t.Helper()
	require.NoError(t, s.InTx(ctx(t), func(ctx context.Context, tx store.Tx) error {
		for _, q := range []string{
			`CREATE TABLE open_src (id integer, name text)`,
			`CREATE TABLE open_dst (id integer, name text)`,
			`INSERT INTO open_src VALUES (1, 'one'), (2, 'two'), (3, 'three')`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}))
}

// openDst is what open_dst holds, "id name" a row in id order.
func openDst(t *testing.T, s *store.Store) []string {
	t.Helper()
	var got []string
	require.NoError(t, s.InTx(ctx(t), func(ctx context.Context, tx store.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, name FROM open_dst ORDER BY id, name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				return err
			}
			got = append(got, fmt.Sprint(id, " ", name))
		}
		return rows.Err()
	}))
	return got
}

// TestATxWritesInsideItsOwnRowsLoop: copying rows one by one (an INSERT
// per row of an open Query), with the row scanned before or after the
// write, and a second Query (and a QueryRow) run inside the loop, commits
// every row on both engines. Before the fix, on PostgreSQL, the first
// Exec inside the loop failed "conn busy: rows of an earlier query of the
// transaction are still open", and nothing was stored.
func TestATxWritesInsideItsOwnRowsLoop(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		openRowsTables(t, s)
		c := ctx(t)
		// Scan, then write.
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, name FROM open_src ORDER BY id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var name string
				if err := rows.Scan(&id, &name); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES ($1, $2)`, id, name); err != nil {
					return fmt.Errorf("exec inside the rows loop: %w", err)
				}
			}
			return rows.Err()
		}))
		// Write first, then scan the row Next moved to; a nested Query and
		// a QueryRow inside the loop.
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, name FROM open_src ORDER BY id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				n++
				if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES ($1, 'before scan')`, 10*n); err != nil {
					return fmt.Errorf("exec before the row's scan: %w", err)
				}
				var id int64
				var name string
				if err := rows.Scan(&id, &name); err != nil {
					return fmt.Errorf("scan after the exec: %w", err)
				}
				inner, err := tx.Query(ctx, `SELECT count(*) FROM open_src WHERE id <= $1`, id)
				if err != nil {
					return fmt.Errorf("query inside the rows loop: %w", err)
				}
				var below int64
				if !inner.Next() {
					inner.Close()
					return fmt.Errorf("no row of the inner query: %w", inner.Err())
				}
				if err := inner.Scan(&below); err != nil {
					inner.Close()
					return err
				}
				var upper string
				if err := tx.QueryRow(ctx, `SELECT upper($1)`, name).Scan(&upper); err != nil {
					inner.Close()
					return fmt.Errorf("query row inside two open rows: %w", err)
				}
				inner.Close()
				if err := inner.Err(); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES ($1, $2)`, 100*below, upper); err != nil {
					return err
				}
			}
			if n != 3 {
				return fmt.Errorf("the loop read %d rows, want 3", n)
			}
			return rows.Err()
		}))
		require.Equal(t, []string{"1 one", "2 two", "3 three",
			"10 before scan", "20 before scan", "30 before scan",
			"100 ONE", "200 TWO", "300 THREE"}, openDst(t, s))
	})
}

// TestATxFormInsideItsOwnRowsLoop: a store Tx form (EnqueueTx) per row of
// an open Query enqueues every job on both engines. Before the fix, on
// PostgreSQL, the first EnqueueTx failed "conn busy" and nothing was
// enqueued.
func TestATxFormInsideItsOwnRowsLoop(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		openRowsTables(t, s)
		c := ctx(t)
		q := s.Queue("open-rows-jobs")
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, name FROM open_src ORDER BY id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var name string
				if err := rows.Scan(&id, &name); err != nil {
					return err
				}
				if _, err := q.EnqueueTx(ctx, tx, []byte(name), store.EnqueueOpts{}); err != nil {
					return fmt.Errorf("EnqueueTx inside the rows loop: %w", err)
				}
			}
			return rows.Err()
		}))
		jobs, err := q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		var payloads []string
		for _, j := range jobs {
			payloads = append(payloads, string(j.Payload))
		}
		require.ElementsMatch(t, []string{"one", "two", "three"}, payloads)
	})
}

// TestATxEndsWithItsRowsOpen: InTx whose function returns nil with a
// Query's rows not closed (one row read, or none), or a QueryRow never
// scanned, commits what it wrote on both engines, and so does Commit of a
// Begin'd Tx; the rows end with the transaction (Next is false, Err
// matches ErrTxDone). Rollback with rows open rolls back. Before the fix,
// on PostgreSQL, the commit failed "alkstore: commit: conn busy" (and
// pgx closed the connection): nothing was stored.
func TestATxEndsWithItsRowsOpen(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		openRowsTables(t, s)
		c := ctx(t)
		var left store.Rows
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES (1, 'rows read once')`); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT id FROM open_src ORDER BY id`)
			if err != nil {
				return err
			}
			if !rows.Next() {
				return fmt.Errorf("no first row: %w", rows.Err())
			}
			left = rows // no Close
			return nil
		}), "InTx returning nil with rows open")
		require.False(t, left.Next(), "the rows read on after their transaction committed")
		require.ErrorIs(t, left.Err(), store.ErrTxDone)
		left.Close()

		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES (2, 'rows never read')`); err != nil {
				return err
			}
			_, err := tx.Query(ctx, `SELECT id FROM open_src ORDER BY id`)
			return err // no Next, no Close
		}), "InTx returning nil with rows never read")

		var unscanned store.Row
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES (3, 'row not scanned')`); err != nil {
				return err
			}
			unscanned = tx.QueryRow(ctx, `SELECT id FROM open_src WHERE id = 1`) // never scanned
			return nil
		}), "InTx returning nil with a QueryRow not scanned")
		var id int64
		require.Error(t, unscanned.Scan(&id), "a row scanned after its transaction committed")

		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = tx.Exec(c, `INSERT INTO open_dst VALUES (4, 'begin and commit')`)
		require.NoError(t, err)
		rows, err := tx.Query(c, `SELECT id FROM open_src ORDER BY id`)
		require.NoError(t, err)
		require.True(t, rows.Next())
		require.NoError(t, tx.Commit(c), "Commit with rows open")
		require.False(t, rows.Next())
		require.ErrorIs(t, rows.Err(), store.ErrTxDone)

		tx, err = s.Begin(c)
		require.NoError(t, err)
		_, err = tx.Exec(c, `INSERT INTO open_dst VALUES (5, 'rolled back')`)
		require.NoError(t, err)
		rows, err = tx.Query(c, `SELECT id FROM open_src ORDER BY id`)
		require.NoError(t, err)
		require.True(t, rows.Next())
		require.NoError(t, tx.Rollback(c), "Rollback with rows open")
		require.False(t, rows.Next())

		require.Equal(t, []string{"1 rows read once", "2 rows never read", "3 row not scanned", "4 begin and commit"}, openDst(t, s))
		// The connections came back to the pool in a state to serve:
		// another transaction reads and writes.
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES (6, 'after')`)
			return err
		}))
		require.Len(t, openDst(t, s), 5)
	})
}

// TestAWorkTxHandlerLeavingItsRowsOpenCompletes: a WorkTx handler that
// writes a row, leaves a Query's rows open (one row read) and returns nil
// completes its job once, with its write, on both engines. Before the
// fix, on PostgreSQL, the job's AckTx failed "conn busy", so did the
// rollback, and the job was retried until dead ("attempts exhausted"):
// with MaxAttempts 1 it ended dead after one run, its write lost.
func TestAWorkTxHandlerLeavingItsRowsOpenCompletes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		openRowsTables(t, s)
		c := ctx(t)
		q := s.Queue("open-rows-work")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		var runs atomic.Int32
		settled := func() bool {
			j, err := q.Job(c, id)
			if errors.Is(err, store.ErrNotFound) {
				return true
			}
			require.NoError(t, err)
			return j.State == store.JobDead
		}
		workTxUntil(t, q, store.WorkOpts{Concurrency: 1, Visibility: time.Minute, PollInterval: noPoll},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				runs.Add(1)
				if _, err := tx.Exec(ctx, `INSERT INTO open_dst VALUES (1, 'handler')`); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, `SELECT id FROM open_src ORDER BY id`)
				if err != nil {
					return err
				}
				rows.Next() // and no Close
				return nil
			}, settled)
		j, err := q.Job(c, id)
		if err == nil {
			t.Fatalf("the job ended %s after %d attempts: %s", j.State, j.Attempts, j.LastError)
		}
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, int32(1), runs.Load())
		require.Equal(t, []string{"1 handler"}, openDst(t, s))
	})
}

// TestAHardShutdownEndsATxUnderRowsReadAhead: the slow reader of
// TestAHardShutdownEndsATxUnderItsSlowReadersRows runs a statement
// through the Tx after its first row, which on PostgreSQL reads the rest
// of its 100,000 rows into memory, and reads on after the hard Shutdown's
// rollback: with -race no report (those rows decode with the type map of
// the connection the rollback gives back to the pool, so they must not
// after it), Next ends them, Err says ErrTxDone or ErrClosed, and nothing
// of the transaction is stored.
func TestAHardShutdownEndsATxUnderRowsReadAhead(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		for round := range 2 {
			s, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			q := s.Queue("ahead-rows")
			tx, err := s.Begin(c)
			require.NoError(t, err)
			_, err = q.EnqueueTx(c, tx, []byte("rolled back"), store.EnqueueOpts{})
			require.NoError(t, err)
			r := newSlowReader(t)
			r.ahead = true
			rows, err := tx.Query(c, rowsSQL)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- r.run(tx, rows) }()
			select {
			case <-r.read:
			case err := <-done:
				t.Fatalf("round %d: the reader failed before the stop: %v", round, err)
			}
			ended, cancel := context.WithCancel(c)
			cancel()
			_ = s.Shutdown(ended)
			r.ranRollback(t)
			select {
			case err := <-done:
				require.NoError(t, err, "round %d", round)
			case <-time.After(time.Minute):
				t.Fatalf("round %d: the reader has not returned a minute after the hard stop", round)
			}
			s2, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			jobs, err := s2.Queue("ahead-rows").Jobs(c, store.JobsOpts{State: store.JobPending})
			require.NoError(t, err)
			require.Empty(t, jobs, "round %d: the rolled-back transaction's job is stored", round)
			require.NoError(t, s2.Close())
			t.Logf("round %d: the rows' Err: %v", round, r.rowsErr)
		}
	})
}
