package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// Tx is a database transaction that alkstore operations and business SQL
// share: everything written through it commits or rolls back together.
//
// Get one from Store.InTx (the closure form, which always ends it),
// Store.Begin (end it with Commit; `defer tx.Rollback(ctx)` is the idiom,
// since Rollback after Commit is a no-op), or Store.AdoptPgx / AdoptSQL to
// work inside a transaction the caller began and will end. A Tx is not safe
// for concurrent use, like the driver transaction under it.
//
// Exec, Query and QueryRow run business SQL on either engine ($1
// placeholders work on both). A Query's rows (and a QueryRow's row not
// scanned yet) may stay open while other statements run through tx, on
// both engines: a write inside the rows loop, a Tx form (EnqueueTx per
// row), another query. On PostgreSQL, whose connection carries one result
// at a time, the statement that needs it first reads what is left of the
// open rows into memory, and they go on from there: the rest of the
// result then costs its size in memory until read or closed (close big
// rows before the next statement, or page them, to keep them streaming).
// Commit and Rollback, InTx's end and a WorkTx handler's completion close
// rows still open, as database/sql does on SQLite: their Next is false,
// and Err (or the row's Scan) fails with an error matching ErrTxDone.
// A Scan destination's own code (an sql.Scanner; on PostgreSQL also a pgx
// RowScanner, or a type decoding JSON itself) may run statements through
// tx as well, on both engines. On PostgreSQL a pgx RowScanner destination
// scans these rows as pgx's own, streaming or read into memory: the rows
// it is handed are its row (Scan, Values, RawValues, FieldDescriptions;
// Next is false, Conn nil). Statements run on the pgx.Tx itself (Pgx,
// AdoptPgx) are pgx's, which the store does not see: beside rows still
// streaming, pgx refuses them at once ("conn busy": nothing is sent, and
// the transaction goes on), as it does beside its own rows; rows a
// statement through tx has read into memory do not hold the connection.
// Close the rows before them (or run the statement through tx), and
// before you end an adopted transaction.
// For code written against a driver, such as
// sqlc-generated queries, Pgx and SQL hand out the driver transaction
// itself: statements run on it are part of tx.
//
// A statement that fails can end the transaction: PostgreSQL aborts it
// (every later statement fails, SQLSTATE 25P02), and SQLite rolls it back
// whole when a write in it is interrupted by its ctx or fails for memory,
// disk or locks. A statement its ctx cuts short fails with an error
// matching ctx.Err() (context.Canceled or context.DeadlineExceeded) on both
// engines; pgx stops it by closing the connection, which rolls the
// transaction back too. When the failure ended the transaction, its error
// matches ErrTxDone as well, and every later use of tx (the Tx forms,
// Exec, Query, QueryRow, Commit) fails with an error matching ErrTxDone
// that says why, instead of running each statement on its own outside the
// transaction (SQLite) or failing with "conn closed" (PostgreSQL). On an
// adopted SQLite transaction the store finds out when one of its own calls
// on tx fails; after a statement of yours failed on the *sql.Tx, check its
// error yourself.
type Tx struct {
	h *txHandle
}

// txHandle is what the caller's Tx values point at. When it becomes
// unreachable while its transaction is still open, a cleanup rolls the
// transaction back so no writer slot or pooled connection leaks.
type txHandle struct {
	store *Store
	state *txState
	// lent: the Tx handed to a TxHandler, which must not end it (Commit
	// and Rollback refuse); it shares the worker's transaction.
	lent bool
	// job is the claimed job that TxHandler runs for (lent only): a
	// Queue.CancelTx of it through this Tx settles it as Job.CancelTx does
	// (see Queue.CancelTx).
	job *Job
}

// errLent is what Commit and Rollback of a TxHandler's Tx return.
var errLent = fmt.Errorf("%w: a transactional handler must not end its transaction: "+
	"its worker commits it with the job's completion, or rolls it back when the handler fails", ErrInvalidArgument)

// lend is tx as a TxHandler running j gets it: the same transaction, which
// it may use but not end.
func (tx Tx) lend(j *Job) Tx {
	if tx.h == nil {
		return tx
	}
	return Tx{h: &txHandle{store: tx.h.store, state: tx.h.state, lent: true, job: j}}
}

// handlerJob is the job whose TxHandler was lent tx, when it is job id of
// q and its claim is not spent yet; else nil.
func (tx Tx) handlerJob(q *Queue, id int64) *Job {
	if tx.h == nil || tx.h.job == nil {
		return nil
	}
	j := tx.h.job
	if j.ID != id || j.q == nil || j.q.s != q.s || j.q.name != q.name || j.settled() {
		return nil
	}
	return j
}

// txState is reachable from the cleanup, so it must not point back at the
// txHandle.
type txState struct {
	mu     sync.Mutex
	dtx    driverTx
	done   bool
	commit bool // how it ended
	owned  bool // begun by the store, so the store must end it
	// abandoned: the store rolled it back: its shutdown (see Shutdown), or
	// Work leaving a WorkTx handler behind (whose lent Tx cannot Commit).
	abandoned bool
	// shut: the store's hard stop ends it (an application's transaction,
	// marked as the stop begins, see lifecycle.stopHard) or its shutdown
	// rolled it back: no statement or Commit starts in it any more, and
	// its later uses fail with ErrClosed. Read without mu.
	shut atomic.Bool
	// handler: a handler's transaction the store began for it (WorkTx,
	// RunJobTx, ConsumeTx), which its runner ends, settling the job or
	// committing the offset in it. A hard stop leaves it to them (the
	// handler's cancelled context ends it) until the loops returned; the
	// application's transactions it rolls back at once (see shutdown).
	handler bool
	// lost: SQLite rolled the transaction back under the driver, which
	// would run later statements outside it (driverTx.endedAfter); nothing
	// more runs in it.
	lost error
	log  *slog.Logger
	life *lifecycle // tracks the transaction while it is open (owned only)
	// held: its end may let the settled horizon pass (see horizonRelease);
	// begin is its begin number there, taken before its BEGIN.
	held  *horizonRelease
	begin uint64
	// afterCommit runs once the transaction committed: wakes for what it
	// wrote. An adopted transaction never runs it (the caller commits).
	afterCommit []func()
	// afterRollback runs once the transaction ended without committing
	// (Rollback, a failed Commit, the shutdown or the leak cleanup rolled
	// it back), outside mu: a settle in it gives its job's claim back.
	afterRollback []func()
	// keep redoes, on SQLite, writes of the transaction that must outlive
	// its rollback by the store from another goroutine (abandon): see
	// Tx.keepOnAbandon.
	keep func(ctx context.Context, o ops) error
	// savepoints are the transaction's savepoints, oldest first, as the
	// store saw them made (trackSavepoints): a rollback to one drops what
	// was to follow the commit of the writes made since, and runs what
	// was to follow their rollback.
	savepoints []savepointMark
	// savepoint0 holds the first savepoint's mark, so that the one a
	// transactional handler runs after on SQLite costs no allocation.
	savepoint0 [1]savepointMark
}

