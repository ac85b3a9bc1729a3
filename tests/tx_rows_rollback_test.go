package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// rowsSQL is a result too long to be read ahead: the query stays open at
// the server while the reader holds its rows.
const rowsSQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 100000) SELECT x FROM c"

// slowReader reads one row of a Tx's Query, says so on read, then holds
// its rows, as a reader making an HTTP call a row does, until the store's
// rollback ended the transaction, and reads on: its next Next must end the
// rows and Err must say the transaction is gone (ErrTxDone; ErrClosed too
// when the store closes), the transaction's next statement likewise.
//
// The test tells it the rollback ran through a pipe read and written with
// raw system calls, which the race detector does not see as
// synchronisation (a channel would be, and so are os.File's and package
// syscall's Read and Write): nothing then orders what the rollback did in
// pgx before the reader's next Next but the store's guard, as when the
// reader only sleeps (attack55 F3), and without it the race detector sees
// them touch the connection unordered.
type slowReader struct {
	pipe    [2]int // the reader waits on 0; the test writes 1
	read    chan struct{}
	rowsErr error // the rows' Err after the rollback, for the log
	// ahead: after its first row the reader runs a statement through the
	// Tx, which on PostgreSQL reads the rest of the rows into memory
	// (attack56a F3), so they read on from there.
	ahead bool
}

func newSlowReader(t *testing.T) *slowReader {
	r := &slowReader{read: make(chan struct{})}
	require.NoError(t, syscall.Pipe2(r.pipe[:], syscall.O_CLOEXEC))
	t.Cleanup(func() {
		_ = syscall.Close(r.pipe[0])
		_ = syscall.Close(r.pipe[1])
	})
	return r
}

// ranRollback tells the reader the store's rollback ran.
func (r *slowReader) ranRollback(t *testing.T) {
	b := [1]byte{1}
	_, _, errno := syscall.Syscall(syscall.SYS_WRITE, uintptr(r.pipe[1]), uintptr(unsafe.Pointer(&b[0])), 1)
	require.Zero(t, errno)
}

// waitRollback waits for ranRollback (blocking its thread).
func (r *slowReader) waitRollback() error {
	var b [1]byte
	n, _, errno := syscall.Syscall(syscall.SYS_READ, uintptr(r.pipe[0]), uintptr(unsafe.Pointer(&b[0])), 1)
	if errno != 0 || n != 1 {
		return fmt.Errorf("read %d bytes from the pipe: %v", n, errno)
	}
	return nil
}

// run reads tx's rows as described at slowReader and returns what went
// wrong, nil when all went as it should.
func (r *slowReader) run(tx store.Tx, rows store.Rows) error {
	defer rows.Close()
	if !rows.Next() {
		return fmt.Errorf("no first row: %w", rows.Err())
	}
	var x int
	if err := rows.Scan(&x); err != nil {
		return fmt.Errorf("scan of the first row: %w", err)
	}
	if r.ahead {
		if _, err := tx.Exec(context.Background(), "SELECT 1"); err != nil {
			return fmt.Errorf("a statement beside the open rows: %w", err)
		}
		if !rows.Next() {
			return fmt.Errorf("no second row after a statement beside them: %w", rows.Err())
		}
		if err := rows.Scan(&x); err != nil || x != 2 {
			return fmt.Errorf("scan of the second row after a statement beside them: %d, %v", x, err)
		}
	}
	close(r.read)
	if err := r.waitRollback(); err != nil {
		return fmt.Errorf("waiting for the rollback: %w", err)
	}
	n := 0
	for rows.Next() {
		n++ // what the driver had read already, on SQLite none
		if n > 100000 {
			return errors.New("the rows read on to their end after the rollback")
		}
	}
	r.rowsErr = rows.Err()
	if err := r.rowsErr; !txGone(err) {
		return fmt.Errorf("the rows' Err after the rollback (%d rows more): %v, want ErrTxDone or ErrClosed", n, err)
	}
	rows.Close()
	if _, err := tx.Exec(context.Background(), "SELECT 1"); !txGone(err) {
		return fmt.Errorf("a statement after the rollback: %v, want ErrTxDone or ErrClosed", err)
	}
	return nil
}

// txGone: err says the transaction is gone (ErrClosed: the store closed too).
func txGone(err error) bool {
	return errors.Is(err, store.ErrTxDone) || errors.Is(err, store.ErrClosed)
}

