package litedriver_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// TestTransactionsRunTheirOwnStatementsPrepared: a transaction begun with
// the default options on a handle whose name sets _txlock runs the BEGIN
// the name states, its COMMIT and its ROLLBACK as statements the
// connection prepared once and kept (as WriteTx's), and so do the kept
// statements given to OpenInterruptible; a transaction with other options,
// or on a handle without _txlock, is the driver's. Each keeps what a
// transaction guarantees: a read-only one refuses writes, a deferred one
// leaves the writer to others until it writes, an immediate one holds it
// from its BEGIN, a rollback stores nothing, and savepoints nest.
func TestTransactionsRunTheirOwnStatementsPrepared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "tx.db")
	base := "file:" + path + "?_pragma=journal_mode(wal)&_pragma=busy_timeout(0)"
	const (
		sp       = "SAVEPOINT sp;"
		release  = "RELEASE SAVEPOINT sp;"
		rollSp   = "ROLLBACK TO SAVEPOINT sp;"
		insert   = "INSERT INTO t VALUES (?1)"
		countAll = "SELECT count(*) FROM t"
	)
	open := func(params string, keep ...string) *sql.DB {
		db, err := litedriver.OpenInterruptible(base+params, &litedriver.Interrupter{}, keep...)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(1)
		return db
	}
	kept := func(db *sql.DB) []string {
		k, err := litedriver.KeptStatements(ctx, db)
		require.NoError(t, err)
		return k
	}
	count := func(db *sql.DB) (n int) {
		require.NoError(t, db.QueryRowContext(ctx, countAll).Scan(&n))
		return n
	}
	imm := open("&_txlock=immediate", sp, release, rollSp)
	other := open("") // the driver's transactions
	_, err := other.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)

	// Immediate: it holds the writer from its BEGIN.
	for i := range 3 {
		tx, err := imm.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = other.ExecContext(ctx, insert, -1)
		require.ErrorIs(t, err, sqlite3.BUSY, "BEGIN IMMEDIATE took the writer")
		_, err = tx.ExecContext(ctx, insert, i)
		require.NoError(t, err)
		// Savepoints, kept, nest inside it.
		_, err = tx.ExecContext(ctx, sp)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, insert, 100+i)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, sp)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, insert, 200+i)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, rollSp) // the inner one: 200+i goes
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, release)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, release) // the outer one: 100+i stays
		require.NoError(t, err)
		if i == 1 {
			require.NoError(t, tx.Rollback())
			continue
		}
		require.NoError(t, tx.Commit())
	}
	assert.Equal(t, 4, count(other), "the two committed transactions, two rows each")
	assert.Equal(t, []string{"BEGIN IMMEDIATE", "COMMIT", release, "ROLLBACK", rollSp, sp}, kept(imm))

	// A cancelled ctx refuses a kept statement as the driver's Exec would.
	tx, err := imm.BeginTx(ctx, nil)
	require.NoError(t, err)
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	_, err = tx.ExecContext(cctx, sp)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, tx.Rollback())

	// Other options are the driver's: read-only refuses writes.
	ro, err := imm.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	_, err = ro.ExecContext(ctx, insert, -2)
	require.ErrorIs(t, err, sqlite3.READONLY)
	require.NoError(t, ro.Rollback())
	ser, err := imm.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	require.NoError(t, err)
	require.NoError(t, ser.Rollback())
	assert.Equal(t, []string{"BEGIN IMMEDIATE", "COMMIT", release, "ROLLBACK", rollSp, sp}, kept(imm),
		"read-only and serializable transactions are the driver's")
	_, err = imm.ExecContext(ctx, insert, 5)
	require.NoError(t, err, "the connection is out of every transaction: it writes")

	// Deferred: the writer stays free until the transaction writes.
	def := open("&_txlock=deferred")
	dtx, err := def.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = other.ExecContext(ctx, insert, 6)
	require.NoError(t, err, "BEGIN DEFERRED took no lock")
	require.NoError(t, dtx.Commit())
	assert.Equal(t, []string{"BEGIN DEFERRED", "COMMIT"}, kept(def))

	// Without _txlock, the driver's.
	otx, err := other.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, otx.Commit())
	assert.Empty(t, kept(other))
	assert.Equal(t, 6, count(other))
}

