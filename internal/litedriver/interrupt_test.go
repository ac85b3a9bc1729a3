package litedriver_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// interruptibleFile opens a WAL file (name) with table t twice: through
// an Interrupter (stops; immediate transactions) and plainly, both waiting
// an hour for a lock; closed when t ends.
func interruptibleFile(ctx context.Context, t *testing.T, file string) (db, plain *sql.DB, stops *litedriver.Interrupter, name string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), file)
	t.Cleanup(litedriver.SetBusyTimeout(path, time.Hour))
	name = "file:" + path + "?_pragma=journal_mode(wal)&_pragma=busy_timeout(10000)"
	stops = &litedriver.Interrupter{}
	db, err := litedriver.OpenInterruptible(name+"&_txlock=immediate", stops)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	plain, err = litedriver.Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	_, err = plain.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	return db, plain, stops, name
}

// TestInterrupterEndsWaitsAndStatements: an Interrupter ends, from another
// goroutine, a wait for another connection's write lock that an hour's busy
// timeout would not end, and a statement that would run for good; both
// fail with an error matching ErrInterrupted (and nothing of the
// interrupted write is stored), and so does every statement started after.
// A transaction whose statements all ran still commits. Handles opened
// without it are not touched.
func TestInterrupterEndsWaitsAndStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, plain, stops, name := interruptibleFile(ctx, t, "int.db")

	// A transaction that ran its statements before the interrupt.
	open, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = open.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	// A statement that never ends on its own (its context never ends).
	ran := make(chan error, 1)
	go func() {
		var n int64
		ran <- db.QueryRowContext(context.Background(),
			"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c").Scan(&n)
	}()
	waitStack(t, "TestInterrupterEndsWaitsAndStatements", "(*Stmt).Step")

	stops.Interrupt()
	require.ErrorIs(t, within(t, ran), litedriver.ErrInterrupted, "the running statement")
	require.NoError(t, open.Commit(), "a transaction whose statements ran commits")

	_, err = db.ExecContext(ctx, "INSERT INTO t VALUES (2)")
	require.ErrorIs(t, err, litedriver.ErrInterrupted, "a statement started after the interrupt")

	// A wait for the write lock another connection holds, on a second
	// Interrupter's handle with an hour's busy timeout.
	stops2 := &litedriver.Interrupter{}
	db2, err := litedriver.OpenInterruptible(name+"&_txlock=immediate", stops2)
	require.NoError(t, err)
	defer db2.Close()
	lock, err := plain.Conn(ctx)
	require.NoError(t, err)
	defer lock.Close()
	_, err = lock.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := db2.ExecContext(context.Background(), "INSERT INTO t VALUES (3)")
		waited <- err
	}()
	waitStack(t, "TestInterrupterEndsWaitsAndStatements", "Xgo_busy_")
	stops2.Interrupt()
	require.ErrorIs(t, within(t, waited), litedriver.ErrInterrupted, "the wait for the lock")
	_, err = lock.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)

	var got []int64
	rows, err := plain.QueryContext(ctx, "SELECT v FROM t ORDER BY v")
	require.NoError(t, err)
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		got = append(got, v)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{1}, got, "only the committed transaction's row")
	_, err = plain.ExecContext(ctx, "INSERT INTO t VALUES (4)")
	require.NoError(t, err, "a handle without the Interrupter")
}

// waitStack waits until a goroutine that creator started has frame on its
// stack (a minute detects one that never gets there).
func waitStack(t *testing.T, creator, frame string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, creator) && strings.Contains(g, frame) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine reached %s", frame)
		}
		time.Sleep(time.Millisecond)
	}
}

// within is what done delivers; a minute detects a statement the
// interrupt did not end.
func within(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the interrupted statement still runs")
		return nil
	}
}

