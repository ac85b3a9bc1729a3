package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A hard Shutdown (its ctx ended) rolls back the transactions still open
// while their goroutines are still running statements in them: one loops
// over the store's own statements (EnqueueTx, PublishTx) and business SQL
// (Exec, QueryRow, Query) on its Tx, another waits in a long statement
// (pg_sleep, seen running in pg_stat_activity before the stop, so the
// rollback meets a statement in flight every round). A pgx connection is
// not safe for concurrent use: the rollback must cancel the statement and
// wait for it, not run beside it (attack54 F5: -race reported races in
// pgconn's buffers and statement cache). Run with -race: before the fix it
// failed with "race detected during execution of test" every round.
// Shutdown returns in far less than the sleep, every later operation says
// ErrClosed, and nothing either transaction wrote is stored.
// PostgreSQL only: database/sql serialises a SQLite transaction itself.
func TestHardShutdownRollsBackATxInUseWithoutRacingIt(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	admin := e.pgConn(t, c, "CREATE TABLE race_rows (n integer NOT NULL)")

	const sleepSQL = "SELECT pg_sleep(60)"
	for round := range 4 {
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		q, st := s.Queue("txrace"), s.Stream("txrace")
		busy, err := s.Begin(c)
		require.NoError(t, err)
		sleeper, err := s.Begin(c)
		require.NoError(t, err)

		// The busy goroutine: statements back to back until one fails,
		// then one of each kind more, and a Commit.
		var iterations atomic.Int64
		warm := make(chan struct{})
		busyErrs := make(chan []error, 1)
		go func() {
			bg := context.Background()
			var errs []error
			step := func(i int) error {
				if _, err := q.EnqueueTx(bg, busy, []byte("j"), store.EnqueueOpts{}); err != nil {
					return fmt.Errorf("EnqueueTx: %w", err)
				}
				if _, err := st.PublishTx(bg, busy, []byte("e")); err != nil {
					return fmt.Errorf("PublishTx: %w", err)
				}
				if _, err := busy.Exec(bg, "INSERT INTO race_rows VALUES ($1)", i); err != nil {
					return fmt.Errorf("Exec: %w", err)
				}
				var n int
				if err := busy.QueryRow(bg, "SELECT count(*) FROM race_rows").Scan(&n); err != nil {
					return fmt.Errorf("QueryRow: %w", err)
				}
				rows, err := busy.Query(bg, "SELECT n FROM race_rows ORDER BY n DESC LIMIT 3")
				if err != nil {
					return fmt.Errorf("Query: %w", err)
				}
				for rows.Next() {
					if err := rows.Scan(&n); err != nil {
						rows.Close()
						return fmt.Errorf("Scan: %w", err)
					}
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return fmt.Errorf("rows: %w", err)
				}
				return nil
			}
			deadline := time.Now().Add(time.Minute)
			for i := 0; ; i++ {
				if err := step(i); err != nil {
					errs = append(errs, err)
					break
				}
				if iterations.Add(1) == 20 {
					close(warm)
				}
				if time.Now().After(deadline) {
					errs = append(errs, errors.New("no statement failed within a minute of the hard stop"))
					break
				}
			}
			_, err := busy.Exec(bg, "INSERT INTO race_rows VALUES (-2)")
			errs = append(errs, err)
			_, err = q.EnqueueTx(bg, busy, []byte("late"), store.EnqueueOpts{})
			errs = append(errs, err)
			errs = append(errs, busy.Commit(bg))
			busyErrs <- errs
		}()

		// The sleeper: a write, then a statement the rollback meets in
		// flight.
		_, err = sleeper.Exec(c, "INSERT INTO race_rows VALUES (-1)")
		require.NoError(t, err)
		sleepErrs := make(chan []error, 1)
		go func() {
			bg := context.Background()
			_, err := sleeper.Exec(bg, sleepSQL)
			errs := []error{err}
			_, err = sleeper.Exec(bg, "INSERT INTO race_rows VALUES (-3)")
			errs = append(errs, err)
			errs = append(errs, sleeper.Commit(bg))
			sleepErrs <- errs
		}()

		select {
		case <-warm:
		case errs := <-busyErrs:
			t.Fatalf("round %d: the busy transaction failed before the stop: %v", round, errs)
		}
		waitFor(t, "the sleeper's statement running on the server", func() bool {
			var n int
			err := admin.QueryRow(c, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query = $1", sleepSQL).Scan(&n)
			require.NoError(t, err)
			return n == 1
		})

		ended, cancel := context.WithCancel(c)
		cancel()
		start := time.Now()
		_ = s.Shutdown(ended) // a hard stop: its error says so
		took := time.Since(start)
		require.Less(t, took, 20*time.Second, "round %d: Shutdown took %v", round, took)

		for name, ch := range map[string]chan []error{"busy": busyErrs, "sleeper": sleepErrs} {
			select {
			case errs := <-ch:
				for i, err := range errs {
					require.ErrorIs(t, err, store.ErrClosed, "round %d: %s's operation %d after the stop", round, name, i)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: the %s goroutine has not returned 30 s after the hard stop", round, name)
			}
		}
		var rows, jobs int
		require.NoError(t, admin.QueryRow(c, "SELECT count(*) FROM race_rows").Scan(&rows))
		require.NoError(t, admin.QueryRow(c, "SELECT count(*) FROM alkstore.jobs WHERE queue = 'txrace'").Scan(&jobs))
		require.Zero(t, rows, "round %d: rows the rolled-back transactions wrote are stored", round)
		require.Zero(t, jobs, "round %d: jobs the rolled-back transaction enqueued are stored", round)
		t.Logf("round %d: %d iterations before the stop; Shutdown took %v", round, iterations.Load(), took)
	}
}

// Rows the application keeps open hold the Tx's connection, with no
// statement at the server for a cancel to end, and nothing but their owner
// would close them (a leaked Tx, a handler left behind). The hard
// Shutdown's rollback does not wait for them: it ends the transaction at
// once, through pgx, which closes the connection (the server rolls back),
// and the rows' owner finds the store closed. Waiting for the rows (the
// first form of the guard) left such a transaction open for ever, and
// Close with it (review54b F1), and a hard Shutdown took 5 s a
// transaction (F2).
func TestHardShutdownRollsBackATxWhoseRowsAreOpen(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	admin := e.pgConn(t, c, "CREATE TABLE open_rows (n integer NOT NULL)")

	s, err := store.Open(c, e.dsn)
	require.NoError(t, err)
	tx, err := s.Begin(c)
	require.NoError(t, err)
	_, err = tx.Exec(c, "INSERT INTO open_rows SELECT generate_series(1, 3)")
	require.NoError(t, err)
	rows, err := tx.Query(c, "SELECT n FROM open_rows")
	require.NoError(t, err)
	require.True(t, rows.Next())

	ended, cancel := context.WithCancel(c)
	cancel()
	start := time.Now()
	_ = s.Shutdown(ended)
	took := time.Since(start)
	require.Less(t, took, 3*time.Second, "a hard Shutdown waits for rows left open")
	_, err = tx.Exec(c, "INSERT INTO open_rows VALUES (4)")
	require.ErrorIs(t, err, store.ErrClosed)

	inTx := func() int {
		var n int
		require.NoError(t, admin.QueryRow(c, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'").Scan(&n))
		return n
	}
	waitFor(t, "the transaction rolled back though its rows are open", func() bool { return inTx() == 0 })
	rows.Close()
	var n int
	require.NoError(t, admin.QueryRow(c, "SELECT count(*) FROM open_rows").Scan(&n))
	require.Zero(t, n, "the rolled-back transaction's rows are stored")
	require.ErrorIs(t, tx.Commit(c), store.ErrClosed)
	t.Logf("Shutdown took %v", took)
}

// pgConn is a session of its own on e's PostgreSQL database, closed when
// t ends, on which setup has run.
func (e *engineEnv) pgConn(t *testing.T, c context.Context, setup ...string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, sql := range setup {
		_, err := conn.Exec(c, sql)
		require.NoError(t, err, sql)
	}
	return conn
}