// savepointMark is a savepoint of a transaction: its name, as the engine
// compares names (see eachSavepoint), and how many afterCommit and
// afterRollback actions were registered before it was made.
type savepointMark struct {
	name               string
	commits, rollbacks int
}

// errAdopted is why an adopted Tx does not end its transaction.
var errAdopted = fmt.Errorf("%w: the transaction is adopted: whoever began it ends it (Commit or Rollback on the pgx.Tx or *sql.Tx given to AdoptPgx or AdoptSQL)", ErrInvalidArgument)

// rollbackTimeout bounds a rollback that runs after the caller's context was
// cancelled (a rollback must still happen to release the connection).
const rollbackTimeout = 5 * time.Second

// runWithin runs f on a goroutine of its own and waits for it until ctx is
// done: ok is false then, and f runs on to its end unwaited for, its
// result dropped. The rollbacks the store makes from another goroutine
// than the Tx's user wait this way (endAbandonedTx; txGuard.end waits
// alike, by hand, as it needs the result later): what they wait for may
// never end (a statement that ignores its cancel, a hung
// handler holding its Tx), and they must not hang with it.
func runWithin[T any](ctx context.Context, f func() T) (v T, ok bool) {
	done := make(chan T, 1) // f never blocks on a wait that gave up
	go func() { done <- f() }()
	select {
	case v = <-done:
		return v, true
	case <-ctx.Done():
		return v, false
	}
}

// Begin starts a transaction. On SQLite it is a write transaction
// (BEGIN IMMEDIATE) on the writer slot, held until the transaction ends: an
// auto-commit write or another Begin made while your own Tx is open waits
// for that Tx to end, so on the same goroutine it waits until its context
// expires (on Postgres it runs on another connection). With the ctx InTx
// hands its function, the library can tell and fails at once with
// ErrInvalidArgument instead; with a Begin'd Tx it cannot, so use the Tx
// forms (PublishTx, EnqueueTx, ...) inside a transaction. When a write has
// waited a second behind a Begin'd Tx, the store logs a warning (once per
// transaction) naming the file and line that began it.
//
// ctx bounds only the wait to begin (for a pooled connection, or the writer
// slot): cancelling it afterwards does not end the transaction, on either
// engine. Each statement is bounded by its own ctx.
//
// End every transaction with Commit or Rollback. One that is dropped while
// open is rolled back when it is garbage-collected; the store forces a
// collection when another operation has waited 100 ms for a connection or
// the writer slot while a transaction is open, so a leak holds them only
// that long once something needs them.
func (s *Store) Begin(ctx context.Context) (Tx, error) {
	return s.begin(ctx, false)
}

// begin is Begin; handler marks a handler's own transaction (see
// txState.handler).
func (s *Store) begin(ctx context.Context, handler bool) (Tx, error) {
	if s == nil {
		return Tx{}, opErr("begin", "", errNoStore)
	}
	if err := s.check(); err != nil {
		return Tx{}, opErr("begin", "", err)
	}
	if err := s.writerHeldBy(ctx); err != nil {
		return Tx{}, opErr("begin", "", err)
	}
	// The wait to begin counts as a running operation: a graceful Shutdown
	// waits for it, and a hard one interrupts it (on SQLite it may wait for
	// another process's write lock, up to the busy timeout, holding the
	// connection whose statements the store closes last).
	if err := s.life.enterOp(); err != nil {
		return Tx{}, opErr("begin", "", err)
	}
	disarm, unwatch := s.life.whileWaiting(), s.watchWriterSlot("begin", "")
	begin := s.held.begin() // before BEGIN: see horizonRelease
	dtx, err := s.eng.begin(ctx)
	disarm()
	unwatch()
	s.life.leaveOp()
	if err != nil {
		return Tx{}, opErr("begin", "", s.driverErr(err))
	}
	if b, ok := dtx.(interface {
		begun(*horizonRelease, uint64)
	}); ok {
		b.begun(&s.held, begin) // a pg Tx's first publish may release held readers
	}
	tx := s.newTx(dtx, true)
	tx.h.state.begin = begin
	tx.h.state.handler = handler
	if err := s.life.addTx(tx.h.state); err != nil { // the store began to drain meanwhile
		tx.h.state.done = true
		_ = dtx.rollback(context.WithoutCancel(ctx))
		return Tx{}, opErr("begin", "", err)
	}
	return tx, nil
}

// InTx runs fn in a transaction: it commits when fn returns nil and rolls
// back when fn returns an error, panics (the panic continues after the
// rollback), exits its goroutine (runtime.Goexit) or ctx is cancelled. If
// fn commits tx itself and returns nil, InTx returns nil; if fn ends it any
// other way (Rollback, or a Commit that failed) and returns nil, InTx
// returns an error matching ErrTxDone that says nothing was committed; when
// the store's hard stop rolled it back meanwhile, that error also matches
// ErrClosed.
//
// The ctx fn receives carries the transaction. On SQLite the transaction
// holds the writer slot, so an auto-commit write (Publish, Enqueue, Claim,
// ...), Begin or a nested InTx made with that ctx, on this store, while the
// transaction is open, fails at once with an error matching
// ErrInvalidArgument instead of waiting for itself; use the Tx forms. On
// Postgres those run on another connection and work.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return s.inTx(ctx, false, fn)
}

