package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// txGuard serialises the statements run on a Tx's pgx transaction with a
// rollback the store makes from another goroutine than the one using the
// Tx: a hard Shutdown's (txState.abandon), the worker's of a WorkTx handler
// it left behind, the leak cleanup's. A pgx connection is not safe for
// concurrent use: rolled back while a statement ran on it, the two
// goroutines wrote pgconn's read buffer, its write buffer and the statement
// cache's map at once (attack54 F5: 9 race reports in 3 runs).
//
// Each statement holds mu while pgx runs it: an Exec until it returns, a
// Query's rows until they are closed (or Next ends them), a QueryRow's row
// until its Scan. An uncontended statement pays two atomic loads and the
// mutex, and allocates nothing (the store's own rows and row reuse the
// guard's, see Query and QueryRow: mu keeps one statement at a time).
//
// The store's rollback (end) first marks the transaction closed, so no new
// statement starts; when a statement holds mu it asks the server to cancel
// it (PgConn.CancelRequest, which dials a connection of its own and reads
// only what was fixed at connect: the address, the pid and the secret key),
// and waits for mu, bounded by its ctx. A statement that does not end by
// then leaves the connection untouched and the rollback reported failed; it
// still happens, on a goroutine of its own, as soon as the statement ends,
// so the connection goes back to the pool then.
//
// Rows left open (or a row not scanned) hold mu with no statement at the
// server for the cancel to end, and their owner may never close them (a
// leaked Tx, a handler left behind): the rollback waits openRowsWait for
// them, then rolls back under them. Their owner may be inside pgx then,
// reading the next row from the connection pgx's refused rollback closes
// (attack55 F3: a data race), so each call the rows make into pgx (Next,
// Scan, Close, a row's Scan) holds a second, short lock, call, and that
// rollback holds it too (bounded by its ctx: a Next in flight ends soon
// once the cancel ended the query; one that does not leaves the rollback
// to the goroutine waiting for mu). It marks the guard dead first: dead
// rows never call pgx again (pgxpool hands the closed connection to a
// goroutine of its own to destroy; pgx v5.12's destructor only reads it,
// closed already, but nothing promises that), Next ends them and Err says
// errGuardClosed. The rollback runs once: the goroutine
// still waiting for mu, woken when the rows close, finds it done (ended)
// and does not roll back a second time, racing the first on pgxpool.Tx.
// Uncontended, a row pays call's lock and unlock and an atomic load.
//
// The application's rows (Tx.Query, QueryRow) are appRows: a statement
// of the transaction while they hold mu (its user's, inside the rows
// loop, or the store's settle after a WorkTx handler left them open)
// reads what is left of them into memory under call, then takes mu from
// them (takeFromRows), so the same code works as on SQLite, where
// database/sql runs statements beside open rows; Commit and Rollback close
// them first (endApp). Before (attack56a F3) that statement failed "conn
// busy", and so did a commit, losing the transaction.
//
// call is never held while the application's own code runs: a Scan into
// a destination of its own type (an sql.Scanner, a pgx RowScanner, JSON
// into a type with its own UnmarshalJSON), whose code may run statements
// through the Tx, as it may on SQLite, decodes without call (counted in
// decoding, which end waits for instead; see appRows.Scan). Before
// (review56 R4) such a statement waited for call, which its own goroutine
// held, for ever.
//
// It guards what the store runs on the transaction: its own queries and the
// business SQL of Tx.Exec, Query and QueryRow. Statements the application
// runs directly on the pgx.Tx Tx.Pgx returns are its own to serialise (see
// Pgx).
type txGuard struct {
	db pgdb.DBTX      // the transaction, or its Citus marking wrapper
	pg *pgconn.PgConn // for CancelRequest only
	mu sync.Mutex
	// rows: mu is held by open rows (or an unscanned row). A statement of
	// the goroutine that holds them (the Tx's only user) would wait for
	// itself: when they are the application's (open), it reads them into
	// memory first (takeFromRows); the store's own are another
	// goroutine's, and it fails at once, as pgx would ("conn busy").
	rows atomic.Bool
	// open: the application's rows (Tx.Query, QueryRow) holding mu, nil
	// when none (or the store's own) do; under call.
	open *appRows
	// spilled: some of the application's rows were read into memory, and
	// may decode there with the connection's type map: a rollback from
	// another goroutine than theirs takes call before it gives the
	// connection back to the pool (see end).
	spilled atomic.Bool
	// over: the Tx's user committed or rolled back (endApp): rows read
	// into memory end (errRowsTxEnded). Set under call.
	over atomic.Bool
	// closed: the store rolled the transaction back, or is rolling it
	// back: no statement starts any more.
	closed atomic.Bool
	// call is held around each call open rows or an unscanned row make
	// into pgx, and by the rollback that end makes under them (see
	// txGuard); never while waiting for mu, nor while the application's
	// code runs (see decoding).
	call sync.Mutex
	// decoding counts the application's Scans that decode without call
	// (see appRows.Scan), with the connection's type map; idle, when not
	// nil, is closed when it drops to 0 (see lockCallIdle). Under call.
	decoding int
	idle     chan struct{}
	// dead: end rolled back under open rows (holding call): they never
	// call pgx again.
	dead atomic.Bool
	// ended: the rollback was run; the first to swap it runs it, once.
	ended atomic.Bool
	// The store's own rows and row (see Query and QueryRow): one at a time,
	// under mu.
	r   guardedRows
	row guardedRow
}