// TestAHardShutdownEndsATxUnderItsSlowReadersRows: a goroutine reads a
// Tx's Query rows slowly (it holds them past the 500 ms the hard
// Shutdown's rollback waits for open rows) and reads on after that
// rollback. Before the fix, on PostgreSQL, the rollback ran beside the
// rows on pgx's connection: pgx refused it ("conn busy") and closed the
// connection under the reader's Next, and the goroutine that waited for
// the rows to close rolled back a second time, beside the first, on
// pgxpool.Tx: with -race "race detected during execution of test", two
// reports a round. Now the reader's next Next ends its rows, Err says
// ErrTxDone (ErrClosed too on PostgreSQL), and nothing the transaction
// wrote is stored. Several rounds, each a store of its own.
func TestAHardShutdownEndsATxUnderItsSlowReadersRows(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		for round := range 3 {
			s, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			q := s.Queue("slow-rows")
			tx, err := s.Begin(c)
			require.NoError(t, err)
			_, err = q.EnqueueTx(c, tx, []byte("rolled back"), store.EnqueueOpts{})
			require.NoError(t, err)
			r := newSlowReader(t)
			rows, err := tx.Query(c, rowsSQL)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- r.run(tx, rows) }()
			<-r.read

			ended, cancel := context.WithCancel(c)
			cancel()
			start := time.Now()
			_ = s.Shutdown(ended) // a hard stop: its error says so
			took := time.Since(start)
			r.ranRollback(t)
			select {
			case err := <-done:
				require.NoError(t, err, "round %d", round)
			case <-time.After(time.Minute):
				t.Fatalf("round %d: the reader has not returned a minute after the hard stop", round)
			}
			require.ErrorIs(t, tx.Commit(c), store.ErrClosed, "round %d", round)
			require.Less(t, took, 5*time.Second, "round %d: the hard Shutdown waited for the rows", round)

			s2, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			jobs, err := s2.Queue("slow-rows").Jobs(c, store.JobsOpts{State: store.JobPending})
			require.NoError(t, err)
			require.Empty(t, jobs, "round %d: the rolled-back transaction's job is stored", round)
			require.NoError(t, s2.Close())
			t.Logf("round %d: hard Shutdown took %v; the rows' Err: %v", round, took, r.rowsErr)
		}
	})
}

// TestWorkEndsAnAbandonedHandlersTxUnderItsSlowRows: the same reader in a
// WorkTx handler that ignores its cancelled context, which Work leaves
// behind and whose transaction it rolls back (after the 500 ms it waits
// for the open rows). Before the fix, on PostgreSQL, -race reported the
// same two races as for the hard Shutdown. Now the handler's next Next
// ends its rows with ErrTxDone, what it wrote is not stored, and both
// connections of a pool of 2 are free again.
func TestWorkEndsAnAbandonedHandlersTxUnderItsSlowRows(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn, store.WithMaxConns(2))
		require.NoError(t, err)
		defer func() { _ = s.Close() }()
		q, side := s.Queue("slow-rows-work"), s.Queue("slow-rows-side")
		for round := range 2 {
			_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
			r := newSlowReader(t)
			result := make(chan error, 1)
			var ran atomic.Int32
			wc, cancel := context.WithCancel(c)
			done := make(chan error, 1)
			go func() {
				done <- q.WorkTx(wc, store.WorkOpts{Grace: time.Millisecond, Visibility: time.Minute, PollInterval: noPoll},
					func(ctx context.Context, tx store.Tx, j *store.Job) error {
						if ran.Add(1) > 1 {
							return nil
						}
						if _, err := side.EnqueueTx(ctx, tx, []byte("rolled back"), store.EnqueueOpts{}); err != nil {
							result <- err
							return err
						}
						rows, err := tx.Query(ctx, rowsSQL)
						if err != nil {
							result <- err
							return err
						}
						result <- r.run(tx, rows)
						return nil
					})
			}()
			select {
			case <-r.read:
			case err := <-result:
				t.Fatalf("round %d: the handler failed before its first row: %v", round, err)
			}
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err, "round %d", round)
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: Work has not returned 30 s after its cancel", round)
			}
			r.ranRollback(t)
			select {
			case err := <-result:
				require.NoError(t, err, "round %d", round)
			case <-time.After(time.Minute):
				t.Fatalf("round %d: the handler has not returned a minute after Work", round)
			}
			t.Logf("round %d: the rows' Err: %v", round, r.rowsErr)
			jobs, err := side.Jobs(c, store.JobsOpts{State: store.JobPending})
			require.NoError(t, err)
			require.Empty(t, jobs, "round %d: the abandoned handler's write is stored", round)
			bc, bcancel := context.WithTimeout(c, 10*time.Second)
			tx1, err := s.Begin(bc)
			require.NoError(t, err, "round %d: the abandoned handler's transaction still holds a connection", round)
			if e.name == "pg" {
				tx2, err := s.Begin(bc)
				require.NoError(t, err, "round %d: the abandoned handler's transaction still holds a connection", round)
				require.NoError(t, tx2.Rollback(c))
			}
			require.NoError(t, tx1.Rollback(c))
			bcancel()
		}
	})
}