// TestEndLockWaitsEndsOnlyLockWaits: EndLockWaits ends a statement's wait
// for a write lock another connection holds, which an hour's busy timeout
// would not end, with an error matching ErrInterrupted, and every such
// wait from then on at once; a statement that runs (it waits for no lock)
// runs to its end, and the handle's own transaction commits. This is what
// a hard stop of the store needs: a wait for another process's lock is
// cut, the store's own work is not.
func TestEndLockWaitsEndsOnlyLockWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, plain, stops, _ := interruptibleFile(ctx, t, "locks.db")
	db.SetMaxOpenConns(2)

	// The handle's own transaction holds the write lock, and a statement
	// of the handle's waits for it (another connection of the pool).
	own, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = own.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(context.Background(), "INSERT INTO t VALUES (2)")
		waited <- err
	}()
	waitStack(t, "TestEndLockWaitsEndsOnlyLockWaits", "Xgo_busy_")

	// A statement running on the handle's transaction (no lock wait).
	ran := make(chan error, 1)
	go func() {
		var n int64
		ran <- own.QueryRowContext(context.Background(),
			"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000000) SELECT count(*) FROM c").Scan(&n)
	}()
	waitStack(t, "TestEndLockWaitsEndsOnlyLockWaits", "(*Stmt).Step")

	stops.EndLockWaits()
	require.ErrorIs(t, within(t, waited), litedriver.ErrInterrupted, "the wait for the lock")
	require.NoError(t, within(t, ran), "the running statement")
	require.NoError(t, own.Commit(), "the transaction that held the lock")
	writes, reads := stops.LockWaitsEnded()
	require.EqualValues(t, 1, writes)
	require.Zero(t, reads)

	// From now on a wait for the lock ends at once, a statement that
	// waits for none runs.
	lock, err := plain.Conn(ctx)
	require.NoError(t, err)
	defer lock.Close()
	_, err = lock.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO t VALUES (3)")
	require.ErrorIs(t, err, litedriver.ErrInterrupted, "a wait started after EndLockWaits")
	var n int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n))
	require.EqualValues(t, 1, n, "only the committed transaction's row")
	_, err = lock.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO t VALUES (4)")
	require.NoError(t, err, "a write that waits for no lock")
}

// TestEndLockWaitsCountsReadsApart: EndLockWaits counts the waits it
// ended of read-only connections (query_only, as the store's readers)
// apart from the others', so that the store's hard stop says which it gave
// up. A read waits for a lock only when another connection holds the file
// exclusively: outside WAL mode (here a rollback journal, and a writer's
// BEGIN EXCLUSIVE), or when one holds a WAL file in exclusive locking mode,
// which it cannot take while the store's connections are open.
func TestEndLockWaitsCountsReadsApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "journal.db")
	t.Cleanup(litedriver.SetBusyTimeout(path, time.Hour))
	name := "file:" + path + "?_pragma=journal_mode(delete)&_pragma=busy_timeout(10000)"
	plain, err := litedriver.Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	_, err = plain.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	stops := &litedriver.Interrupter{}
	readers, err := litedriver.OpenInterruptible("file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)", stops)
	require.NoError(t, err)
	t.Cleanup(func() { _ = readers.Close() })
	readers.SetMaxOpenConns(1)
	require.NoError(t, readers.PingContext(ctx)) // connected (its pragmas run) before the lock

	lock, err := plain.Conn(ctx)
	require.NoError(t, err)
	defer lock.Close()
	_, err = lock.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	read := make(chan error, 1)
	go func() {
		var n int64
		read <- readers.QueryRowContext(context.Background(), "SELECT count(*) FROM t").Scan(&n)
	}()
	waitStack(t, "TestEndLockWaitsCountsReadsApart", "Xgo_busy_")
	stops.EndLockWaits()
	require.ErrorIs(t, within(t, read), litedriver.ErrInterrupted, "the read's wait for the lock")
	writes, reads := stops.LockWaitsEnded()
	require.Zero(t, writes)
	require.EqualValues(t, 1, reads)
	_, err = lock.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
}