func newTxGuard(db pgdb.DBTX, tx pgx.Tx) *txGuard {
	g := &txGuard{db: db}
	if c := tx.Conn(); c != nil {
		g.pg = c.PgConn()
	}
	g.r.g, g.row.g = g, g
	return g
}

// errGuardClosed is the error of a statement the store's rollback kept
// from starting. It matches pgx.ErrTxClosed, as a statement on a pgx.Tx
// rolled back before it would: the transaction's connection is not looked
// at any more (pgTx.endedAfter), and driverErr says ErrTxDone (ErrClosed
// when the store is closing).
var errGuardClosed = fmt.Errorf("the store rolled the transaction back (a hard Shutdown, or Work leaving its handler behind): %w", pgx.ErrTxClosed)

// errRowsTxEnded is the error of the application's rows, or row, that
// were still open when their transaction ended: Commit and Rollback close
// them first, as database/sql does on SQLite (see appRows).
var errRowsTxEnded = fmt.Errorf("%w: the transaction ended (Commit or Rollback) while these rows were open, which closed them", ErrTxDone)

var errScannedTwice = errors.New("the row was scanned already")

// errRollbackBusy is why the store's rollback did not happen in time.
var errRollbackBusy = errors.New("a statement of the transaction did not end after its cancel: the rollback happens when it ends")

// enter takes mu for a statement, or says why it must not run. When the
// application's rows hold mu (a statement of the Tx's user inside its rows
// loop, or a store's statement after its handler left them open), it
// reads the rest of them into memory and takes mu from them (takeFromRows).
func (g *txGuard) enter() error {
	if g.closed.Load() {
		return errGuardClosed
	}
	// Never wait for mu: a statement of another goroutine holds it (a Tx
	// is not safe for concurrent use), and waiting behind its rows could
	// deadlock where pgx fails at once with "conn busy" (review54b F4).
	if !g.mu.TryLock() {
		if g.closed.Load() {
			return errGuardClosed
		}
		if g.rows.Load() {
			return g.takeFromRows()
		}
		return errConnBusy
	}
	if g.closed.Load() {
		g.mu.Unlock()
		return errGuardClosed
	}
	return nil
}

// takeFromRows gives a statement mu that the application's open rows
// hold: under call, so beside no call of theirs into pgx (and no end under
// them), it reads what is left of them into memory, where they serve it
// from now on, and closes them at pgx, which frees the connection; mu
// passes from them to the statement. The store's own rows, which sqlc's
// loop closes before its next statement, are open only for another
// goroutine's statement: that one fails "conn busy", as beside any
// statement running. So does one that finds call held (rows of another
// goroutine reading from the connection): it never waits for call. The
// Tx's own goroutine never holds call here: a Scan that runs the
// application's code (an sql.Scanner running a statement through the Tx)
// gives call back first (see appRows.Scan), so that statement reads the
// rows it scans ahead, and the Scan goes on from its copy of the row.
func (g *txGuard) takeFromRows() error {
	if !g.call.TryLock() {
		if g.closed.Load() {
			return errGuardClosed
		}
		return errConnBusy
	}
	r := g.open
	if r == nil || g.dead.Load() {
		g.call.Unlock()
		if g.closed.Load() {
			return errGuardClosed
		}
		return errConnBusy
	}
	r.readAhead()
	g.open = nil
	g.spilled.Store(true)
	g.rows.Store(false)
	g.call.Unlock()
	if g.closed.Load() { // the store's rollback began meanwhile: it takes mu
		g.mu.Unlock()
		return errGuardClosed
	}
	return nil
}

