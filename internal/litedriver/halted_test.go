package litedriver_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/internal/progresslook"
)

// progressCut is a context cancelled at the first look of SQLite's progress
// handler (ncruces asks Err there, every 1,000 VM steps of a statement and
// once more as the statement returns): it ends from inside a statement,
// at a point SQLite chooses, without timing.
type progressCut struct {
	context.Context
	cancel context.CancelFunc
	ended  atomic.Bool
}

func (z *progressCut) Err() error {
	if z.Context.Err() == nil && progresslook.FromProgressHandler() {
		z.ended.Store(true)
		z.cancel()
	}
	return z.Context.Err()
}

// TestAStatementThatHaltedIsNotInterrupted: a statement that ran its last
// instruction is done, and the progress handler's last look, as it returns,
// does not turn it into a failure: an auto-commit write (Exec, a QueryRow
// of INSERT ... RETURNING) and a WriteTx (BEGIN IMMEDIATE, INSERT, COMMIT)
// either fail and store nothing, leaving no transaction open, or succeed
// and store their row. Each runs many times
// (the look that crosses a thousand VM steps comes every few runs of a
// statement) with a context that ends at the first look. A RETURNING
// write's first step returns its first row before the statement halts: a
// look there fails it, and SQLite rolls it back. Before: such a
// write failed with "interrupted" although stored, and a BEGIN that failed
// so left the connection inside its transaction, where every later write
// ran, never committed.
func TestAStatementThatHaltedIsNotInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "halt.db")
	db, err := litedriver.OpenInterruptible("file:"+path+"?_pragma=journal_mode(wal)&_txlock=immediate", &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n))
		return n
	}
	ins, err := db.PrepareContext(ctx, "INSERT INTO t VALUES (?)")
	require.NoError(t, err)
	defer ins.Close()
	ret, err := db.PrepareContext(ctx, "INSERT INTO t VALUES (?) RETURNING v")
	require.NoError(t, err)
	defer ret.Close()
	writes := map[string]func(c context.Context) error{
		"Exec": func(c context.Context) error {
			_, err := ins.ExecContext(c, 1)
			return err
		},
		"QueryRow RETURNING": func(c context.Context) error {
			var v int64
			return ret.QueryRowContext(litedriver.QueryWrite(c), 1).Scan(&v)
		},
		"WriteTx": func(c context.Context) error {
			return litedriver.WriteTx(c, db, func(w *litedriver.Writer) error {
				_, _, err := w.Exec("INSERT INTO t VALUES (?)", int64(1))
				return err
			})
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			var cut, late int
			const runs = 2000
			for i := 0; i < runs; i++ {
				before := count()
				inner, stop := context.WithCancel(ctx)
				z := &progressCut{Context: inner, cancel: stop}
				err := write(z)
				stop()
				stored := count() - before
				if err != nil {
					require.ErrorIs(t, err, context.Canceled)
					require.Zero(t, stored, "a write that failed (%v) stored nothing", err)
				} else {
					require.Equal(t, 1, stored, "a write that succeeded stored its row")
				}
				if z.ended.Load() {
					cut++
					if err == nil {
						late++
					}
				}
				// No transaction is left open on the connection.
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err, "a transaction was left open")
				require.NoError(t, tx.Rollback())
			}
			assert.Positive(t, cut, "no progress look ended a write: the test shows nothing")
			if name == "Exec" { // SQLite looks as the statement returns, after its commit, in some runs
				assert.Positive(t, late, "no look came after the statement's last instruction")
			}
			t.Logf("%s: %d of %d ended by a progress look, %d of them succeeded", name, cut, runs, late)
		})
	}
}

// TestAWriterQueryEndsWithItsContext: a read inside WriteTx's transaction
// (Writer.Query, as a SQLite claim reads its jobs) stops when its context
// ends while it runs, and the transaction with it. Before: Query left the
// connection's stop context judging the statement run before it (the
// transaction's BEGIN, halted), so an ended context read as alive and the
// read ran to its end.
func TestAWriterQueryEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "query.db")
	db, err := litedriver.OpenInterruptible("file:"+path+"?_pragma=journal_mode(wal)&_txlock=immediate", &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	// A read of ten million rows: a look of the progress handler comes
	// every 1,000 VM steps, so many come while it runs.
	const long = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000000) SELECT i FROM n"
	for round := 0; round < 20; round++ {
		inner, stop := context.WithCancel(ctx)
		z := &armedCut{progressCut: progressCut{Context: inner, cancel: stop}}
		rows := 0
		err = litedriver.WriteTx(z, db, func(w *litedriver.Writer) error {
			if _, _, err := w.Exec("INSERT INTO t VALUES (?)", int64(1)); err != nil {
				return err
			}
			z.armed.Store(true) // the cut comes while the read runs, not before
			return w.Query(long, func(*litedriver.Row) error { rows++; return nil })
		})
		stop()
		require.True(t, z.ended.Load(), "no progress look ended the read: the test shows nothing")
		require.ErrorIs(t, err, context.Canceled, "round %d: the read ran to its end (%d rows) with its context ended", round, rows)
		require.Less(t, rows, 10000000)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n))
		require.Zero(t, n, "round %d: the cut transaction's insert was kept", round)
	}
}

// armedCut is a progressCut that ends only once armed.
type armedCut struct {
	progressCut
	armed atomic.Bool
}

func (a *armedCut) Err() error {
	if a.armed.Load() {
		return a.progressCut.Err()
	}
	return a.Context.Err()
}
