package litedriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ncruces/go-sqlite3"
)

// WriteTx runs fn in a write transaction of its own on a connection of db
// (one of this driver's handles), without database/sql's transaction: a
// few statements that must commit together or not at all, on a path hot
// enough that database/sql's work around them outweighs one of them.
//
// database/sql begins every transaction with a goroutine that watches its
// context and hands each of its prepared statements out as a new *sql.Stmt,
// and the driver parses BEGIN and COMMIT again each time (sqlite3_exec).
// Here BEGIN IMMEDIATE, COMMIT, ROLLBACK and fn's statements are prepared
// once per connection and kept (see Writer.Exec); fn's statements and the
// BEGIN (a wait for another process's writer included) end with ctx as any
// statement of the driver does, and fail marked as the driver's do (their
// context's error, ErrInterrupted). When fn or the COMMIT fails, the
// transaction is rolled back, whatever ctx says, and fn's error returned:
// nothing of it is stored.
//
// It waits for the connection as a database/sql transaction would (for a
// pool of one, the writer slot: until it is free or ctx ends).
func WriteTx(ctx context.Context, db *sql.DB, fn func(w *Writer) error) error {
	return onConn(ctx, db, "WriteTx", func(c *conn) error { return c.writeTx(ctx, fn) })
}

// onConn runs fn on a connection of db (one of this driver's handles),
// waiting for one as database/sql does (until ctx ends), with a panic in it
// turned into an error that drops the connection (guard).
func onConn(ctx context.Context, db *sql.DB, what string, fn func(c *conn) error) error {
	sc, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	err = sc.Raw(func(dc any) (err error) {
		c, ok := dc.(*conn)
		if !ok {
			return fmt.Errorf("litedriver: %s on %T, not a connection of this driver", what, dc)
		}
		defer guard(c.broken, &err)
		return fn(c)
	})
	return errors.Join(err, sc.Close())
}

// Writer runs statements inside WriteTx's transaction.
type Writer struct {
	c   *conn
	ctx context.Context
}

// Exec runs query (one statement, prepared on the connection the first
// time it runs there and kept until the connection closes: pass only the
// store's own constant statements) with args bound to its parameters in
// order: nil, string, *string, []byte, Blob, int64, *int64. It returns the
// connection's last inserted rowid and the statement's changes, as
// database/sql's Result would (an application's trigger's own inserts leave
// the rowid as it was once the trigger ends).
func (w *Writer) Exec(query string, args ...any) (lastInsertID, changes int64, err error) {
	return w.ExecList(query, 0, nil, args...)
}

// ExecList is Exec for a statement whose last parameters are a list of
// slots values (an IN list): it binds args to the first parameters, then
// list's values, then NULL to the slots list leaves (NULL is in no IN
// list, so a statement prepared for a list of a given length serves any
// shorter list). len(list) must not exceed slots.
func (w *Writer) ExecList(query string, slots int, list []int64, args ...any) (lastInsertID, changes int64, err error) {
	if len(list) > slots {
		return 0, 0, fmt.Errorf("litedriver: Writer.ExecList of %d values in %d slots", len(list), slots)
	}
	c := w.c
	s, err := c.cached(query)
	if err != nil {
		return 0, 0, c.failed(w.ctx, err)
	}
	for i, a := range args {
		if err = bind(s, i+1, a); err != nil {
			_ = s.ClearBindings()
			return 0, 0, err
		}
	}
	for i := range slots {
		at := len(args) + 1 + i
		if i < len(list) {
			err = s.BindInt64(at, list[i])
		} else {
			err = s.BindNull(at)
		}
		if err != nil {
			_ = s.ClearBindings()
			return 0, 0, err
		}
	}
	raw := c.raw.Raw()
	raw.SetLastInsertRowID(0) // as the driver's Exec: no insert, no rowid
	c.sc.stmt, c.sc.started = s, false
	err = s.Exec()
	// A statement keeps its bound blobs and texts (copies in SQLite's
	// memory) until they are bound again: let them go now.
	_ = s.ClearBindings()
	if err != nil {
		return 0, 0, c.failed(w.ctx, err)
	}
	return raw.LastInsertRowID(), raw.Changes(), nil
}