// errConnBusy is the error of a statement run while another statement of
// the transaction runs (from another goroutine): pgx's own.
var errConnBusy = errors.New("conn busy: another statement of the transaction is running (a Tx is not safe for concurrent use)")

func (g *txGuard) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := g.enter(); err != nil {
		return pgconn.CommandTag{}, err
	}
	defer g.mu.Unlock()
	return g.db.Exec(ctx, sql, args...)
}

// Query is the store's own: its rows are the guard's, for sqlc's loop,
// which closes them before its next statement.
func (g *txGuard) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return g.query(ctx, &g.r, sql, args...)
}

// query runs a query into r, which holds mu until it is closed.
func (g *txGuard) query(ctx context.Context, r *guardedRows, sql string, args ...any) (pgx.Rows, error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	rows, err := g.db.Query(ctx, sql, args...)
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		g.mu.Unlock()
		return nil, err
	}
	r.Rows, r.held, r.err = rows, true, nil
	g.rows.Store(true)
	return r, nil
}

// QueryRow is the store's own: its row is the guard's, which sqlc scans
// at once.
func (g *txGuard) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return g.queryRow(ctx, &g.row, sql, args...)
}

func (g *txGuard) queryRow(ctx context.Context, r *guardedRow, sql string, args ...any) pgx.Row {
	if err := g.enter(); err != nil {
		return errRow{err}
	}
	r.r, r.held = g.db.QueryRow(ctx, sql, args...), true
	g.rows.Store(true)
	return r
}

// release gives mu back after open rows.
func (g *txGuard) release() {
	g.rows.Store(false)
	g.mu.Unlock()
}

// lockOwn takes mu for the Tx's own commit or rollback, run by its user
// (under txState.mu, so never beside end): when its own rows hold mu, it
// runs without (pgx then fails it as "conn busy"): false then, and
// nothing to unlock.
func (g *txGuard) lockOwn() bool {
	if g.rows.Load() {
		return false
	}
	g.mu.Lock()
	return true
}

// end rolls the transaction back from another goroutine than its user's:
// see txGuard. ctx bounds the wait for a statement in flight.
func (g *txGuard) end(ctx context.Context, rollback func(context.Context) error) error {
	g.closed.Store(true)
	if g.mu.TryLock() {
		defer g.mu.Unlock()
		g.ended.Store(true)
		defer g.quiesce(ctx)()
		return rollback(ctx)
	}
	if g.pg != nil {
		// The statement fails with SQLSTATE 57014; the transaction stays
		// open on its connection until the rollback below.
		_ = g.pg.CancelRequest(ctx)
	}
	// Open rows hold mu rather than a statement: their owner may be
	// reading them (the cancel ends the query, and its next Next closes
	// them) or may never close them (a leaked Tx, a handler left behind):
	// the rollback waited for ever then, and so did Close (review54b F1).
	// It waits a moment for them, then rolls back under them (see txGuard):
	// pgx refuses ("conn busy") and closes the connection, which ends the
	// transaction on the server, as before the guard.
	wait := ctx
	if g.rows.Load() {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, openRowsWait)
		defer cancel()
	}
	// Not runWithin: when the rows close while the rollback below waits
	// for call, this goroutine's rollback is the one that runs, and its
	// result is the one reported.
	done := make(chan error, 1) // never blocks on a wait that gave up
	go func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.ended.CompareAndSwap(false, true) {
			return // rolled back under the rows, which have closed since
		}
		rctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		defer cancel()
		defer g.quiesce(rctx)()
		done <- rollback(rctx)
	}()
	select {
	case err := <-done:
		return err
	case <-wait.Done():
	}
	waitDone := func() error { // for that goroutine's rollback, within ctx
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", errRollbackBusy, context.Cause(ctx))
		}
	}
	if !g.rows.Load() { // a statement in flight, or rows closed just now
		return waitDone()
	}
	// Rows left open: see above.
	if !g.lockCallIdle(ctx) {
		return fmt.Errorf("%w (%w)", errRollbackBusy, context.Cause(ctx))
	}
	if !g.ended.CompareAndSwap(false, true) {
		// The rows closed meanwhile, and the goroutine waiting for mu
		// rolls back.
		g.call.Unlock()
		return waitDone()
	}
	defer g.call.Unlock()
	g.dead.Store(true)
	return rollback(context.WithoutCancel(ctx))
}