// inTx is InTx; handler marks a handler's own transaction (see
// txState.handler).
func (s *Store) inTx(ctx context.Context, handler bool, fn func(ctx context.Context, tx Tx) error) (err error) {
	tx, err := s.begin(ctx, handler)
	if err != nil {
		return err
	}
	// fn may commit tx itself. A transaction begun again in tx's place
	// (Tx.beginAgain) drops this mark with the rest: its commit holds
	// none of fn's writes.
	var committed atomic.Bool
	tx.onCommit(func() { committed.Store(true) })
	returned := false
	defer func() {
		// A panic, or runtime.Goexit (t.FailNow in a test), leaves fn without
		// returning: roll back so the transaction never outlives InTx.
		if p := recover(); p != nil || !returned {
			_ = tx.Rollback(ctx)
			if p != nil {
				panic(p)
			}
		}
	}()
	err = fn(withTx(ctx, s, tx), tx)
	returned = true
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if !tx.h.state.open() { // fn ended the transaction itself, or a hard stop did
		if committed.Load() {
			return nil
		}
		if tx.h.state.shutDown() {
			return opErr("commit", "", errTxShut)
		}
		return opErr("commit", "", fmt.Errorf("%w: the function ended the transaction without committing it (Rollback, or a Commit that failed) and returned nil; nothing was committed", ErrTxDone))
	}
	if err := ctx.Err(); err != nil {
		_ = tx.Rollback(ctx)
		return opErr("commit", "", err)
	}
	return tx.Commit(ctx)
}

// txKey marks the ctx InTx hands to its function with its transaction.
type txKey struct{}

type txMark struct {
	s  *Store
	st *txState // not the handle, which must stay collectable
}

func withTx(ctx context.Context, s *Store, tx Tx) context.Context {
	return context.WithValue(ctx, txKey{}, txMark{s: s, st: tx.h.state})
}

// writerHeldBy refuses, on SQLite, what needs the writer slot while ctx's
// own transaction on this store (InTx's) is open and holds that slot: it
// would wait for the transaction, which waits for it. Postgres runs such
// writes on another connection, so nothing is refused there.
func (s *Store) writerHeldBy(ctx context.Context) error {
	m, ok := ctx.Value(txKey{}).(txMark)
	if !ok || m.s != s || !m.st.open() {
		return nil
	}
	if !s.singleWriter() {
		return nil
	}
	return fmt.Errorf("%w: on SQLite this needs the writer slot, which the open transaction of this ctx (InTx's) holds, so it would wait for itself; use the transaction's Tx forms, or do it after InTx returns", ErrInvalidArgument)
}

// open reports whether the transaction has not ended yet.
func (st *txState) open() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.done
}