// TestACommitThatFailsRollsBack: a COMMIT that SQLite refuses with the
// transaction still open (a deferred foreign key broken) rolls it back, as
// the driver's does: nothing of it is stored and the connection is out of
// every transaction, so its next statements commit, and other connections
// see them.
func TestACommitThatFailsRollsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "file:" + filepath.Join(t.TempDir(), "fk.db") + "?_pragma=journal_mode(wal)&_pragma=foreign_keys(1)"
	db, err := litedriver.OpenInterruptible(name+"&_txlock=immediate", &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	reader, err := litedriver.Open(name)
	require.NoError(t, err)
	defer reader.Close()
	_, err = db.ExecContext(ctx, `CREATE TABLE p (id INTEGER PRIMARY KEY);
		CREATE TABLE c (id INTEGER PRIMARY KEY, p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, reader.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM p) + (SELECT count(*) FROM c)").Scan(&n))
		return n
	}
	for i := range 3 {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO p VALUES (?1)", 10+i)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO c VALUES (?1, 999)", i)
		require.NoError(t, err, "the key is checked at COMMIT")
		require.ErrorIs(t, tx.Commit(), sqlite3.CONSTRAINT_FOREIGNKEY)
		assert.Equal(t, 0, count(), "nothing of the failed commit is stored")

		_, err = db.ExecContext(ctx, "INSERT INTO p VALUES (?1)", 20+i)
		require.NoError(t, err, "the connection is out of the transaction")
		assert.Equal(t, 1, count(), "and its next statement committed")
		_, err = db.ExecContext(ctx, "DELETE FROM p")
		require.NoError(t, err)
	}
}

// TestABeginWaitingForTheWriterEndsWithItsContext: a BEGIN IMMEDIATE (the
// connection's own) waiting for another connection's writer, with an
// hour's busy timeout, ends when its context does, and the connection then
// begins once the writer is free.
func TestABeginWaitingForTheWriterEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "wait.db")
	defer litedriver.SetBusyTimeout(path, time.Hour)()
	name := "file:" + path + "?_pragma=journal_mode(wal)"
	db, err := litedriver.OpenInterruptible(name+"&_txlock=immediate", &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	plain, err := litedriver.Open(name)
	require.NoError(t, err)
	defer plain.Close()
	lock, err := plain.Conn(ctx)
	require.NoError(t, err)
	defer lock.Close()
	_, err = lock.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	bctx, bcancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		tx, err := db.BeginTx(bctx, nil)
		if err == nil {
			_ = tx.Rollback()
		}
		waited <- err
	}()
	waitStack(t, "TestABeginWaitingForTheWriterEndsWithItsContext", "Xgo_busy_")
	bcancel()
	require.ErrorIs(t, within(t, waited), sqlite3.BUSY, "the wait ended")
	_, err = lock.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	assert.Equal(t, []string{"BEGIN IMMEDIATE", "COMMIT"}, func() []string {
		k, err := litedriver.KeptStatements(ctx, db)
		require.NoError(t, err)
		return k
	}())
}

// TestARollbackRunsWhateverTheContextSays: the ROLLBACK of a transaction
// still open runs when the transaction's context has ended (WriteTx's fn
// cancelled it and failed) and after an Interrupter interrupted the handle
// (database/sql's transaction): nothing is stored, and the connection,
// out of the transaction, is kept (its prepared statements with it).
func TestARollbackRunsWhateverTheContextSays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "file:" + filepath.Join(t.TempDir(), "rb.db") + "?_pragma=journal_mode(wal)&_txlock=immediate"
	stops := &litedriver.Interrupter{}
	db, err := litedriver.OpenInterruptible(name, stops)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	reader, err := litedriver.Open(name)
	require.NoError(t, err)
	defer reader.Close()
	_, err = db.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, reader.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n))
		return n
	}
	kept := func() []string {
		k, err := litedriver.KeptStatements(ctx, db)
		require.NoError(t, err)
		return k
	}

	failed := errors.New("fn failed")
	wctx, wcancel := context.WithCancel(ctx)
	err = litedriver.WriteTx(wctx, db, func(w *litedriver.Writer) error {
		_, _, err := w.Exec("INSERT INTO t VALUES (1)")
		require.NoError(t, err)
		wcancel()
		return failed
	})
	require.ErrorIs(t, err, failed)
	require.NotContains(t, err.Error(), "rollback failed")
	assert.Zero(t, count())
	assert.Equal(t, []string{"BEGIN IMMEDIATE", "INSERT INTO t VALUES (1)", "ROLLBACK"}, kept(),
		"the connection was kept")

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (2)")
	require.NoError(t, err)
	stops.Interrupt()
	require.NoError(t, tx.Rollback())
	assert.Zero(t, count())
	_, err = db.ExecContext(ctx, "INSERT INTO t VALUES (3)")
	require.ErrorIs(t, err, litedriver.ErrInterrupted, "the handle is interrupted")
	assert.Equal(t, []string{"BEGIN IMMEDIATE", "INSERT INTO t VALUES (1)", "ROLLBACK"}, kept(),
		"the connection was kept, out of the transaction")
}

// TestBeginAgainAfterSQLiteRolledTheTransactionBack: once SQLite rolled a
// transaction back whole (a write in it interrupted by its context),
// BeginAgain begins a new one on the same connection, which the *sql.Tx
// still holds: its statements run in the new transaction and its Commit
// commits them, and a caller waiting for the pool's only connection
// writes only after that. Only BeginAgain can: a BEGIN the application
// runs on the *sql.Tx is refused, as any statement of the ended
// transaction; and BeginAgain changes nothing while the transaction is
// open, or on a transaction the driver began (other options).
func TestBeginAgainAfterSQLiteRolledTheTransactionBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "again.db")
	db, err := litedriver.OpenInterruptible("file:"+path+"?_pragma=journal_mode(wal)&_txlock=immediate", &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	values := func(q interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}) (vs []int) {
		rows, err := q.QueryContext(ctx, "SELECT v FROM t ORDER BY v")
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var v int
			require.NoError(t, rows.Scan(&v))
			vs = append(vs, v)
		}
		require.NoError(t, rows.Err())
		return vs
	}

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.Error(t, litedriver.BeginAgain(ctx, tx), "the transaction is still open")
	_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err, "and goes on")
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = tx.ExecContext(short, `INSERT INTO t WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 3000000000) SELECT i FROM g`)
	stop()
	require.Error(t, err)
	require.True(t, litedriver.EndedTx(err), "SQLite rolled the whole transaction back: %v", err)
	_, err = tx.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.ErrorIs(t, err, litedriver.ErrRolledBack, "the application's BEGIN is refused")

	waited := make(chan error, 1)
	go func() { // waits for the pool's only connection, which tx holds
		_, err := db.ExecContext(ctx, "INSERT INTO t VALUES (99)")
		waited <- err
	}()
	require.NoError(t, litedriver.BeginAgain(ctx, tx))
	_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (2)")
	require.NoError(t, err)
	assert.Equal(t, []int{2}, values(tx), "1 went with the first transaction; the waiter has not written")
	require.NoError(t, tx.Commit())
	require.NoError(t, <-waited)
	assert.Equal(t, []int{2, 99}, values(db))

	// A transaction the driver began (other options) is not BeginAgain's.
	tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	require.NoError(t, err)
	short, stop = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = tx.ExecContext(short, `INSERT INTO t WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 3000000000) SELECT i FROM g`)
	stop()
	require.True(t, litedriver.EndedTx(err), "%v", err)
	require.Error(t, litedriver.BeginAgain(ctx, tx))
	require.NoError(t, tx.Rollback())
	assert.Equal(t, []int{2, 99}, values(db))
}