// Query runs query as Exec runs its statement (prepared once per connection
// and kept; args bound as Exec binds them) and calls row with each row it
// returns, in order, until row returns an error, which Query then returns.
// The Row reads the columns of the current row only, and what it returns
// of SQLite's memory (Row.Bytes) is valid only until row returns.
func (w *Writer) Query(query string, row func(*Row) error, args ...any) error {
	return w.c.query(w.ctx, query, row, args)
}

// Query runs query (one statement that only reads, prepared on the
// connection the first time it runs there and kept until the connection
// closes: pass only the store's own constant statements) on a connection of
// db (one of this driver's handles, its reader pool) outside any
// transaction, with args bound as Writer.Exec binds them, and calls row
// with each row as Writer.Query does: no *sql.Rows, no conversion of each
// column to a driver.Value and back, no goroutine watching ctx (database/sql
// starts one for each query whose context can end). ctx ends the wait for
// the connection and the statement, as any statement of the driver (its
// error marked as theirs: the context's error, ErrInterrupted).
func Query(ctx context.Context, db *sql.DB, query string, row func(*Row) error, args ...any) error {
	return onConn(ctx, db, "Query", func(c *conn) error {
		raw := c.raw.Raw()
		old := raw.SetInterrupt(c.watch(ctx))
		defer raw.SetInterrupt(old)
		return c.query(ctx, query, row, args)
	})
}

// query is Writer.Query's and Query's: query's statement on c, its steps
// ended by ctx (c's interrupt is its stopCtx already).
func (c *conn) query(ctx context.Context, query string, row func(*Row) error, args []any) error {
	s, err := c.cached(query)
	if err != nil {
		return c.failed(ctx, err)
	}
	// Reset and cleared whatever happens: the statement is kept for the
	// next call, and a statement left stepping would keep its read open.
	defer func() {
		_ = s.Reset()
		_ = s.ClearBindings()
	}()
	for i, a := range args {
		if err = bind(s, i+1, a); err != nil {
			return err
		}
	}
	r := Row{s: s}
	c.sc.stmt, c.sc.started = s, false // as Exec: ctx stops it while it runs
	for s.Step() {
		if err := row(&r); err != nil {
			return err
		}
		if r.err != nil {
			return r.err
		}
	}
	if err := s.Err(); err != nil {
		return c.failed(ctx, err)
	}
	return nil
}

// Row is a row of Writer.Query: its columns, counted from 0.
type Row struct {
	s   *sqlite3.Stmt
	err error // a column SQLite failed to give (out of memory)
}

// Null reports whether column i is NULL.
func (r *Row) Null(i int) bool { return r.s.ColumnType(i) == sqlite3.NULL }

// Int64 is column i as an integer (0 for NULL).
func (r *Row) Int64(i int) int64 { return r.s.ColumnInt64(i) }

// NullInt64 is column i as a nullable integer.
func (r *Row) NullInt64(i int) sql.NullInt64 {
	if r.Null(i) {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: r.s.ColumnInt64(i), Valid: true}
}

// Blob is a copy of column i's bytes, as Blob.Scan reads it: nil for NULL,
// a non-nil empty Blob for an empty value.
func (r *Row) Blob(i int) Blob {
	if r.Null(i) {
		return nil
	}
	b := r.Bytes(i)
	return append(make(Blob, 0, len(b)), b...)
}

// Text is column i's bytes in SQLite's memory, valid only until the row
// ends (as Bytes), nil for NULL only: an empty value is a non-nil empty
// slice.
func (r *Row) Text(i int) []byte {
	if r.Null(i) {
		return nil
	}
	if b := r.Bytes(i); b != nil {
		return b
	}
	return []byte{}
}

// Bytes is column i's bytes in SQLite's memory, valid only until the row
// ends (as sql.RawBytes): nil for NULL and for an empty value.
func (r *Row) Bytes(i int) []byte {
	b := r.s.ColumnRawBlob(i)
	if b == nil && r.err == nil {
		r.err = r.s.Err() // nil unless SQLite failed to give the value
	}
	return b
}

