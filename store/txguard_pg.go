package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// itself; it fails at once instead, as pgx would ("conn busy").
	rows atomic.Bool
	// closed: the store rolled the transaction back, or is rolling it
	// back: no statement starts any more.
	closed atomic.Bool
	// call is held around each call open rows or an unscanned row make
	// into pgx, and by the rollback that end makes under them (see
	// txGuard); never while waiting for mu.
	call sync.Mutex
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

// errRowsOpen is the error of a statement run while rows of the same
// transaction are open: pgx refuses it too ("conn busy").
var errRowsOpen = errors.New("conn busy: rows of an earlier query of the transaction are still open (close them, or scan the QueryRow's row, first)")

var errScannedTwice = errors.New("the row was scanned already")

// errRollbackBusy is why the store's rollback did not happen in time.
var errRollbackBusy = errors.New("a statement of the transaction did not end after its cancel: the rollback happens when it ends")

// enter takes mu for a statement, or says why it must not run.
func (g *txGuard) enter() error {
	if g.closed.Load() {
		return errGuardClosed
	}
	if g.rows.Load() {
		return errRowsOpen
	}
	// Never wait for mu: a statement of another goroutine holds it (a Tx
	// is not safe for concurrent use), and waiting behind its rows could
	// deadlock where pgx fails at once with "conn busy" (review54b F4).
	if !g.mu.TryLock() {
		if g.closed.Load() {
			return errGuardClosed
		}
		return errConnBusy
	}
	if g.closed.Load() {
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
	if !g.lockCall(ctx) {
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