// shutDown reports whether the store's shutdown ended the transaction or
// is ending it (its later uses fail with ErrClosed), rather than its owner.
func (st *txState) shutDown() bool {
	if st.shut.Load() {
		return true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.abandoned
}

// AdoptPgx adopts a transaction the caller began with pgx on a Postgres
// store's database, so the store's Tx forms (PublishTx, EnqueueTx, ...) run
// in it beside the caller's own statements. The caller began it and ends it
// with ptx.Commit or ptx.Rollback; the returned Tx's Commit and Rollback
// refuse (see Tx.Commit). It fails at once, with an error matching
// ErrInvalidArgument, for a nil ptx or a SQLite store, and with ErrClosed
// on a closed store.
func (s *Store) AdoptPgx(ptx pgx.Tx) (Tx, error) {
	if err := s.check(); err != nil {
		return Tx{}, opErr("adopt", "", err)
	}
	pe, ok := s.eng.(*pgEngine)
	switch {
	case !ok:
		return Tx{}, opErr("adopt", "", fmt.Errorf("%w: AdoptPgx needs a Postgres store (this store is %s; use AdoptSQL)", ErrInvalidArgument, s.eng.kind()))
	case ptx == nil:
		return Tx{}, opErr("adopt", "", fmt.Errorf("%w: AdoptPgx needs a transaction, not nil", ErrInvalidArgument))
	}
	adoptConn(ptx.Conn()) // when a store's own pool holds it (Tx.Pgx): see ownConns
	return s.newTx(pe.wrapTx(ptx), false), nil
}

// AdoptSQL adopts a *sql.Tx the caller began on a SQLite store's database
// file (a *sql.DB of the "sqlite3" driver, which importing store
// registers), so the store's Tx forms run in it beside the caller's own
// statements. The caller began it and ends it with stx.Commit or
// stx.Rollback; the returned Tx's Commit and Rollback refuse (see
// Tx.Commit). It fails at once, with an error matching ErrInvalidArgument,
// for a nil stx or a Postgres store, and with ErrClosed on a closed store.
func (s *Store) AdoptSQL(stx *sql.Tx) (Tx, error) {
	if err := s.check(); err != nil {
		return Tx{}, opErr("adopt", "", err)
	}
	le, ok := s.eng.(*liteEngine)
	switch {
	case !ok:
		return Tx{}, opErr("adopt", "", fmt.Errorf("%w: AdoptSQL needs a SQLite store (this store is %s; use AdoptPgx)", ErrInvalidArgument, s.eng.kind()))
	case stx == nil:
		return Tx{}, opErr("adopt", "", fmt.Errorf("%w: AdoptSQL needs a transaction, not nil", ErrInvalidArgument))
	}
	return s.newTx(le.wrapTx(stx), false), nil
}

func (s *Store) newTx(dtx driverTx, owned bool) Tx {
	st := &txState{dtx: dtx, owned: owned, log: s.log, life: s.life, held: &s.held}
	h := &txHandle{store: s, state: st}
	if owned {
		runtime.AddCleanup(h, (*txState).rollbackLeaked, st)
	}
	return Tx{h: h}
}

// Pgx returns the pgx transaction under tx, begun by the store or adopted,
// so code written for pgx runs in the same transaction: sqlc-generated
// queries (pass it as their DBTX), pgx.CollectRows over its Query, helpers
// taking a pgx.Tx. ok is false on a SQLite store (use SQL) and for the zero
// Tx.
//
// Run statements on it; end the transaction through tx, never through the
// pgx.Tx. A store-begun transaction belongs to its Tx, whose Commit also
// sends the wakes for what the store wrote and stops tracking it; if the
// pgx.Tx is committed or rolled back directly, the store cannot tell which
// happened, and tx.Commit returns an error matching ErrTxDone. An adopted
// transaction is the other way round: you end the pgx.Tx, and tx refuses to.
//
// A pgx connection is not safe for concurrent use, and the store may roll
// a store-begun transaction back from another goroutine: a hard Shutdown,
// or Work leaving behind a WorkTx handler that ignored its cancelled
// context. Before it does, it cancels a statement that runs through tx
// (its Tx forms, Exec, Query, QueryRow) and waits for it to end. It cannot
// see statements you run on the pgx.Tx directly: those are yours to
// serialise with it: have them end (or return) when the store shuts down
// or the handler's context ends, before you stop the store hard.
func (tx Tx) Pgx() (pgx.Tx, bool) {
	if tx.h == nil {
		return nil, false
	}
	t, ok := tx.h.state.dtx.(pgTx)
	if !ok {
		return nil, false
	}
	t.o.txs.foreign.Store(true) // statements the store did not write (see pgOps.mayLearn)
	return t.tx, true
}

// SQL returns the database/sql transaction under tx, begun by the store or
// adopted, so code written for database/sql runs in the same transaction:
// sqlc-generated queries (pass it as their DBTX), helpers taking a *sql.Tx.
// ok is false on a Postgres store (use Pgx) and for the zero Tx. The rule
// of Pgx holds: end the transaction through tx, never through the *sql.Tx,
// unless you adopted it.
func (tx Tx) SQL() (*sql.Tx, bool) {
	if tx.h == nil {
		return nil, false
	}
	t, ok := tx.h.state.dtx.(liteTx)
	if !ok {
		return nil, false
	}
	return t.tx, true
}

// Commit commits the transaction. After it, every use of tx returns
// ErrTxDone, except Rollback, which does nothing. On a store that finished
// closing (see Shutdown) it rolls back and returns ErrClosed. If the driver
// transaction was ended directly (through Pgx or SQL), it returns an error
// matching ErrTxDone.
//
// With a ctx that has already ended, Commit rolls the transaction back,
// stores nothing and returns an error matching ctx.Err(), on both engines.
// A ctx that ends while the commit is under way may leave you not knowing
// whether it committed (on PostgreSQL the connection closes, as for any
// statement its ctx cuts short; SQLite finishes a commit it began): to be
// sure, commit with a ctx that outlives the work, such as
// context.WithoutCancel(ctx) with a timeout.
//
// On an adopted transaction (AdoptPgx, AdoptSQL) Commit and Rollback change
// nothing and return an error matching ErrInvalidArgument: whoever began it
// ends it, through the pgx.Tx or *sql.Tx.
func (tx Tx) Commit(ctx context.Context) error {
	_, err := tx.commit(ctx, false)
	return err
}

// commitOrKeep commits tx, the transaction of a transactional handler on
// SQLite's writer, as Commit does, except that a COMMIT that failed
// leaves tx open (open true) when SQLite kept the transaction (a
// DEFERRABLE INITIALLY DEFERRED foreign key the handler's writes broke:
// litedriver.TryCommit), or rolled it back whole without the connection
// leaving (Tx.beginAgain then begins again on it). Either way the writer
// slot stays the process's, for the runner to keep the claims the
// transaction extended and to settle the job by the commit's error
// (runner.finishTx). Elsewhere, and when the COMMIT succeeded, it is
// Commit.
func (tx Tx) commitOrKeep(ctx context.Context) (open bool, err error) {
	return tx.commit(ctx, true)
}

// commit is Commit, and commitOrKeep when keep.
func (tx Tx) commit(ctx context.Context, keep bool) (open bool, _ error) {
	if tx.h != nil && tx.h.lent {
		return false, opErr("commit", "", errLent)
	}
	st, err := tx.state()
	if err != nil {
		return false, opErr("commit", "", err)
	}
	if !st.owned {
		return false, opErr("commit", "", errAdopted)
	}
	st.mu.Lock()
	defer st.runRollbackHooks()
	defer st.mu.Unlock()
	switch {
	case st.abandoned:
		return false, opErr("commit", "", fmt.Errorf("%w: the store's shutdown rolled the transaction back", ErrClosed))
	case st.done:
		return false, opErr("commit", "", ErrTxDone)
	}
	kept := false
	defer func() {
		if !kept {
			st.ended()
		}
	}()
	if st.shut.Load() { // the hard stop began: it is rolling the transaction back
		st.done, st.abandoned = true, true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = st.dtx.rollback(rctx)
		return false, opErr("commit", "", errTxShut)
	}
	if tx.h.store.life.at() == phaseClosed {
		st.done = true
		_ = st.dtx.rollback(context.WithoutCancel(ctx))
		return false, opErr("commit", "", ErrClosed)
	}
	if st.lost != nil { // nothing is left to commit
		st.done = true
		_ = st.dtx.rollback(context.WithoutCancel(ctx))
		return false, opErr("commit", "", txLost(st.lost))
	}
	if err := ctx.Err(); err != nil { // as on PostgreSQL, where pgx sends nothing with an ended ctx
		st.done = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = st.dtx.rollback(rctx)
		return false, opErr("commit", "", fmt.Errorf("its context ended before the commit, so the transaction was rolled back and nothing of it is stored: %w", err))
	}
	if keep {
		if try, ok := st.dtx.(interface{ tryCommit(context.Context) error }); ok {
			if err := try.tryCommit(ctx); err != nil {
				kept, st.lost = true, st.dtx.endedAfter(err)
				return true, opErr("commit", "", tx.h.store.driverErr(err))
			}
			// Committed: the driver's commit below only ends its side.
		}
	}
	st.done, st.commit = true, true
	if err := st.dtx.commit(ctx); err != nil {
		st.commit = false
		// A COMMIT whose reply was lost may have committed: wake the
		// waiters (see heardOwnWrite), as afterCommit would have.
		tx.h.store.hub.WakeAll()
		if errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, sql.ErrTxDone) {
			err = fmt.Errorf("the driver transaction had already ended: was it committed or rolled back directly, not through this Tx? (%w)", err)
		}
		return false, opErr("commit", "", tx.h.store.driverErr(err))
	}
	st.afterRollback = nil
	for _, fn := range st.afterCommit {
		fn()
	}
	return false, nil
}