// quiesce, before end's rollback under mu, waits (bounded by ctx) for a
// call of rows read into memory (see appRows), and for their Scans
// decoding without call, which may be decoding with the connection's type
// map: closed is set, so none starts after it, and the connection the
// rollback gives back to the pool is not touched by them any more. It
// returns what gives call back. When the wait runs out (an application's
// sql.Scanner that hangs), the rollback goes on.
func (g *txGuard) quiesce(ctx context.Context) (unlock func()) {
	if !g.spilled.Load() || !g.lockCallIdle(ctx) {
		return func() {}
	}
	return g.call.Unlock
}

// lockCallIdle is lockCall once no Scan decodes without call (decoding
// is 0), waiting for both no longer than ctx: false when it did not get
// there. A Scan decoding then may be running a statement through the Tx
// (an sql.Scanner's): end's closed refuses it at once, or its cancel
// ends it, so the Scan returns.
func (g *txGuard) lockCallIdle(ctx context.Context) bool {
	for {
		if !g.lockCall(ctx) {
			return false
		}
		if g.decoding == 0 {
			return true
		}
		if g.idle == nil {
			g.idle = make(chan struct{})
		}
		idle := g.idle
		g.call.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return false
		}
	}
}

// lockCall takes call for end, waiting for the rows' call into pgx in
// flight no longer than ctx: false when it did not get it.
func (g *txGuard) lockCall(ctx context.Context) bool {
	if g.call.TryLock() {
		return true
	}
	locked := make(chan struct{})
	go func() {
		g.call.Lock()
		close(locked)
	}()
	select {
	case <-locked:
		return true
	case <-ctx.Done():
		go func() { // not taken after all: given back when it is
			<-locked
			g.call.Unlock()
		}()
		return false
	}
}

// openRowsWait is how long the store's rollback waits for rows left open
// to be closed by their owner before it closes the connection under them.
const openRowsWait = 500 * time.Millisecond

// guardedRows are rows that hold their guard's mu until closed, and its
// call during each call into pgx (see txGuard).
type guardedRows struct {
	pgx.Rows
	g    *txGuard
	held bool
	err  error // errGuardClosed once dead rows were ended
}

func (r *guardedRows) Next() bool {
	if !r.held {
		return false
	}
	g := r.g
	g.call.Lock()
	if g.dead.Load() {
		r.err = errGuardClosed
	} else if r.Rows.Next() {
		g.call.Unlock()
		return true
	} else {
		r.Rows.Close() // pgx closed them: the connection is free
	}
	r.held = false
	g.release()
	g.call.Unlock()
	return false
}

// Scan may call into pgx's network reads too: a failed Scan closes pgx's
// rows.
func (r *guardedRows) Scan(dest ...any) error {
	g := r.g
	g.call.Lock()
	defer g.call.Unlock()
	if g.dead.Load() {
		return errGuardClosed
	}
	return r.Rows.Scan(dest...)
}

func (r *guardedRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.Rows.Err()
}

func (r *guardedRows) Close() {
	if !r.held {
		return
	}
	g := r.g
	g.call.Lock()
	if g.dead.Load() {
		r.err = errGuardClosed
	} else {
		r.Rows.Close()
	}
	r.held = false
	g.release()
	g.call.Unlock()
}