func bind(s *sqlite3.Stmt, i int, a any) error {
	switch v := a.(type) {
	case nil:
		return s.BindNull(i)
	case string:
		return s.BindText(i, v)
	case *string:
		if v == nil {
			return s.BindNull(i)
		}
		return s.BindText(i, *v)
	case []byte:
		if v == nil {
			return s.BindNull(i)
		}
		return s.BindBlob(i, v)
	case Blob:
		if v == nil {
			return s.BindNull(i)
		}
		return s.BindBlob(i, v)
	case int64:
		return s.BindInt64(i, v)
	case *int64:
		if v == nil {
			return s.BindNull(i)
		}
		return s.BindInt64(i, *v)
	}
	return fmt.Errorf("litedriver: Writer.Exec cannot bind %T", a)
}

// cached returns the connection's prepared statement for query, preparing
// it the first time.
func (c *conn) cached(query string) (*sqlite3.Stmt, error) {
	if s, ok := c.stmts[query]; ok {
		return s, nil
	}
	s, tail, err := c.raw.Raw().Prepare(query)
	if err == nil && (s == nil || notBlank(tail)) {
		err = fmt.Errorf("litedriver: not one statement: %q", query)
		_ = s.Close()
	}
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = make(map[string]*sqlite3.Stmt)
	}
	c.stmts[query] = s
	return s, nil
}

func notBlank(s string) bool {
	for _, r := range s {
		switch r {
		case ' ', '\t', '\n', '\r', ';':
		default:
			return true
		}
	}
	return false
}

// The statements of a transaction itself, WriteTx's and those of
// database/sql's transactions begun with the default options on a handle
// whose name sets _txlock (see conn.BeginTx): prepared on the connection
// the first time they run there and kept (conn.cached), where the
// driver's BeginTx, Commit and Rollback would have SQLite parse and plan
// them again for every transaction (sqlite3_exec).
const (
	beginImmediate = "BEGIN IMMEDIATE"
	commitTx       = "COMMIT"
	rollbackTx     = "ROLLBACK"
)

func (c *conn) writeTx(ctx context.Context, fn func(w *Writer) error) error {
	raw := c.raw.Raw()
	if !raw.GetAutocommit() {
		return errors.New("litedriver: WriteTx on a connection inside a transaction")
	}
	old := raw.SetInterrupt(c.watch(ctx))
	defer raw.SetInterrupt(old)
	if err := c.step(ctx, beginImmediate); err != nil {
		if c.rollback() != nil { // a BEGIN that failed leaves no transaction behind
			c.broken.Store(true)
		}
		return err
	}
	err := fn(&Writer{c: c, ctx: ctx})
	if err == nil {
		if err = c.step(ctx, commitTx); err == nil {
			return nil
		}
	}
	if rerr := c.rollback(); rerr != nil {
		// The connection is left inside a transaction: no later
		// statement on it may run in it. Drop the connection.
		c.broken.Store(true)
		return fmt.Errorf("%w (and the rollback failed too, so the connection is dropped: %v)", err, rerr)
	}
	return err
}

// rollback rolls back c's transaction, if SQLite has not already (it may
// have, after a failed statement), whatever the context of the statement
// running says: a ROLLBACK is never interrupted.
func (c *conn) rollback() error {
	raw := c.raw.Raw()
	if raw.GetAutocommit() {
		return nil
	}
	old := raw.SetInterrupt(context.Background())
	defer raw.SetInterrupt(old)
	return c.run(rollbackTx)
}

// step runs one of the connection's own statements (run), its failure
// marked as a statement's of the driver (conn.failed).
func (c *conn) step(ctx context.Context, query string) error {
	if err := c.run(query); err != nil {
		return c.failed(ctx, err)
	}
	return nil
}

// run runs query, one of the connection's own statements without
// parameters (a transaction's BEGIN, COMMIT, ROLLBACK; a kept savepoint),
// prepared the first time it runs on c and kept (cached). It fails with
// SQLite's error as it is.
func (c *conn) run(query string) error {
	s, err := c.cached(query)
	if err != nil {
		return err
	}
	c.sc.stmt, c.sc.started = s, false // read when the connection's interrupt is its stopCtx
	return s.Exec()
}
