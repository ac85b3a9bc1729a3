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

// lookingCtx ends with context.Canceled at the at-th look at its Err
// (SQLite's progress handler looks every 1,000 VM steps): a statement
// cut short half way without depending on timing.
type lookingCtx struct {
	context.Context
	at, looks int
}

func (c *lookingCtx) Err() error {
	if c.looks++; c.looks >= c.at {
		return context.Canceled
	}
	return nil
}

// TestWriteTxIsAllOrNone: WriteTx's statements commit together, or none of
// them does: when fn fails after a statement, when a statement fails with
// the transaction still open (a constraint: SQLite undoes that statement
// alone), and when a statement is cut short by its context (which matches
// the context's error); each time the connection is left out of any
// transaction, so the next WriteTx and database/sql's own statements run on
// it, and closing the handle finalizes the statements WriteTx kept.
func TestWriteTxIsAllOrNone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "file:" + filepath.Join(t.TempDir(), "w.db") + "?_pragma=journal_mode(wal)&_txlock=immediate"
	db, err := litedriver.OpenInterruptible(name, &litedriver.Interrupter{})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, `CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT NOT NULL, b BLOB);
		CREATE TABLE b (k TEXT PRIMARY KEY, a INTEGER NOT NULL CHECK (a > 0)) WITHOUT ROWID`)
	require.NoError(t, err)
	const (
		insA = "INSERT INTO a (v, b) VALUES (?1, ?2)"
		insB = "INSERT INTO b (k, a) VALUES (?1, ?2)"
		spin = "INSERT INTO b (k, a) SELECT ?1, i FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000000) SELECT i FROM c) WHERE i = 50000000 + ?2"
	)
	count := func() (n int) {
		require.NoError(t, db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)").Scan(&n))
		return n
	}
	pair := func(c context.Context, k string, a int64, second string) error {
		return litedriver.WriteTx(c, db, func(w *litedriver.Writer) error {
			id, n, err := w.Exec(insA, k, []byte(nil))
			if err != nil {
				return err
			}
			require.Equal(t, int64(1), n)
			require.Positive(t, id)
			_, _, err = w.Exec(second, k, a)
			return err
		})
	}

	require.NoError(t, pair(ctx, "one", 1, insB))
	assert.Equal(t, 2, count())

	refused := errors.New("refused by fn")
	err = litedriver.WriteTx(ctx, db, func(w *litedriver.Writer) error {
		_, _, err := w.Exec(insA, "two", litedriver.Blob{})
		require.NoError(t, err)
		return refused
	})
	require.ErrorIs(t, err, refused)
	assert.Equal(t, 2, count(), "fn's error: nothing stored")

	err = pair(ctx, "three", 0, insB) // the CHECK refuses the second statement alone
	require.ErrorIs(t, err, sqlite3.CONSTRAINT_CHECK)
	assert.Equal(t, 2, count(), "a failed statement: nothing stored")

	err = pair(&lookingCtx{Context: ctx, at: 100}, "four", 1, spin)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, sqlite3.INTERRUPT)
	assert.Equal(t, 2, count(), "cut short: nothing stored")

	// Out of any transaction: database/sql's statements and transactions
	// commit on the connection, and so does the next WriteTx.
	_, err = db.ExecContext(ctx, insA, "five", nil)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, insB, "five", 5)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.NoError(t, pair(ctx, "six", 6, insB))
	assert.Equal(t, 6, count())

	closed = true
	require.NoError(t, db.Close(), "the statements WriteTx kept are finalized with the connection")
}