// guardedRow is a QueryRow's row, holding its guard's mu until scanned
// (and its call while pgx reads it).
type guardedRow struct {
	r    pgx.Row
	g    *txGuard
	held bool
}

func (r *guardedRow) Scan(dest ...any) error {
	if !r.held {
		return errScannedTwice
	}
	g := r.g
	g.call.Lock()
	err := errGuardClosed
	if !g.dead.Load() {
		err = r.r.Scan(dest...)
	}
	r.r, r.held = nil, false
	g.release()
	g.call.Unlock()
	return err
}

// appRows are the rows of the application's Tx.Query (and, one row only,
// of its QueryRow: appRow). They stream from the connection, holding mu
// as the store's own rows do, until a statement of the transaction needs
// the connection while they are open (a write inside the rows loop, a Tx
// form, another query, the worker's settle after a WorkTx handler that
// left them open): that statement reads what is left of them into memory
// (readAhead; a QueryRow's first row only), and they serve it from there,
// as database/sql's SQLite rows go on after a statement beside them. The
// rows' values then cost their size in memory until read or closed (pgx's
// own Close reads what is left too, without keeping it). Their reads are
// of the query's snapshot, as streamed rows' are. Commit and Rollback
// close them first (endApp), as database/sql does: Next is false then,
// and Err says errRowsTxEnded.
//
// Every method runs under the guard's call: beside a statement reading
// them ahead, and beside the store's rollback from another goroutine,
// which ends them as it ends the store's own rows (dead: errGuardClosed),
// and after which rows read ahead do not decode with the connection's
// type map any more (closed; see quiesce). Only a Scan's decoding into
// the application's own types runs without call (see Scan).
type appRows struct {
	g    *txGuard
	rows pgx.Rows // streaming from the connection, until read ahead or ended
	held bool     // holds mu (streaming)
	one  bool     // a QueryRow's: only its first row is read ahead
	on   bool     // a streamed Next returned true: rows.RawValues is the row
	done bool     // ended: Next is false
	// Read ahead (ahead): the row Next moved to (cur), the rows after it
	// (next), decoded with the connection's type map and fields (kept
	// once read ahead, or scanned from a copy; see meta).
	ahead  bool
	err    error
	cur    [][]byte
	next   [][][]byte
	fields []pgconn.FieldDescription
	types  *pgtype.Map
}

// appQuery runs the application's query into fresh rows, which hold mu
// until closed or read ahead.
func (g *txGuard) appQuery(ctx context.Context, one bool, sql string, args ...any) (*appRows, error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	rows, err := g.db.Query(ctx, sql, args...)
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		g.mu.Unlock()
		return nil, err
	}
	r := &appRows{g: g, rows: rows, held: true, one: one}
	g.call.Lock()
	g.open = r
	g.rows.Store(true)
	g.call.Unlock()
	return r, nil
}

// readAhead reads what is left of streaming rows into memory and closes
// them at pgx: under call, with mu held by them, which the caller takes
// over (takeFromRows).
func (r *appRows) readAhead() {
	r.meta()
	if r.on {
		r.cur = copyRaw(r.rows.RawValues())
	}
	if !r.one || !r.on {
		for r.rows.Next() {
			r.next = append(r.next, copyRaw(r.rows.RawValues()))
			if r.one {
				break
			}
		}
	}
	r.rows.Close() // reads the rest at the server, if any: the connection is free
	r.err = r.rows.Err()
	r.rows, r.held, r.ahead = nil, false, true
}

// meta keeps the streaming rows' fields and type map, for decoding their
// values out of pgx's read buffer (read ahead, or a row's copy).
func (r *appRows) meta() {
	if r.fields != nil {
		return
	}
	r.fields = slices.Clone(r.rows.FieldDescriptions()) // pgconn's buffer, reused by the next query
	if c := r.rows.Conn(); c != nil {
		r.types = c.TypeMap()
	} else {
		r.types = pgtype.NewMap()
	}
}

// copyRaw copies a row's values out of pgx's read buffer, into one
// allocation (a NULL stays nil).
func copyRaw(raw [][]byte) [][]byte {
	n := 0
	for _, v := range raw {
		n += len(v)
	}
	buf := make([]byte, 0, n)
	row := make([][]byte, len(raw))
	for i, v := range raw {
		if v != nil {
			buf = append(buf, v...)
			row[i] = buf[len(buf)-len(v) : len(buf) : len(buf)]
		}
	}
	return row
}