// onRollback arranges fn to run after tx ended without committing. An
// adopted transaction never runs it (its owner ends it).
func (tx Tx) onRollback(fn func()) {
	if st, err := tx.state(); err == nil && st.owned {
		st.mu.Lock()
		st.afterRollback = append(st.afterRollback, fn)
		st.mu.Unlock()
	}
}

// rolledBackWhole reports why SQLite rolled tx back under the driver (a
// statement in it failed so: see failed), nil while it is not known to
// have.
func (tx Tx) rolledBackWhole() error {
	st, err := tx.state()
	if err != nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done || st.lost == nil {
		return nil
	}
	return txLost(st.lost)
}

// keepOnAbandon arranges, on SQLite, for fn to run when the store rolls
// tx back from another goroutine than its user's (Work abandoning a hung
// WorkTx handler, or the shutdown rolling back a transaction still
// open): the transaction is rolled back and a new one begins on its
// connection, which keeps the writer slot, for fn to write in with ctx and
// o before it commits (liteTx.abandonKeeping). It is for writes made in
// tx on behalf of others, which its rollback must not undo: the claims a
// transactional handler's transaction extended for the jobs waiting for
// the writer it holds (runner.holdOthers), or that waited for it while a
// group member's handler ran (leaveHandlerTx). Nothing runs when tx
// commits, or its user rolls it back. A later fn replaces an earlier one.
func (tx Tx) keepOnAbandon(fn func(ctx context.Context, o ops) error) {
	if st, err := tx.state(); err == nil {
		st.keepOnAbandon(fn)
	}
}

// keepOnAbandon is Tx.keepOnAbandon on the transaction's state.
func (st *txState) keepOnAbandon(fn func(ctx context.Context, o ops) error) {
	if st.owned {
		st.mu.Lock()
		st.keep = fn
		st.mu.Unlock()
	}
}

// trackSavepoints keeps account of the savepoint statements of sql, a
// text that ran through tx without an error (Exec; or the store's own
// savepoint before a transactional handler, execOwn). SAVEPOINT marks how
// many actions were registered to follow the commit and the rollback;
// RELEASE forgets its savepoint and those made after it, their actions
// now the enclosing level's; ROLLBACK TO undoes the writes made since its
// savepoint (which stays), so the actions registered since are what
// followed writes that no longer exist: those to follow the commit are
// dropped (a group member's CommitTx no longer moves its committed offset
// at the commit, a wake no longer goes out), and those to follow a
// rollback run now (the member hands the event out again, a job settled
// since has its claim back), as a rollback of the whole transaction
// would do. A name matches the newest savepoint of that name, as on both
// engines; a name the store did not see made (a savepoint made through
// the driver transaction, Pgx or SQL, or in a text that failed) changes
// nothing. An adopted transaction runs none of these actions (its owner
// ends it): nothing is kept.
func (st *txState) trackSavepoints(sql string, pg bool) {
	if !st.owned {
		return
	}
	var undone []func()
	st.mu.Lock()
	if st.done {
		st.mu.Unlock()
		return
	}
	eachSavepoint(sql, pg, func(step savepointStep, name string) {
		if step == savepointMake {
			if st.savepoints == nil {
				st.savepoints = st.savepoint0[:0]
			}
			st.savepoints = append(st.savepoints, savepointMark{name: name, commits: len(st.afterCommit), rollbacks: len(st.afterRollback)})
			return
		}
		i := len(st.savepoints) - 1
		for name != "" && i >= 0 && st.savepoints[i].name != name {
			i--
		}
		if name == "" || i < 0 {
			return
		}
		if step == savepointRelease {
			st.savepoints = st.savepoints[:i]
			return
		}
		m := st.savepoints[i]
		st.savepoints = st.savepoints[:i+1]
		clear(st.afterCommit[m.commits:])
		st.afterCommit = st.afterCommit[:m.commits]
		undone = append(undone, st.afterRollback[m.rollbacks:]...)
		clear(st.afterRollback[m.rollbacks:])
		st.afterRollback = st.afterRollback[:m.rollbacks]
	})
	st.mu.Unlock()
	for _, fn := range undone {
		fn()
	}
}

// runRollbackHooks runs the rollback hooks once the transaction ended
// without committing. It takes mu itself: call it with mu released.
func (st *txState) runRollbackHooks() {
	st.mu.Lock()
	var hooks []func()
	if st.done && !st.commit {
		hooks, st.afterRollback = st.afterRollback, nil
	}
	st.mu.Unlock()
	for _, fn := range hooks {
		fn()
	}
}

// onCommit arranges fn to run after tx commits.
func (tx Tx) onCommit(fn func()) {
	if st, err := tx.state(); err == nil {
		st.mu.Lock()
		st.afterCommit = append(st.afterCommit, fn)
		st.mu.Unlock()
	}
}

