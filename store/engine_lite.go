package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/pressly/goose/v3"

	litedb "github.com/alkstore/alkstore/db/lite"
	"github.com/alkstore/alkstore/internal/litedriver" // also registers the driver as "sqlite3" (AdoptSQL)
	"github.com/alkstore/alkstore/queries"
	"github.com/alkstore/alkstore/schema"
)

// liteEngine runs the store on one SQLite file in WAL mode. Every write goes
// through a single connection, the writer slot, so writers queue in the
// process (bounded by their context) instead of failing with SQLITE_BUSY;
// reads use a pool of read-only connections and never wait for a writer.
// Connections come from litedriver, so a statement that makes the driver
// panic (SQLite out of memory) returns an error and its connection is
// replaced: the writer slot survives any failure of what it runs.
type liteEngine struct {
	writer  *sql.DB // at most one connection: the writer slot
	readers *sql.DB
	watch   *sql.DB // the change watcher's own connection
	// Prepared statements on each pool.
	writeQ, readQ *litedb.Queries
	held          atomic.Pointer[writerHold] // the Begin'd transaction holding the writer slot
	// stops interrupts the statements of the writer and the readers (a
	// hard stop; see interrupt).
	stops *litedriver.Interrupter
}

// busyTimeout covers waits on writers in other processes.
const (
	busyTimeout = "busy_timeout(10000)"
	busyWait    = 10 * time.Second
)

