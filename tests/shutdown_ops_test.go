package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/store"
)

// hardStopOutcome checks what a hard Shutdown (its error serr) says against
// what happened to the auto-commit EnqueueMany of 5 jobs it found running
// (done): Shutdown claims operations "still running" only if one is (the
// operation has not returned when Shutdown did); the operation either
// stored its batch and returned nil, or failed with an error matching
// ErrClosed and stored nothing. release lets a held lock go once Shutdown
// returned; ready is what the queue holds besides the batch.
func hardStopOutcome(t *testing.T, e *engineEnv, serr error, done <-chan error, release func(), queue string, ready int64) (stillRunning bool, opErr error) {
	t.Helper()
	require.ErrorIs(t, serr, context.Canceled)
	stillRunning = strings.Contains(serr.Error(), "still running")
	if !stillRunning {
		// The operation left the store's count before Shutdown returned;
		// it may not have sent its result yet. With the lock still held,
		// only an operation that ended returns: a minute detects one that
		// still waits.
		select {
		case opErr = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: Shutdown returned %q while the operation still runs", e.name, serr)
		}
	}
	release()
	if stillRunning {
		opErr = <-done
	}
	st, err := e.open(t).Queue(queue).Stats(ctx(t))
	require.NoError(t, err)
	if opErr == nil {
		assert.Equal(t, ready+5, st.Ready, "the operation that returned nil stored its batch")
	} else {
		require.ErrorIs(t, opErr, store.ErrClosed)
		assert.Equal(t, ready, st.Ready, "the operation that failed stored nothing")
	}
	return stillRunning, opErr
}

// TestHardStopCancelsAnOperationWaitingOnALock: an auto-commit EnqueueMany
// with a context that never ends waits on a lock the store does not hold
// (pg: the application's own pool holds the table; SQLite: another
// connection to the file, as another process would, holds its write lock
// with BEGIN IMMEDIATE, and the store's busy timeout is an hour, so only
// the store can end the wait). A hard Shutdown returns while the lock is
// still held: it cancelled (pg) or interrupted (SQLite) the statement,
// which failed with ErrClosed and stored nothing, and Shutdown does not
// say it is still running. (Before: on pg Shutdown waited for the lock,
// then said "operations still running" about an operation that had
// succeeded; on SQLite the operation outlived the hard stop until its busy
// timeout.)
func TestHardStopCancelsAnOperationWaitingOnALock(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		if e.name == "lite" {
			defer litedriver.SetBusyTimeout(e.dsn, time.Hour)()
		}
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		q := s.Queue("blocked")
		_, err = q.Enqueue(c, []byte("warm"), store.EnqueueOpts{})
		require.NoError(t, err)
		var release func()
		if e.name == "pg" {
			pool := e.pool(t)
			lk, err := pool.Begin(c)
			require.NoError(t, err)
			_, err = lk.Exec(c, "LOCK TABLE alkstore.jobs IN ACCESS EXCLUSIVE MODE")
			require.NoError(t, err)
			release = func() { _ = lk.Rollback(c) }
		} else {
			conn, err := e.sqlDB(t).Conn(c)
			require.NoError(t, err)
			_, err = conn.ExecContext(c, "BEGIN IMMEDIATE") // the file's write lock
			require.NoError(t, err)
			release = func() {
				_, _ = conn.ExecContext(c, "ROLLBACK")
				_ = conn.Close()
			}
		}
		released := false
		defer func() {
			if !released {
				release()
			}
		}()
		done := make(chan error, 1)
		go func() {
			_, err := q.EnqueueMany(context.Background(), make([]store.NewJob, 5))
			done <- err
		}()
		if e.name == "pg" {
			waitForLockWait(t, e.pool(t), "the EnqueueMany")
		} else {
			waitFor(t, "the EnqueueMany waits for the file lock", func() bool {
				return goroutineWaits("TestHardStopCancelsAnOperationWaitingOnALock", "EnqueueMany", "Xgo_busy_")
			})
		}
		now, cancel := context.WithCancel(c)
		cancel()
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(now) }()
		var serr error
		select {
		case serr = <-shut:
		case <-time.After(time.Minute): // the lock is held for good: it never returns
			t.Fatalf("%s: a hard Shutdown waits for an operation blocked on a lock", e.name)
		}
		stillRunning, opErr := hardStopOutcome(t, e, serr, done, func() { released = true; release() }, "blocked", 1)
		assert.False(t, stillRunning, "the hard stop cancelled it: %v", serr)
		require.ErrorIs(t, opErr, store.ErrClosed, "cancelled while the lock was held")
		if e.name == "lite" {
			require.ErrorIs(t, opErr, litedriver.ErrInterrupted, "the store interrupted the wait (not its busy timeout)")
		}
	})
}