// Rollback rolls the transaction back. It is a no-op on a transaction that
// already ended, so `defer tx.Rollback(ctx)` is safe after Commit. On an
// adopted transaction it changes nothing and returns an error matching
// ErrInvalidArgument (see Commit).
func (tx Tx) Rollback(ctx context.Context) error {
	if tx.h != nil && tx.h.lent {
		return opErr("rollback", "", errLent)
	}
	st, err := tx.state()
	if err != nil {
		return nil
	}
	if !st.owned {
		return opErr("rollback", "", errAdopted)
	}
	st.mu.Lock()
	defer st.runRollbackHooks()
	defer st.mu.Unlock()
	if st.done {
		return nil
	}
	st.done = true
	defer st.ended()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	return opErr("rollback", "", tx.h.store.driverErr(st.dtx.rollback(rctx)))
}

// Exec runs business SQL in the transaction and returns the number of rows
// it affected. Placeholders are the engine's ($1 on Postgres; ? or $1 on
// SQLite).
//
// Exec, Query and QueryRow refuse, with an error matching
// ErrInvalidArgument and before any of sql runs, a text any statement of
// which would end or begin a transaction (BEGIN, START TRANSACTION,
// COMMIT, END, ROLLBACK, ABORT, PREPARE TRANSACTION, AND CHAIN forms
// included): end tx with Commit or Rollback. Savepoints (SAVEPOINT,
// RELEASE, ROLLBACK TO) are fine through Exec, which keeps account of
// them (Query and QueryRow refuse them, ErrInvalidArgument): a ROLLBACK TO
// undoes what the store arranged for the operations made through tx since
// that savepoint, as a rollback of the whole transaction would. Actions
// the store keeps in memory to follow the commit of their writes are
// dropped: a GroupMember.CommitTx rolled back so does not move the
// member's committed offset when tx commits, so the member hands the event
// out again from the offset still stored; a wake for a rolled-back write
// is not sent. What follows a rollback runs at once: a job whose settle
// (AckTx, RetryTx, ...) was rolled back holds its claim again (a
// transactional handler's job is then completed by its worker, as if the
// handler had not settled it). A name refers to the newest savepoint of
// that name, as the engines compare names (on SQLite without regard to
// ASCII case, on PostgreSQL after folding an unquoted name to lower case).
// Not seen, so not accounted for: savepoints made or rolled back through
// the driver transaction itself (Pgx, SQL; pgx.Tx.Begin's nested
// transactions), and those of a text of several statements that failed
// (the store cannot tell which of them ran: give savepoint statements an
// Exec of their own). Statements are told apart at semicolons
// outside string literals, quoted identifiers, comments and trigger or
// BEGIN ATOMIC bodies. Should one be missed (a name spelled like BEGIN,
// CASE or END inside such a body might mislead the split), an end it makes is found once it ran and Exec fails with an
// error matching ErrTxDone (on an adopted SQLite transaction only the next
// call on tx finds out), and so does every later use of tx; but an end
// followed by a new BEGIN in the same text cannot be found afterwards.
func (tx Tx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	leave, err := tx.enter()
	if err != nil {
		return 0, opErr("exec", "", err)
	}
	defer leave()
	dtx, err := tx.live()
	if err != nil {
		return 0, opErr("exec", "", err)
	}
	pg := tx.h.store.eng.kind() == "pg"
	savepoints, err := refuseTxControl(sql, pg)
	if err != nil {
		return 0, opErr("exec", "", err)
	}
	n, err := dtx.exec(ctx, sql, args...)
	if errors.Is(err, errStatementEndedTx) { // it may have committed the Tx's writes: wake their waiters
		tx.h.store.hub.WakeAll()
	}
	if err != nil {
		return n, opErr("exec", "", tx.h.store.driverErr(tx.failed(ctx, err)))
	}
	if savepoints {
		tx.h.state.trackSavepoints(sql, pg)
	}
	return n, nil
}

// Query runs a business query in the transaction. Its rows may stay open
// beside the transaction's next statements, and close when it ends (see
// Tx).
func (tx Tx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	leave, err := tx.enter()
	if err != nil {
		return nil, opErr("query", "", err)
	}
	defer leave()
	dtx, err := tx.live()
	if err != nil {
		return nil, opErr("query", "", err)
	}
	if err := refuseSavepoints(refuseTxControl(sql, tx.h.store.eng.kind() == "pg")); err != nil {
		return nil, opErr("query", "", err)
	}
	rows, err := dtx.query(ctx, sql, args...)
	if err != nil {
		return nil, opErr("query", "", tx.h.store.driverErr(tx.failed(ctx, err)))
	}
	return &opRows{Rows: rows, tx: tx, ctx: ctx}, nil
}

// refuseSavepoints is refuseTxControl's verdict for Query and QueryRow,
// which refuse savepoint statements too: the store keeps account of
// savepoints (see Exec) once their statements ran, which Exec sees
// happen and a query's rows do not tell (on PostgreSQL its error comes
// with them).
func refuseSavepoints(savepoints bool, err error) error {
	if err == nil && savepoints {
		err = fmt.Errorf("%w: run SAVEPOINT, RELEASE and ROLLBACK TO through Exec, which keeps account of them, not through a query", ErrInvalidArgument)
	}
	return err
}

// opRows wraps a business query's errors (Err's, Scan's) like every other
// operation's: rows the store's rollback ended (a hard Shutdown, Work
// leaving its handler behind) say ErrTxDone, and ErrClosed while the store
// closes, as the transaction's next statement would.
type opRows struct {
	Rows
	tx  Tx
	ctx context.Context // the query's
}

func (r *opRows) Err() error { return r.mapErr(r.Rows.Err()) }

func (r *opRows) Scan(dest ...any) error { return r.mapErr(r.Rows.Scan(dest...)) }

func (r *opRows) mapErr(err error) error {
	if err == nil {
		return nil
	}
	err = r.tx.rowsEnded(r.ctx, err)
	return opErr("query", "", r.tx.h.store.driverErr(r.tx.failed(r.ctx, err)))
}