func openSQLite(ctx context.Context, path string, c config) (*Store, error) {
	if ownDatabase(sqliteURI(path)) {
		return nil, opErr("open", "", fmt.Errorf("%w: SQLite needs a file (in-memory databases cannot share the writer and reader connections); use a temporary file", ErrInvalidArgument))
	}
	stops := &litedriver.Interrupter{}
	// The writer's transactions (Begin, and the store's own) run their
	// BEGIN IMMEDIATE, COMMIT and ROLLBACK, and a batch's savepoint
	// statements (allOrNone), prepared once per connection (litedriver).
	writer, err := litedriver.OpenInterruptible(sqliteURI(path, "_txlock=immediate",
		"_pragma="+busyTimeout, "_pragma=journal_mode(wal)", "_pragma=synchronous(normal)"), stops,
		queries.SavepointBatch, queries.ReleaseBatch, queries.RollbackToBatch)
	if err != nil {
		return nil, opErr("open", "", err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxIdleTime(0)
	writer.SetConnMaxLifetime(0)

	m := migration{
		dialect: goose.DialectSQLite3,
		files:   schema.SQLite,
		table:   schema.SQLiteVersionTable,
		cli:     "goose -table " + schema.SQLiteVersionTable + " -dir schema/lite sqlite3 " + path + " up",
		objects: func(ctx context.Context) (schemaObjects, error) { return liteSchemaObjects(ctx, writer) },
		guarded: true,
	}
	err = connectWriter(ctx, writer)
	if err == nil {
		err = migrateOrCheck(ctx, writer, m, c.migrate)
	}
	if err != nil {
		writer.Close()
		return nil, readOnlyDirErr(path, err)
	}

	readers, err := litedriver.OpenInterruptible(sqliteURI(path, "_pragma="+busyTimeout, "_pragma=query_only(1)"), stops)
	if err != nil {
		writer.Close()
		return nil, opErr("open", "", err)
	}
	readers.SetMaxOpenConns(max(c.readConns, 1))
	readers.SetMaxIdleConns(max(c.readConns, 1))
	watch, err := litedriver.Open(sqliteURI(path, "_pragma="+busyTimeout, "_pragma=query_only(1)"))
	if err != nil {
		writer.Close()
		readers.Close()
		return nil, opErr("open", "", err)
	}
	watch.SetMaxOpenConns(1)
	e := &liteEngine{writer: writer, readers: readers, watch: watch, stops: stops}
	// SQLite parses each statement on its first run on a connection, not
	// here: most stores run a few dozen of them.
	pctx := litedriver.PrepareOnFirstRun(ctx)
	if e.writeQ, err = litedb.Prepare(pctx, writer); err == nil {
		e.readQ, err = litedb.Prepare(pctx, readers)
	}
	if err != nil {
		e.close(false)
		return nil, opErr("open", "", err)
	}
	return newStore(e, c, ""), nil
}

// connectWriter opens the writer connection. Its journal_mode(wal) pragma
// needs the file's exclusive lock, and on a file that other processes open
// at the same moment SQLite may refuse it at once with SQLITE_BUSY instead
// of waiting (the busy timeout does not cover every lock upgrade), so a
// busy connect is tried again, within the busy timeout and ctx.
func connectWriter(ctx context.Context, writer *sql.DB) error {
	deadline := time.Now().Add(busyWait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := writer.PingContext(ctx)
		if err == nil || !errors.Is(err, sqlite3.BUSY) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// readOnlyDirErr is Open's error for err, a failure of the writer's first
// statements (its journal_mode(wal) pragma, the migration). SQLite reports
// a database directory it cannot create the WAL's files in as "attempt to
// write a readonly database", which says neither what nor where: when the
// directory refuses a file of ours too, the error says so, naming it.
func readOnlyDirErr(path string, err error) error {
	if !errors.Is(err, sqlite3.READONLY) {
		return opErr("open", "", err)
	}
	file := sqliteFileName(path)
	dir := filepath.Dir(file)
	why := dirUnwritable(dir)
	if why == nil {
		return opErr("open", "", err)
	}
	base := filepath.Base(file)
	return opErr("open", file, fmt.Errorf("the directory %q is not writable (%v): SQLite's WAL mode needs to create %s-wal and %s-shm beside the database: %w",
		dir, why, base, base, err))
}

// dirUnwritable reports why a file cannot be created in dir (nil when one
// can), by creating one and removing it.
func dirUnwritable(dir string) error {
	f, err := os.CreateTemp(dir, ".alkstore-probe-*")
	if err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			return pe.Err // "permission denied", "read-only file system": the path is said once
		}
		return err
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// sqliteFileName is the file a path or "file:" URI (Open's SQLite target)
// names, read as ownDatabase reads it.
func sqliteFileName(path string) string {
	rest, ok := strings.CutPrefix(path, "file:")
	if !ok {
		return path
	}
	rest, _, _ = strings.Cut(rest, "#")
	if authority, ok := strings.CutPrefix(rest, "//"); ok {
		rest = ""
		if i := strings.IndexByte(authority, '/'); i >= 0 {
			rest = authority[i:]
		}
	}
	name, _, _ := strings.Cut(rest, "?")
	return uriUnescape(name)
}

// liteSchemaObjects reads the main database's table list (queries/lite's
// SchemaObjects, a PRAGMA sqlc cannot generate) for what Open looks at.
func liteSchemaObjects(ctx context.Context, db *sql.DB) (schemaObjects, error) {
	var objs schemaObjects
	rows, err := db.QueryContext(ctx, queries.SchemaObjects)
	if err != nil {
		return objs, err
	}
	defer rows.Close()
	for rows.Next() {
		var schemaName, name, kind string
		var ncol, wr, strict int64
		if err := rows.Scan(&schemaName, &name, &kind, &ncol, &wr, &strict); err != nil {
			return objs, err
		}
		switch name {
		case schema.SQLiteVersionTable:
			objs.versionTable = true
		case "alk_events":
			objs.tables = true
		case "goose_db_version":
			objs.defaultTable = name
		}
	}
	return objs, rows.Err()
}

// sqliteURI turns a path or a file: URI into a file: URI with params added.
func sqliteURI(path string, params ...string) string {
	uri := path
	if !strings.HasPrefix(path, "file:") {
		uri = "file:" + (&url.URL{Path: path}).EscapedPath()
	}
	// SQLite ignores a URI's fragment; the store's parameters appended
	// after it were ignored with it, and the database opened without WAL
	// or the busy timeout (attackfix60).
	uri, _, _ = strings.Cut(uri, "#")
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + strings.Join(params, "&")
}

// ownDatabase reports whether SQLite gives each connection that opens uri
// (a "file:" URI, as sqliteURI makes it) a database of its own, which the
// writer, the readers and the watcher cannot share: an in-memory one (the
// file name ":memory:", or a mode=memory parameter) or a temporary one
// (an empty file name). It reads uri as SQLite does (sqlite3ParseUri): an
// authority ("//localhost") is skipped, the name ends at the first "?" or
// "#", parameters are split at "&" and "=" before %HH escapes are decoded,
// a %00 ends the part it is in, and names and values compare byte for
// byte ("mode=MEMORY" is an error there, not a memory database). A real
// file whose name merely contains "memory" is not one.
func ownDatabase(uri string) bool {
	rest := strings.TrimPrefix(uri, "file:")
	rest, _, _ = strings.Cut(rest, "#")
	if authority, ok := strings.CutPrefix(rest, "//"); ok {
		rest = ""
		if i := strings.IndexByte(authority, '/'); i >= 0 {
			rest = authority[i:]
		}
	}
	name, query, _ := strings.Cut(rest, "?")
	if name = uriUnescape(name); name == "" || name == ":memory:" {
		return true
	}
	for param := range strings.SplitSeq(query, "&") {
		key, value, _ := strings.Cut(param, "=")
		if uriUnescape(key) == "mode" && uriUnescape(value) == "memory" {
			return true
		}
	}
	return false
}

// uriUnescape decodes the %HH escapes of one part of a SQLite URI as
// SQLite does: a "%" not followed by two hex digits stays as it is, and
// %00 ends the part.
func uriUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				if c == 0 {
					break
				}
				b.WriteByte(byte(c))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (e *liteEngine) kind() string { return "lite" }

func (e *liteEngine) readOps() ops  { return liteOps{q: e.readQ, readers: e.readers} }
func (e *liteEngine) writeOps() ops { return liteOps{q: e.writeQ, db: e.writer} }

// begin starts BEGIN IMMEDIATE on the writer slot. ctx bounds only the wait
// to begin (for the slot, and for other processes' writers), as on
// Postgres, where pgx forgets Begin's ctx once the transaction began:
// database/sql would roll the transaction back whenever the ctx it began
// with ends, so it begins with a ctx that ctx cancels only until begin
// returns.
func (e *liteEngine) begin(ctx context.Context) (driverTx, error) {
	in := new(litedriver.Interrupter) // for abandon
	bctx, cancel := context.WithCancel(litedriver.WithTxInterrupter(context.WithoutCancel(ctx), in))
	stop := context.AfterFunc(ctx, cancel)
	tx, err := e.writer.BeginTx(bctx, nil)
	if !stop() { // ctx ended during begin, which bctx followed
		if err == nil {
			_ = tx.Rollback()
		}
		return nil, cmp.Or(ctx.Err(), err)
	}
	if err != nil {
		return nil, err
	}
	return liteTx{tx: tx, o: &liteOps{q: e.writeQ.WithTx(tx), tx: tx}, release: e.hold(ctx), stop: in}, nil
}

// wrapTx adopts a caller's transaction, which may be on another *sql.DB:
// its statements are prepared by the caller's connection as they run.
func (e *liteEngine) wrapTx(tx *sql.Tx) driverTx {
	return liteTx{tx: tx, o: &liteOps{q: litedb.New(tx), tx: tx, adopted: true}, adopted: true}
}

// interrupt ends the statements running on the writer and the readers (a
// hard stop), a wait for another process's lock included, and refuses any
// they start from now on: each fails with SQLite's error marked
// litedriver.ErrInterrupted, and SQLite rolls an interrupted write back
// (with its transaction), so the operation stores nothing; a commit already
// reached still runs. The store is closing (driverErr says ErrClosed). An
// adopted transaction's connection is the application's: not interrupted.
func (e *liteEngine) interrupt() { e.stops.Interrupt() }

// endLockWaits ends the waits of the writer's and the readers' statements
// in SQLite's busy handler, for a lock that another connection (another
// process's, an adopted transaction's) holds, which the store cannot end:
// each fails at once, marked litedriver.ErrInterrupted, and stores nothing.
// A wait for the writer slot (the one connection of the writer pool, which
// a transaction of this store holds: a WorkTx handler's, a Begin) is
// database/sql's, not SQLite's: it goes on.
func (e *liteEngine) endLockWaits() { e.stops.EndLockWaits() }

func (e *liteEngine) lockWaitsEnded() (writes, reads bool) {
	w, r := e.stops.LockWaitsEnded()
	return w > 0, r > 0
}

// close closes the pools; database/sql closes a connection still in a
// transaction when that transaction ends.
func (e *liteEngine) close(bool) {
	for _, q := range []*litedb.Queries{e.readQ, e.writeQ} {
		if q != nil {
			_ = q.Close()
		}
	}
	e.watch.Close()
	e.readers.Close()
	e.writer.Close()
}

// liteOps maps the store's operations onto the generated SQLite queries.
type liteOps struct {
	q  *litedb.Queries
	db *sql.DB // the writer, for operations that need their own transaction; nil inside one
	tx *sql.Tx // the caller's transaction (a Tx's), for a batch's savepoint; nil outside one
	// readers is the reader pool, for reads outside a transaction that run
	// on it without database/sql's rows (the stream pages: readPage); nil
	// for writes and inside a transaction.
	readers *sql.DB
	// adopted: tx is the caller's own (AdoptSQL), perhaps begun deferred,
	// where a read before a batch's insert would pin a snapshot that a
	// commit by another process turns into SQLITE_BUSY at the insert:
	// EnqueueMany returns its ids by RETURNING there (see enqueueMany).
	adopted bool
}

// queryWrite is the context for one write with RETURNING of o's, run with
// ctx: outside a transaction (o.db), litedriver.QueryWrite's, so that the
// call reports what the statement did (stored, or failed and stored
// nothing) even when ctx ends as it runs. A new one for each statement.
func (o liteOps) queryWrite(ctx context.Context) context.Context {
	if o.db == nil {
		return ctx
	}
	return litedriver.QueryWrite(ctx)
}

// atomically runs fn in one transaction: the caller's, or a new one on the
// writer slot.
func (o liteOps) atomically(ctx context.Context, fn func(q *litedb.Queries) error) error {
	if o.db == nil {
		return fn(o.q)
	}
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(o.q.WithTx(tx)); err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) &&
			(errors.Is(err, sql.ErrTxDone) || errors.Is(tx.Rollback(), sql.ErrTxDone)) {
			// database/sql rolled the transaction back when ctx ended
			// between two statements, and the next one failed on that
			// ("transaction has already been committed or rolled back",
			// or, prepared for the transaction just before, "statement
			// is closed"): say why.
			return cerr
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, sql.ErrTxDone) {
			// database/sql rolled the transaction back when ctx ended
			// after fn's statements: nothing of fn is stored.
			return cerr
		}
		return err
	}
	return nil
}

// allOrNone runs fn all or none: in a transaction of its own on the writer
// slot (atomically), or inside the caller's transaction after a savepoint
// that a failure rolls back to, so a batch form (EnqueueManyTx,
// PublishManyTx) that fails half way leaves nothing of itself in the
// caller's transaction, which goes on (SQLite keeps a transaction open
// after a failed statement). A savepoint is in-process and cheap; the
// batch's own statements are what it costs. A trigger's RAISE(ROLLBACK)
// ends the caller's transaction itself, savepoint and all: fn's error is
// returned. So does a statement that ctx interrupted: SQLite then rolls
// back the whole transaction, and the error says so. need says a partial
// write is possible (more than one statement); without it, inside a
// transaction, fn just runs.
func (o liteOps) allOrNone(ctx context.Context, need bool, fn func(q *litedb.Queries) error) error {
	if o.db != nil || o.tx == nil || !need {
		return o.atomically(ctx, fn)
	}
	if _, err := o.tx.ExecContext(ctx, queries.SavepointBatch); err != nil {
		return err
	}
	// The release and the rollback run even when ctx ended: a release that
	// database/sql refused would leave the batch in the caller's transaction
	// although the call failed.
	sctx := context.WithoutCancel(ctx)
	err := fn(o.q)
	if err == nil {
		if _, err = o.tx.ExecContext(sctx, queries.ReleaseBatch); err == nil {
			return nil
		}
	}
	if _, rerr := o.tx.ExecContext(sctx, queries.RollbackToBatch); rerr != nil {
		if !errors.Is(rerr, litedriver.ErrRolledBack) && !(o.adopted && txGone(o.tx)) {
			// The transaction is open and the batch may be half in it.
			return fmt.Errorf("%w (and rolling back to the batch's savepoint failed, so part of the batch may be in the transaction: roll it back: %v)", err, rerr)
		}
		// The savepoint went with the transaction: SQLite rolled it back
		// whole (an interrupted write, or a failure for memory, disk or
		// locks). fn's error is the cause; the rollback's ("no such
		// savepoint", or the driver's refusal) adds nothing. The Tx says
		// once that the transaction is gone (Tx.failed): the store's own
		// connection marked fn's error so, an adopted one is probed.
		if o.adopted || litedriver.EndedTx(err) || errors.Is(err, litedriver.ErrRolledBack) {
			return err
		}
		return fmt.Errorf("%w; %w", err, litedriver.ErrRolledBack)
	}
	_, _ = o.tx.ExecContext(sctx, queries.ReleaseBatch)
	return err
}

// txGone tells whether tx, an adopted transaction on the caller's
// connection, no longer exists in SQLite: a BEGIN asks (ProbeTransaction),
// refused inside a transaction; what it began is rolled back at once.
func txGone(tx *sql.Tx) bool {
	c := context.Background() // the failed statement's ctx may have ended; the probe runs in the process
	if _, perr := tx.ExecContext(c, queries.ProbeTransaction); perr != nil {
		return false // refused inside a transaction: it is still open
	}
	_, _ = tx.ExecContext(c, queries.EndProbe)
	return true
}

// insertEach runs insert for indexes 0..n-1 all or none (SQLite's form of
// a multi-row insert; see allOrNone) and returns the ids in order. need is
// allOrNone's: more than one statement may run.
func (o liteOps) insertEach(ctx context.Context, n int, need bool, insert func(q *litedb.Queries, i int) (int64, error)) ([]int64, error) {
	ids := make([]int64, n)
	err := o.allOrNone(ctx, need, func(q *litedb.Queries) error {
		for i := range ids {
			id, err := insert(q, i)
			if err != nil {
				return err
			}
			ids[i] = id
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// liteTx is a database/sql transaction on the SQLite file, begun by the
// store on the writer slot or adopted.
type liteTx struct {
	tx      *sql.Tx
	o       *liteOps // a pointer, as pgTx's: ops() allocates nothing
	release func()   // the writer slot's hold record (see writerHold)
	adopted bool     // on the caller's connection, not litedriver's
	// stop ends the statement running in the transaction, for abandon (nil
	// on an adopted transaction: its connection is the caller's).
	stop *litedriver.Interrupter
}

// endedAfter tells whether SQLite rolled the transaction back whole (a
// write in it interrupted, or failed for memory, disk or locks). On the
// store's connections litedriver marks the statement that failed so
// (litedriver.EndedTx) and refuses every later statement, with
// litedriver.ErrRolledBack. An adopted transaction's connection is the
// caller's: a BEGIN asks it (ProbeTransaction), and what it began is
// rolled back at once.
func (t liteTx) endedAfter(err error) error {
	if errors.Is(err, litedriver.ErrRolledBack) || litedriver.EndedTx(err) {
		return litedriver.ErrRolledBack
	}
	if !t.adopted || !txGone(t.tx) {
		return nil
	}
	return litedriver.ErrRolledBack
}

func (t liteTx) ops() ops { return t.o }

// beginAgain begins a new transaction on t's connection, which still
// holds the writer slot, once SQLite rolled t's back whole (see
// Tx.beginAgain).
func (t liteTx) beginAgain(ctx context.Context) error {
	if t.adopted {
		return errors.New("an adopted transaction's connection is the caller's")
	}
	return litedriver.BeginAgain(ctx, t.tx)
}

// tryCommit commits t, and leaves it open, on its connection, when the
// COMMIT failed (litedriver.TryCommit; see Tx.commitOrKeep): its commit
// then only ends it (with the writer slot's hold) once it succeeded.
func (t liteTx) tryCommit(ctx context.Context) error {
	if t.adopted {
		return errors.New("an adopted transaction's connection is the caller's")
	}
	return litedriver.TryCommit(ctx, t.tx)
}

// rollbackKeep rolls t back on its connection, which keeps the writer
// slot, for beginAgain (litedriver.RollbackKeep).
func (t liteTx) rollbackKeep(ctx context.Context) error {
	if t.adopted {
		return errors.New("an adopted transaction's connection is the caller's")
	}
	return litedriver.RollbackKeep(ctx, t.tx)
}

func (t liteTx) commit(context.Context) error {
	defer t.release()
	return t.tx.Commit()
}

func (t liteTx) rollback(context.Context) error {
	defer t.release()
	return t.tx.Rollback()
}

// abandon rolls back a transaction whose owner may still run a statement
// in it, one whose context may never end (a WorkTx handler left behind
// that ignores its context, hung in a query): database/sql's Rollback
// waits for that statement, which held the writer slot until it ended, so
// Work never returned (review54a). The statement is interrupted first (at
// SQLite's next progress check), and fails; SQLite rolls back the
// transaction of an interrupted write, and the ROLLBACK runs.
func (t liteTx) abandon(ctx context.Context) error {
	if t.stop != nil {
		t.stop.Interrupt()
	}
	return t.rollback(ctx)
}

// abandonKeeping is abandon for a transaction that made writes which must
// outlive it (see Tx.keepOnAbandon): after the interrupt, and once the
// statement its owner ran in it returned, it rolls the transaction back
// on its connection and begins a new one there (litedriver.RestartTx),
// where keep redoes those writes with ctx before the commit; the writer
// slot is not given up in between, so no other write of the process comes
// first. The interrupt stays on for every other statement (the owner's,
// which may still try). When the restart or keep fails, the new
// transaction is rolled back: abandon's outcome, as before.
func (t liteTx) abandonKeeping(ctx context.Context, keep func(ctx context.Context, o ops) error) error {
	if t.stop == nil {
		return t.abandon(ctx)
	}
	t.stop.Interrupt()
	own := litedriver.Unstopped(ctx)
	if err := litedriver.RestartTx(own, t.tx); err != nil {
		return t.rollback(ctx) // outside any transaction now, or dropped: nothing to do
	}
	if err := keep(own, t.o); err != nil {
		return t.rollback(ctx)
	}
	_ = t.commit(ctx) // ended either way: a COMMIT that failed rolls back
	return nil
}

func (t liteTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t liteTx) query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (t liteTx) queryRow(ctx context.Context, query string, args ...any) Row {
	return scanRow{sqlRow{t.tx.QueryRowContext(ctx, query, args...)}}
}

// sqlRows adapts *sql.Rows to Rows (whose Close reports through Err).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// Scan assigns destinations that run the application's code (an
// sql.Scanner) once database/sql gave the connection back, so that code
// may run statements through the Tx (see scanApart).
func (r sqlRows) Scan(dest ...any) error {
	if plainDests(dest) {
		return r.Rows.Scan(dest...)
	}
	return scanApart(r.Rows.Scan, r.Rows.Columns, dest)
}

// sqlRow is a business QueryRow's row, scanned as sqlRows are.
type sqlRow struct{ *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	if plainDests(dest) {
		return r.Row.Scan(dest...)
	}
	return scanApart(r.Row.Scan, nil, dest)
}