// end ends the rows with why (kept unless an error is there already),
// giving mu back when they hold it: under call.
func (r *appRows) end(why error) {
	if r.err == nil {
		r.err = why
	}
	r.done, r.on, r.cur, r.next = true, false, nil, nil
	if r.held {
		r.held = false
		r.g.open = nil
		r.g.release()
	}
}

// gone is why rows read ahead must not serve any more: the store rolled
// the transaction back, or its user ended it; nil while it is open.
func (r *appRows) gone() error {
	switch g := r.g; {
	case g.dead.Load(), g.closed.Load():
		return errGuardClosed
	case g.over.Load():
		return errRowsTxEnded
	}
	return nil
}

func (r *appRows) Next() bool {
	g := r.g
	g.call.Lock()
	defer g.call.Unlock()
	switch {
	case r.done:
		return false
	case g.dead.Load():
		r.end(errGuardClosed)
		return false
	case !r.ahead:
		if r.rows.Next() {
			r.on = true
			return true
		}
		r.rows.Close() // pgx closed them: the connection is free
		r.end(r.rows.Err())
		return false
	}
	if err := r.gone(); err != nil {
		r.end(err)
		return false
	}
	if len(r.next) == 0 {
		r.end(nil)
		return false
	}
	r.cur, r.next[0], r.next = r.next[0], nil, r.next[1:]
	return true
}

// Scan decodes the row Next moved to. A failed Scan ends the rows, as
// pgx's does.
//
// Destinations of the drivers' own types (plainDests) decode under call:
// from pgx's read buffer while the rows stream, from memory once read
// ahead. Any other runs the application's code while it decodes (an
// sql.Scanner, a pgx RowScanner, JSON into a type with its own
// UnmarshalJSON), which may run a statement through the Tx, as it may on
// SQLite: that statement reads these rows ahead (takeFromRows), taking
// call, which this goroutine would hold (review56 R4: it waited for
// itself, for ever). So those decode without call, from a copy of the row
// (the statement reads the connection into pgx's buffer), counted in
// decoding, which the store's rollback waits for instead (lockCallIdle).
func (r *appRows) Scan(dest ...any) error {
	g := r.g
	g.call.Lock()
	if err := r.scannable(); err != nil {
		g.call.Unlock()
		return err
	}
	if plainDests(dest) {
		defer g.call.Unlock()
		if !r.ahead {
			return r.rows.Scan(dest...)
		}
		if err := pgx.ScanRow(r.types, r.fields, r.cur, dest...); err != nil {
			r.end(err)
			return err
		}
		return nil
	}
	v := rowView{types: r.types, fields: r.fields, raw: r.cur}
	if !r.ahead {
		r.meta()
		v = rowView{types: r.types, fields: r.fields, raw: copyRaw(r.rows.RawValues())}
	}
	g.decoding++
	g.call.Unlock()
	err := v.scan(dest)
	g.call.Lock()
	defer g.call.Unlock()
	if g.decoding--; g.decoding == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	if err != nil && !r.done {
		if r.held && !g.dead.Load() {
			r.rows.Close() // as pgx's failed Scan does
		}
		r.end(err)
	}
	return err
}

// scannable says why the rows have no row to scan, nil when they have:
// under call.
func (r *appRows) scannable() error {
	switch {
	case r.g.dead.Load():
		return errGuardClosed
	case r.done:
		if r.err != nil {
			return r.err
		}
		return errNoRow
	case !r.ahead:
		if !r.on {
			return errNoRow
		}
		return nil
	}
	if err := r.gone(); err != nil {
		r.end(err)
		return err
	}
	if r.cur == nil {
		return errNoRow
	}
	return nil
}

// rowView is one row of the application's rows out of pgx's read buffer
// (read ahead, or copied for a Scan, see appRows.Scan), as a pgx RowScanner
// destination gets it: its Scan, Values, RawValues and FieldDescriptions
// are the row's, TypeMap the connection's; Next is false, Close does
// nothing, Err is nil and Conn is nil (the rows may have left the
// connection).
type rowView struct {
	types  *pgtype.Map
	fields []pgconn.FieldDescription
	raw    [][]byte
}