// rowsEnded is the error of business rows, or a row, that the end of
// their transaction closed (Commit or Rollback with them still open): on
// SQLite database/sql closes them with the transaction's context, so their
// Err said context.Canceled although no context of the caller's ended;
// it says errRowsTxEnded, matching ErrTxDone, as on PostgreSQL (appRows).
// ctx is the query's.
func (tx Tx) rowsEnded(ctx context.Context, err error) error {
	if tx.h == nil || !errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return err
	}
	st := tx.h.state
	st.mu.Lock()
	ended := st.done && !st.abandoned
	st.mu.Unlock()
	if ended {
		return errRowsTxEnded
	}
	return err
}

// QueryRow runs a business query expected to return one row. Until
// scanned, the row is open rows (see Query).
func (tx Tx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	leave, err := tx.enter()
	if err != nil {
		return errRow{opErr("query row", "", err)}
	}
	defer leave()
	dtx, err := tx.live()
	if err != nil {
		return errRow{opErr("query row", "", err)}
	}
	if err := refuseSavepoints(refuseTxControl(sql, tx.h.store.eng.kind() == "pg")); err != nil {
		return errRow{opErr("query row", "", err)}
	}
	return opRow{r: dtx.queryRow(ctx, sql, args...), tx: tx, ctx: ctx}
}

// opRow wraps a business row's Scan error like every other operation's.
type opRow struct {
	r   Row
	tx  Tx
	ctx context.Context // the query's
}

func (r opRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, sql.ErrNoRows) {
		err = r.tx.failed(r.ctx, r.tx.rowsEnded(r.ctx, err))
	}
	return opErr("query row", "", r.tx.h.store.driverErr(err))
}

func (tx Tx) state() (*txState, error) {
	if tx.h == nil {
		return nil, fmt.Errorf("%w: zero Tx", ErrTxDone)
	}
	return tx.h.state, nil
}

// adopted reports whether tx was adopted (AdoptPgx, AdoptSQL): its owner
// ends it, and the store never learns how.
func (tx Tx) adopted() bool { return tx.h != nil && !tx.h.state.owned }

// enter counts a use of an adopted transaction (Exec, Query, QueryRow) as
// a running operation, as run does for the Tx forms (see Shutdown), or
// refuses it with ErrClosed once the store drains; leave ends it. A
// store-begun transaction's uses are not counted: Shutdown waits for the
// transaction itself.
func (tx Tx) enter() (leave func(), err error) {
	if tx.h == nil || tx.h.state.owned {
		return noLeave, nil
	}
	l := tx.h.store.life
	if err := l.enterOp(); err != nil {
		return nil, err
	}
	return l.leaveOp, nil
}

var noLeave = func() {}

// live returns the open driver transaction, or why there is none.
func (tx Tx) live() (driverTx, error) {
	st, err := tx.state()
	if err != nil {
		return nil, err
	}
	if tx.h.store.life.at() == phaseClosed {
		return nil, ErrClosed
	}
	if st.shut.Load() {
		return nil, errTxShut
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return nil, ErrTxDone
	}
	if st.lost != nil {
		return nil, txLost(st.lost)
	}
	return st.dtx, nil
}

// errTxShut is the error of every later use of a transaction the store's
// shutdown rolled back (see Shutdown).
var errTxShut = fmt.Errorf("%w: the store's shutdown rolled the transaction back (%w)", ErrClosed, ErrTxDone)

// execOwn runs one of the store's own statements in tx (a savepoint of
// the handler's transaction, see callTx), not counted as the
// application's.
func (tx Tx) execOwn(ctx context.Context, query string) error {
	dtx, err := tx.live()
	if err != nil {
		return err
	}
	if _, err = dtx.exec(ctx, query); err == nil {
		tx.h.state.trackSavepoints(query, tx.h.store.eng.kind() == "pg")
	}
	return err
}

// rollbackKeep rolls tx back on SQLite's writer, keeping its connection
// for beginAgain, as SQLite rolling it back whole does (see
// Store.keepClaimsAfresh); its statements are refused meanwhile.
func (tx Tx) rollbackKeep(ctx context.Context) error {
	st, err := tx.state()
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	rb, ok := st.dtx.(interface{ rollbackKeep(context.Context) error })
	switch {
	case st.done || st.abandoned:
		return ErrTxDone
	case !st.owned || !ok:
		return errors.New("only a transaction the store began on SQLite's writer can roll back and begin again")
	}
	if err := rb.rollbackKeep(ctx); err != nil {
		return err
	}
	if st.lost == nil {
		st.lost = litedriver.ErrRolledBack
	}
	return nil
}

// lost reports whether the transaction no longer exists on its connection
// (SQLite rolled it back whole: see Tx.failed) while tx is still open.
func (tx Tx) lost() bool {
	st, err := tx.state()
	if err != nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.done && st.lost != nil
}

// beginAgain begins, on SQLite, a new transaction in place of tx's, which
// SQLite rolled back whole (a write in it interrupted, or failed for
// memory, disk or locks), on the connection tx still holds, and with it
// the writer slot: no other write of the process comes between the two
// (see runner.settleAfresh). tx then goes on in the new transaction. What
// was to follow tx's commit is dropped (wakes for its writes, a group
// CommitTx's offset) and what was to follow its rollback runs now (a
// settle's claim given back, a group partition rewound): those writes are
// gone. So are what keepOnAbandon registered (it redid writes of the
// first transaction: the caller registers again what the new one must
// keep, see runner.settleAfresh) and InTx's mark of a commit by its
// function: the new transaction holds none of the function's writes, so
// its commit is not the function's (InTx would return nil for work that
// rolled back; keepClaimsAfresh's path, whose function returns an error,
// never reads it). It fails, changing nothing, on PostgreSQL, on an
// adopted or ended Tx, and when the transaction is still open.
func (tx Tx) beginAgain(ctx context.Context) error {
	st, err := tx.state()
	if err != nil {
		return err
	}
	st.mu.Lock()
	again, ok := st.dtx.(interface{ beginAgain(context.Context) error })
	switch {
	case st.done || st.abandoned:
		st.mu.Unlock()
		return ErrTxDone
	case !st.owned || !ok:
		st.mu.Unlock()
		return errors.New("only a transaction the store began on SQLite's writer can begin again")
	}
	if err := again.beginAgain(ctx); err != nil {
		st.mu.Unlock()
		return err
	}
	hooks := st.afterRollback
	st.lost, st.afterCommit, st.afterRollback, st.savepoints = nil, nil, nil, nil
	st.keep = nil // what it redid were the first transaction's writes, gone with it
	st.mu.Unlock()
	for _, fn := range hooks {
		fn()
	}
	return nil
}

