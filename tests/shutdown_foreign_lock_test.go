package tests

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestHardShutdownCutsAWaitOnAForeignLock: a job's handler returns while a
// connection that is not the store's (another process's, or the
// application's own database/sql pool, as an adopted transaction is) holds
// in an open transaction what the job's ack needs: on SQLite the write
// lock, which the store's writer waits for in SQLite's busy handler (up to
// its 10 s busy timeout); on PostgreSQL the job's row, which the ack
// skips and acks apart. Then Shutdown, whose context ends 300 ms in: a hard stop.
//
// Shutdown cannot end that transaction; it must not wait for it either:
// it returns well inside a hard stop's wait for handlers (5 s), with an
// error that matches its context's and names the lock held elsewhere, not
// handlers (none was running). The job whose ack was cut is not lost:
// once the lock is free, a new store runs it again after its lease (or
// finds it acked).
//
// Before the fix, on SQLite, the ack waited out the busy timeout, the Work
// loop with it, and Shutdown gave up on the loops after 7 s saying
// "handlers ignored the hard stop" (lows58). On PostgreSQL 74a57aa had
// bounded the wait to a second, and Shutdown said only "hard stop; every
// operation running returned".
func TestHardShutdownCutsAWaitOnAForeignLock(t *testing.T) {
	eachEngineEachForm(t, []string{"deadline", "done"}, func(t *testing.T, e *engineEnv, form int) {
		const visibility = 3 * time.Second
		s := e.open(t) // Open's pool: the store's own connections
		c := ctx(t)
		q := s.Queue("foreign-lock")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		foreign := e.sqlDB(t)
		var ftx atomic.Pointer[sql.Tx]
		defer func() {
			if tx := ftx.Load(); tx != nil {
				_ = tx.Rollback()
			}
		}()
		var runs atomic.Int32
		w, err := q.NewWorker(store.WorkOpts{Concurrency: 1, Visibility: visibility, Timeout: time.Minute},
			func(ctx context.Context, j *store.Job) error {
				if runs.Add(1) == 1 {
					// Taken before the handler returns: its ack waits.
					return holdJobRow(c, e, foreign, &ftx, j.ID)
				}
				return nil
			})
		require.NoError(t, err)
		ran := make(chan error, 1)
		go func() { ran <- w.Run(c) }()
		for ftx.Load() == nil && c.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if e.name == "pg" {
			// The ack skipped the row and a statement waits for it.
			for waiting := 0; waiting == 0 && c.Err() == nil; time.Sleep(time.Millisecond) {
				require.NoError(t, foreign.QueryRowContext(c, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
			}
		}
		if e.name == "lite" {
			// A write of the worker's waits for the file lock: the ack, or
			// the claim it was lent to (which acks it once it failed).
			waitFor(t, "a write waits for the file lock", func() bool {
				return goroutineOfWaits(t, "Xgo_busy_")
			})
		}

		// "deadline": a short graceful stop first; "done": a hard stop at
		// once, where the loop looks for handlers still running before
		// the wait on its count may have been told that none is (it
		// blamed "handlers cancelled" in 6 runs of 6, both engines).
		hard, cancel := context.WithTimeout(c, 300*time.Millisecond)
		defer cancel()
		if form == 1 {
			cancel()
		}
		begun := time.Now()
		err = s.Shutdown(hard)
		took := time.Since(begun)
		require.Less(t, took, 6*time.Second, "Shutdown waited for a lock another connection holds")
		require.ErrorIs(t, err, hard.Err())
		require.NotContains(t, err.Error(), "handlers cancelled", "no handler was running")
		require.NotContains(t, err.Error(), "handlers ignored", "no handler was running")
		require.Contains(t, err.Error(), "lock another connection holds")
		select {
		case err := <-ran:
			require.ErrorIs(t, err, store.ErrClosed)
		case <-c.Done():
			t.Fatal("Run did not return")
		}

		// The lock freed, a new store acks or runs the job again.
		require.NoError(t, ftx.Load().Rollback())
		s2 := e.open(t)
		q2 := s2.Queue("foreign-lock")
		go func() {
			_ = q2.Work(c, store.WorkOpts{Concurrency: 1, Visibility: visibility}, func(context.Context, *store.Job) error { return nil })
		}()
		for deadline := time.Now().Add(10 * visibility); ; time.Sleep(5 * time.Millisecond) {
			_, err := q2.Job(c, id)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			require.NoError(t, err)
			require.True(t, time.Now().Before(deadline), "the job whose ack the stop cut never completed")
		}
	})
}

// TestOpenPoolHardShutdownGivesUpAHeldRowsAck is the test above on a store
// opened on the application's own pool (OpenPool: PostgreSQL only), whose
// statements the hard stop's cancel of every running statement does not
// reach. The ack of the finished job whose row another connection holds
// must be given up as on Open's store, and Shutdown must say the same:
// the writes waiting for a lock another connection holds were given up
// and stored nothing. Before, the ack's statement went on waiting on the
// pool, Shutdown waited 5 s more for it as an operation still running
// (6 s in all), said "operations still running", and the ack committed
// once the row was free, after the store had closed.
func TestOpenPoolHardShutdownGivesUpAHeldRowsAck(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	s, err := store.OpenPool(c, e.pool(t))
	require.NoError(t, err)
	q := s.Queue("foreign-lock")
	id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
	require.NoError(t, err)

	foreign := e.sqlDB(t)
	var ftx atomic.Pointer[sql.Tx]
	defer func() {
		if tx := ftx.Load(); tx != nil {
			_ = tx.Rollback()
		}
	}()
	w, err := q.NewWorker(store.WorkOpts{Concurrency: 1, Visibility: time.Minute, Timeout: time.Minute},
		func(ctx context.Context, j *store.Job) error {
			return holdJobRow(c, e, foreign, &ftx, j.ID)
		})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(c) }()
	lockWaits := func() (n int) {
		require.NoError(t, foreign.QueryRowContext(c, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n
	}
	waitFor(t, "the ack waits for the row", func() bool { return ftx.Load() != nil && lockWaits() > 0 })

	hard, cancel := context.WithCancel(c)
	cancel()
	err = s.Shutdown(hard)
	require.ErrorIs(t, err, context.Canceled)
	require.NotContains(t, err.Error(), "operations still running")
	require.Contains(t, err.Error(), "writes waiting for a lock another connection holds")
	require.Contains(t, err.Error(), "stored nothing")
	select {
	case err := <-ran:
		require.ErrorIs(t, err, store.ErrClosed)
	case <-c.Done():
		t.Fatal("Run did not return")
	}
	require.Zero(t, lockWaits(), "the ack still waits for the row after Shutdown returned")

	// The row freed, nothing acks the job behind the closed store's back.
	require.NoError(t, ftx.Load().Rollback())
	var state string
	require.NoError(t, foreign.QueryRowContext(c, `SELECT state FROM alkstore.jobs WHERE id = $1`, id).Scan(&state))
	require.Equal(t, "running", state, "the ack the stop gave up was stored")
}

// TestLiteGracefulCloseSaysAFinishedJobsAckFailed (SQLite): a job's handler
// returns while another connection to the database file (another process)
// holds the write lock in a transaction (BEGIN IMMEDIATE), and the
// application closes the store gracefully at once. Close waits for the
// loop, whose ack of the finished job waits out SQLite's busy timeout and
// fails: the job stays running, its attempt spent, and runs again once its
// claim lapses. Close must say so, with the ack's error, rather than
// return nil: the application relies on Close to settle what finished
// (`defer s.Close()` in main), and PostgreSQL's Close says the ack was
// given up. Before, Close returned nil and only a warning was logged
// (review59a). PostgreSQL's side (its Close errors already) is
// TestHardShutdownCutsAWaitOnAForeignLock's.
func TestLiteGracefulCloseSaysAFinishedJobsAckFailed(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "lite")
	c := ctx(t)
	s, err := store.Open(c, e.dsn)
	require.NoError(t, err)
	q := s.Queue("close-foreign-lock")
	id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
	require.NoError(t, err)

	conn, err := e.sqlDB(t).Conn(c)
	require.NoError(t, err)
	defer conn.Close()
	locked := make(chan struct{})
	w, err := q.NewWorker(store.WorkOpts{Concurrency: 1, Visibility: time.Minute}, func(context.Context, *store.Job) error {
		// Taken before the handler returns: its ack waits for it.
		if _, err := conn.ExecContext(c, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		close(locked)
		return nil
	})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(c) }()
	select {
	case <-locked:
	case <-c.Done():
		t.Fatal("the handler never ran")
	}

	err = s.Close()
	require.Error(t, err, "the finished job's ack failed: Close says so")
	assert.Contains(t, err.Error(), "the settle of a finished job failed as the store closed; the job runs again once its claim lapses")
	assert.Contains(t, err.Error(), "database is locked", "the ack's own error")
	select {
	case err := <-ran:
		require.ErrorIs(t, err, store.ErrClosed)
	case <-c.Done():
		t.Fatal("Run did not return")
	}

	_, err = conn.ExecContext(c, "ROLLBACK")
	require.NoError(t, err)
	j, err := e.open(t).Queue("close-foreign-lock").Job(c, id)
	require.NoError(t, err)
	assert.Equal(t, store.JobRunning, j.State, "not acked: it runs again once its claim lapses")
	assert.Equal(t, 1, j.Attempts)
}