// TestWriterQueryReadsRowsInTheTransaction: Writer.Query reads the rows of
// a statement inside WriteTx's transaction (its own writes included), each
// column as it is: a NULL BLOB nil and an empty one empty (Row.Blob, a
// copy), NULL and empty texts nil (Row.Bytes), NULL integers not Valid;
// the statement, kept on the connection, runs again with other arguments;
// an error of row's ends the query, and WriteTx's transaction with it;
// and a query cut short by its context fails matching the context's error,
// the transaction rolled back, the connection usable after.
func TestWriterQueryReadsRowsInTheTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "file:" + filepath.Join(t.TempDir(), "q.db") + "?_pragma=journal_mode(wal)&_txlock=immediate"
	db, err := litedriver.OpenInterruptible(name, &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, `CREATE TABLE r (id INTEGER PRIMARY KEY, n INTEGER, b BLOB, t TEXT)`)
	require.NoError(t, err)
	const (
		ins  = "INSERT INTO r (id, n, b, t) VALUES (?1, ?2, ?3, ?4)"
		read = "SELECT id, n, b, t FROM r WHERE id >= ?1 ORDER BY id"
		spin = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000000) SELECT i FROM c WHERE i = 50000000 + ?1"
	)
	type row struct {
		id      int64
		n       sql.NullInt64
		b       litedriver.Blob
		t, traw []byte
	}
	readAll := func(w *litedriver.Writer, from int64) []row {
		var got []row
		require.NoError(t, w.Query(read, func(r *litedriver.Row) error {
			got = append(got, row{id: r.Int64(0), n: r.NullInt64(1), b: r.Blob(2), traw: r.Bytes(3)})
			last := &got[len(got)-1]
			if last.traw != nil {
				last.t = append([]byte(nil), last.traw...) // Bytes is SQLite's memory: copied
			}
			last.traw = nil
			return nil
		}, from))
		return got
	}
	require.NoError(t, litedriver.WriteTx(ctx, db, func(w *litedriver.Writer) error {
		for _, args := range [][]any{
			{int64(1), nil, nil, nil},
			{int64(2), int64(7), litedriver.Blob{}, ""},
			{int64(3), int64(-1), []byte("bytes"), "text"},
		} {
			if _, _, err := w.Exec(ins, args...); err != nil {
				return err
			}
		}
		got := readAll(w, 1)
		require.Len(t, got, 3, "its own writes, inside the transaction")
		assert.Equal(t, row{id: 1}, got[0])
		assert.Equal(t, int64(2), got[1].id)
		assert.Equal(t, sql.NullInt64{Int64: 7, Valid: true}, got[1].n)
		assert.NotNil(t, got[1].b, "an empty BLOB is not NULL")
		assert.Empty(t, got[1].b)
		assert.Nil(t, got[1].t, "an empty text reads nil")
		assert.Equal(t, row{id: 3, n: sql.NullInt64{Int64: -1, Valid: true}, b: litedriver.Blob("bytes"), t: []byte("text")}, got[2])
		assert.Equal(t, []int64{3}, []int64{readAll(w, 3)[0].id}, "the kept statement, run again with another argument")
		return nil
	}))

	stop := errors.New("stop")
	seen := 0
	err = litedriver.WriteTx(ctx, db, func(w *litedriver.Writer) error {
		if _, _, err := w.Exec(ins, int64(4), nil, nil, nil); err != nil {
			return err
		}
		return w.Query(read, func(*litedriver.Row) error { seen++; return stop }, int64(1))
	})
	require.ErrorIs(t, err, stop)
	assert.Equal(t, 1, seen, "row's error ends the query")

	err = litedriver.WriteTx(&lookingCtx{Context: ctx, at: 100}, db, func(w *litedriver.Writer) error {
		if _, _, err := w.Exec(ins, int64(5), nil, nil, nil); err != nil {
			return err
		}
		return w.Query(spin, func(*litedriver.Row) error { return nil }, int64(1))
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, sqlite3.INTERRUPT)

	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM r").Scan(&n))
	assert.Equal(t, 3, n, "neither failed transaction stored its row")
	require.NoError(t, litedriver.WriteTx(ctx, db, func(w *litedriver.Writer) error {
		assert.Len(t, readAll(w, 1), 3, "the statements run again after a failed query")
		return nil
	}))
}

// TestWriterBindsPointers: Writer.Exec binds a *int64 and a *string as
// their values, and nil ones as NULL (sqlc types the parameters that
// nullable columns take uncast as pointers: the claim's stamp).
func TestWriterBindsPointers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := litedriver.OpenInterruptible("file:"+filepath.Join(t.TempDir(), "p.db")+"?_txlock=immediate", &litedriver.Interrupter{})
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, `CREATE TABLE p (id INTEGER PRIMARY KEY, n INTEGER, s TEXT)`)
	require.NoError(t, err)
	n, s := int64(42), "text"
	require.NoError(t, litedriver.WriteTx(ctx, db, func(w *litedriver.Writer) error {
		if _, _, err := w.Exec("INSERT INTO p (id, n, s) VALUES (?1, ?2, ?3)", int64(1), &n, &s); err != nil {
			return err
		}
		_, _, err := w.Exec("INSERT INTO p (id, n, s) VALUES (?1, ?2, ?3)", int64(2), (*int64)(nil), (*string)(nil))
		return err
	}))
	var got1, got2 struct {
		n sql.NullInt64
		s sql.NullString
	}
	require.NoError(t, db.QueryRowContext(ctx, "SELECT n, s FROM p WHERE id = 1").Scan(&got1.n, &got1.s))
	require.NoError(t, db.QueryRowContext(ctx, "SELECT n, s FROM p WHERE id = 2").Scan(&got2.n, &got2.s))
	assert.Equal(t, sql.NullInt64{Int64: 42, Valid: true}, got1.n)
	assert.Equal(t, sql.NullString{String: "text", Valid: true}, got1.s)
	assert.False(t, got2.n.Valid, "a nil *int64 binds NULL")
	assert.False(t, got2.s.Valid, "a nil *string binds NULL")
}