// errStatementEndedTx is why a Tx is gone after one of its statements
// ended the transaction (a COMMIT or ROLLBACK among several statements of
// one Exec).
var errStatementEndedTx = errors.New("a statement run through the Tx ended its transaction (COMMIT, ROLLBACK or the like): end a Tx with its Commit or Rollback; nothing more runs in it")

// txLost is the error of every use of a transaction SQLite rolled back
// under the driver.
func txLost(why error) error {
	return fmt.Errorf("%w: %w; roll the transaction back and start again", ErrTxDone, why)
}

// failed is told the error of a statement or operation that failed in tx,
// run with ctx, and returns the error as its caller sees it. An error
// SQLite gave because ctx ended (an interrupted statement, a busy wait cut
// short) matches ctx's error too: litedriver marks the store's own
// connections' errors, CutShort an adopted transaction's. When the
// transaction no longer exists on its connection (SQLite rolled it back
// whole, PostgreSQL's connection closed, or the statement ended it), every
// later use of tx is refused, so nothing written through tx after that
// commits on its own, and the error matches ErrTxDone too.
func (tx Tx) failed(ctx context.Context, err error) error {
	if tx.h == nil || err == nil {
		return err
	}
	err = litedriver.CutShort(ctx, err)
	st := tx.h.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.abandoned {
		// The statement the store's rollback cut short (SQLSTATE 57014 on
		// PostgreSQL), or one it kept from starting: the transaction is
		// gone, and ErrClosed says the shutdown's rollback ended it
		// (driverErr adds it too once the store drains).
		if !errors.Is(err, ErrTxDone) {
			err = fmt.Errorf("%w: %w", ErrTxDone, err)
		}
		if st.shut.Load() && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return err
	}
	if st.done || st.lost != nil {
		return err
	}
	st.lost = st.dtx.endedAfter(err)
	switch {
	case st.lost == nil || errors.Is(err, ErrTxDone) || errors.Is(err, litedriver.ErrRolledBack):
		return err // driverErr marks a refusal ErrTxDone
	case errors.Is(err, st.lost):
		return fmt.Errorf("%w: %w", ErrTxDone, err)
	}
	return fmt.Errorf("%w: %w; %w", ErrTxDone, err, st.lost)
}

// via routes an operation made with ctx into this transaction; the
// transaction must belong to the store the operation's handle came from.
func (tx Tx) via(ctx context.Context) via {
	return func(s *Store) (target, error) {
		dtx, err := tx.live()
		if err != nil {
			return target{}, err
		}
		if tx.h.store != s {
			return target{}, fmt.Errorf("%w: the transaction belongs to another store", ErrInvalidArgument)
		}
		return target{ops: dtx.ops(), tx: tx, ctx: ctx, adopted: !tx.h.state.owned}, nil
	}
}

// rollbackLeaked runs when a store-begun Tx became unreachable. An open
// transaction is rolled back and reported, since the caller lost track of it.
func (st *txState) rollbackLeaked() {
	st.mu.Lock()
	defer st.runRollbackHooks()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.done = true
	defer st.ended()
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	err := st.dtx.abandon(ctx) // its rows may still be open
	st.log.Warn("alkstore: transaction became unreachable while open; rolled it back (end every Tx with Commit or Rollback)",
		slog.Any("rollback_error", err))
}

// abandon rolls back a transaction the store's shutdown found still open
// (shut; or Work, of a handler it left behind), while its user may still be
// running a statement in it: on PostgreSQL that statement is cancelled
// and the rollback waits for it to end (txGuard); false when it did not
// end within rollbackTimeout, or the rollback failed (the user then finds
// the store closed; the rollback happens as that statement ends). On
// SQLite the writes registered with Tx.keepOnAbandon are made again, in a
// new transaction on the same connection, before the writer is free.
func (st *txState) abandon(shut bool) bool {
	st.mu.Lock()
	defer st.runRollbackHooks()
	defer st.mu.Unlock()
	if st.done {
		return true
	}
	st.done, st.abandoned = true, true
	if shut {
		st.shut.Store(true)
	}
	defer st.ended()
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if k, ok := st.dtx.(interface {
		abandonKeeping(context.Context, func(context.Context, ops) error) error
	}); ok && st.keep != nil {
		return k.abandonKeeping(ctx, st.keep) == nil
	}
	return st.dtx.abandon(ctx) == nil
}

// ended stops tracking a store-begun transaction.
func (st *txState) ended() {
	if st.owned {
		st.life.endTx(st)
		st.held.release(st.begin)
	}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// noRows makes the drivers' "no rows" errors match ErrNotFound too. The
// drivers' bare sentinel reads as "not found" alone (and stays reachable
// with errors.Is): its text, "sql: no rows in result set", said nothing the
// operation and the name around it do not, and showed through to the
// command line ("job 999: not found: sql: no rows in result set").
func noRows(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return err // already marked
	case err == sql.ErrNoRows || err == pgx.ErrNoRows: // the bare sentinels only: a wrapped one keeps its wrapper's text
		return noRowsError{err}
	case errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// noRowsError is a driver's bare "no rows": it reads as ErrNotFound and
// matches both it and the driver's sentinel.
type noRowsError struct{ driver error }

func (e noRowsError) Error() string   { return ErrNotFound.Error() }
func (e noRowsError) Unwrap() []error { return []error{ErrNotFound, e.driver} }