var _ pgx.Rows = (*rowView)(nil)

// scan decodes the row into dest, a RowScanner alone as pgx's rows do.
func (v rowView) scan(dest []any) error {
	if len(dest) == 1 {
		if rs, ok := dest[0].(pgx.RowScanner); ok {
			if len(v.fields) != len(v.raw) {
				return fmt.Errorf("number of field descriptions must equal number of values, got %d and %d", len(v.fields), len(v.raw))
			}
			rows := v // escapes: the heap only here
			return rs.ScanRow(&rows)
		}
	}
	return pgx.ScanRow(v.types, v.fields, v.raw, dest...)
}

func (v *rowView) Close()                                       {}
func (v *rowView) Err() error                                   { return nil }
func (v *rowView) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (v *rowView) FieldDescriptions() []pgconn.FieldDescription { return v.fields }
func (v *rowView) Next() bool                                   { return false }
func (v *rowView) Scan(dest ...any) error                       { return v.scan(dest) }
func (v *rowView) RawValues() [][]byte                          { return v.raw }
func (v *rowView) Conn() *pgx.Conn                              { return nil }
func (v *rowView) TypeMap() *pgtype.Map                         { return v.types }

// Values decodes the row as pgx's rows' Values does.
func (v *rowView) Values() ([]any, error) {
	values := make([]any, 0, len(v.fields))
	for i, fd := range v.fields {
		buf := v.raw[i]
		if buf == nil {
			values = append(values, nil)
			continue
		}
		if t, ok := v.types.TypeForOID(fd.DataTypeOID); ok {
			value, err := t.Codec.DecodeValue(v.types, fd.DataTypeOID, fd.Format, buf)
			if err != nil {
				return nil, err
			}
			values = append(values, value)
			continue
		}
		switch fd.Format {
		case pgx.TextFormatCode:
			values = append(values, string(buf))
		case pgx.BinaryFormatCode:
			values = append(values, slices.Clone(buf))
		default:
			return nil, errors.New("unknown format code")
		}
	}
	return values, nil
}

// errNoRow is the error of a Scan without a row to scan (before Next,
// after the rows ended).
var errNoRow = errors.New("no row to scan: call Next first (and scan only while it returns true)")

func (r *appRows) Err() error {
	g := r.g
	g.call.Lock()
	defer g.call.Unlock()
	if r.held && r.err == nil {
		return r.rows.Err()
	}
	return r.err
}

func (r *appRows) Close() {
	g := r.g
	g.call.Lock()
	defer g.call.Unlock()
	switch {
	case r.done:
	case g.dead.Load():
		r.end(errGuardClosed)
	case r.held:
		r.rows.Close()
		r.end(r.rows.Err())
	default:
		r.end(nil)
	}
}

// endApp closes the application's rows still open when its user ends
// the transaction (Commit, Rollback), as database/sql does on SQLite: the
// streaming ones at pgx, which frees the connection for the COMMIT or
// ROLLBACK, and those read ahead end at their next call.
func (g *txGuard) endApp() {
	g.call.Lock()
	defer g.call.Unlock()
	g.over.Store(true)
	if r := g.open; r != nil && !g.dead.Load() {
		r.rows.Close()
		r.end(errRowsTxEnded)
	}
}

// appRow is the application's QueryRow: the first row of appRows, which
// its Scan reads and closes, as pgx's QueryRow does.
type appRow struct {
	r       *appRows
	err     error
	scanned bool
}

func (g *txGuard) appQueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r, err := g.appQuery(ctx, true, sql, args...)
	return &appRow{r: r, err: err}
}

func (row *appRow) Scan(dest ...any) error {
	if row.err != nil {
		return row.err
	}
	if row.scanned {
		return errScannedTwice
	}
	row.scanned = true
	r := row.r
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			r.Close()
			return errors.New("cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !r.Next() {
		if err := r.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	err := r.Scan(dest...)
	r.Close()
	if err != nil {
		return err
	}
	return r.Err()
}