// TestHardStopBehindTheStoresOwnTransaction: an auto-commit EnqueueMany
// waits behind a transaction the store began (SQLite: the writer slot; pg:
// a table lock it took), which never ends; a graceful Shutdown waits for
// the transaction until the test turns it hard. The transaction is rolled
// back, and the operation either then stores its batch or is cancelled
// with ErrClosed; Shutdown does not claim it is still running. (Before:
// Shutdown said "operations still running" and the operation then stored
// its batch.)
func TestHardStopBehindTheStoresOwnTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		q := s.Queue("behind")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		if e.name == "pg" {
			_, err = tx.Exec(c, "LOCK TABLE alkstore.jobs IN ACCESS EXCLUSIVE MODE")
			require.NoError(t, err)
		}
		_, err = q.EnqueueTx(c, tx, []byte("in tx"), store.EnqueueOpts{})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := q.EnqueueMany(c, make([]store.NewJob, 5))
			done <- err
		}()
		if e.name == "pg" {
			waitForLockWait(t, e.pool(t), "the EnqueueMany")
		} else {
			waitFor(t, "the EnqueueMany waits for the writer slot", func() bool {
				return goroutineWaits("TestHardStopBehindTheStoresOwnTransaction", "EnqueueMany", "database/sql.(*DB).conn")
			})
		}
		sctx, cancel := context.WithCancel(c)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(sctx) }()
		waitFor(t, "Shutdown waits for the open transaction", func() bool {
			return goroutineWaits("TestHardStopBehindTheStoresOwnTransaction", "store.waitTxs")
		})
		cancel() // the graceful shutdown turns hard
		stillRunning, _ := hardStopOutcome(t, e, <-shut, done, func() {}, "behind", 0)
		assert.False(t, stillRunning, "the operation returned within the hard stop's wait")
		require.ErrorIs(t, tx.Commit(c), store.ErrClosed, "the transaction was rolled back")
	})
}

// TestHardStopInterruptsABeginWaitingOnALock (SQLite; a pg BEGIN waits on
// no lock): a Begin waiting for another connection's write lock, with a
// busy timeout of an hour, is interrupted by a hard Shutdown, which
// returns. Before, the wait did not count as a running operation, so the
// hard stop never switched the interrupt on, and Shutdown hung closing the
// statements of the connection the waiting Begin held (stop 35 review).
func TestHardStopInterruptsABeginWaitingOnALock(t *testing.T) {
	e := newEnv(t, "lite")
	c := ctx(t)
	defer litedriver.SetBusyTimeout(e.dsn, time.Hour)()
	s, err := store.Open(c, e.dsn)
	require.NoError(t, err)
	conn, err := e.sqlDB(t).Conn(c)
	require.NoError(t, err)
	_, err = conn.ExecContext(c, "BEGIN IMMEDIATE") // the file's write lock
	require.NoError(t, err)
	defer func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		_ = conn.Close()
	}()
	done := make(chan error, 1)
	go func() {
		tx, err := s.Begin(context.Background())
		if err == nil {
			_ = tx.Rollback(context.Background())
		}
		done <- err
	}()
	waitFor(t, "the Begin waits for the file lock", func() bool {
		return goroutineWaits("TestHardStopInterruptsABeginWaitingOnALock", "Begin", "Xgo_busy_")
	})
	now, cancel := context.WithCancel(c)
	cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(now) }()
	select {
	case err := <-shut:
		require.ErrorIs(t, err, context.Canceled, "a hard stop's error matches its ctx")
	case <-time.After(time.Minute): // the lock is held for good: it never returns
		t.Fatal("a hard Shutdown hangs behind a Begin waiting on another connection's lock")
	}
	select {
	case err := <-done:
		require.ErrorIs(t, err, store.ErrClosed)
		require.ErrorIs(t, err, litedriver.ErrInterrupted, "the store interrupted the wait (not its busy timeout)")
	case <-time.After(time.Minute):
		t.Fatal("the Begin never returned")
	}
}
