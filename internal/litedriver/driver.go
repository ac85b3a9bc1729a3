package litedriver

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"
	sqlite "github.com/ncruces/go-sqlite3/driver"
)

// Open returns a database handle on the SQLite database name (a file: URI)
// whose connections never panic: ncruces/go-sqlite3 panics by design when
// SQLite runs out of memory (each connection's memory is capped), and
// database/sql does not survive a panic in a driver: the connection stays
// checked out forever (and a transaction's lock with it), so a pool of one,
// like alkstore's writer slot, blocks every later caller. Here every driver
// call recovers a panic into an error and marks its connection broken;
// database/sql then discards the connection when it is released and opens
// a fresh one, so the pool survives any failure of a statement.
func Open(name string) (*sql.DB, error) {
	return OpenInterruptible(name, nil)
}

// OpenInterruptible is Open with connections whose statements in stops
// (when not nil) can end from another goroutine: see Interrupter.
//
// keep lists statements without parameters (a transaction's savepoints)
// that each connection prepares the first time they are run through Exec
// without arguments, and keeps, as it keeps its transactions' own BEGIN,
// COMMIT and ROLLBACK (see conn.BeginTx): run as sqlite3_exec, SQLite
// would parse and plan them again each time.
func OpenInterruptible(name string, stops *Interrupter, keep ...string) (*sql.DB, error) {
	c, err := (&sqlite.SQLite{}).OpenConnector(name)
	if err != nil {
		return nil, err
	}
	n := connector{c: c, name: name, stops: stops, begin: ownBegin(name)}
	if len(keep) > 0 {
		n.keep = make(map[string]bool, len(keep))
		for _, q := range keep {
			n.keep[q] = true
		}
	}
	return sql.OpenDB(n), nil
}

// ownBegin is the BEGIN of the transactions that the connections of the
// handle named name begin with the default options, when the driver's
// would be one the name states (its _txlock: deferred, immediate or
// exclusive); "" leaves them to the driver (its default, immediate unless
// the connection is query_only, depends on the connection).
func ownBegin(name string) string {
	if !strings.HasPrefix(name, "file:") {
		return ""
	}
	u, err := url.Parse(name)
	if err != nil {
		return ""
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return ""
	}
	switch q.Get("_txlock") {
	case "deferred":
		return "BEGIN DEFERRED"
	case "immediate":
		return beginImmediate
	case "exclusive":
		return "BEGIN EXCLUSIVE"
	}
	return ""
}

// Interrupter ends, from any goroutine, every statement running on the
// connections of the handles opened with it (OpenInterruptible), and every
// one they start from then on: a wait for another connection's lock (the
// busy timeout) gives up within about a millisecond, and a statement that
// runs stops at SQLite's next progress check (every thousand VM
// instructions). SQLite rolls the statement back, and the whole
// transaction of an interrupted write in one; a COMMIT or ROLLBACK of a
// transaction still open runs. The statement fails with SQLite's error
// (interrupted, or database is locked for a wait) marked so that it
// matches ErrInterrupted. It is for a handle about to close: there is no
// going back.
//
// The driver lets a statement's context interrupt it (its Err, read by
// SQLite's progress and busy handlers on the statement's goroutine), and
// nothing else may touch a connection another goroutine uses; so each
// statement runs with its context wrapped (stopCtx, one a connection,
// reused: no allocation).
type Interrupter struct {
	on atomic.Bool
	// locks: EndLockWaits was called; cutWrites and cutReads count the
	// waits it ended, of writable connections and of read-only ones
	// (query_only).
	locks     atomic.Bool
	cutWrites atomic.Int64
	cutReads  atomic.Int64
}

// Interrupt ends the statements running and refuses later ones.
func (in *Interrupter) Interrupt() { in.on.Store(true) }

// EndLockWaits ends, from any goroutine, every wait of a statement on the
// connections of the handles opened with in for a lock another
// connection holds (SQLite's busy handler: another process's connection,
// another handle's, another of the same pool's), and every such wait
// from then on: the statement fails at once with SQLite's "database is
// locked", marked to match ErrInterrupted, instead of waiting out the busy
// timeout. Statements that wait for no lock run on: unlike Interrupt,
// nothing that runs is cut, and a wait for a connection of the handle's
// pool (database/sql's) is not SQLite's: it goes on. It is for a handle
// about to close whose lock waits may be for what it cannot end. There is
// no going back.
func (in *Interrupter) EndLockWaits() { in.locks.Store(true) }

// LockWaitsEnded is how many lock waits EndLockWaits has ended: of
// writable connections (writes, as far as SQLite's locks go: a read
// there waits for no lock another connection can hold in WAL mode) and of
// read-only ones (query_only: reads, which wait for a lock only when
// another connection holds the file exclusively, or outside WAL mode).
func (in *Interrupter) LockWaitsEnded() (writes, reads int64) {
	return in.cutWrites.Load(), in.cutReads.Load()
}

// answered reports whether err may be SQLite's answer to in: an
// interrupted statement or an ended lock wait (Interrupt), or an ended
// lock wait (EndLockWaits).
func (in *Interrupter) answered(err error) bool {
	busy := errors.Is(err, sqlite3.BUSY)
	return in.on.Load() && (busy || errors.Is(err, sqlite3.INTERRUPT)) || in.locks.Load() && busy
}

// lockWait is a connection's busy handler when its handle has an
// Interrupter: SQLite's busy timeout (the handle's busy_timeout pragma),
// which the Interrupter's EndLockWaits ends. The driver's handler reads
// only the statement's context, which would end the statement's running
// too (see stopCtx).
type lockWait struct {
	timeout time.Duration
	in      *Interrupter
	reader  bool      // the connection is read-only (query_only)
	first   time.Time // the current wait's start
	last    time.Time // its latest try
}

// retry is SQLite's busy handler (count: the wait's retries so far; ctx:
// the statement's, as stopCtx).
func (w *lockWait) retry(ctx context.Context, count int) bool {
	if w.in.locks.Load() {
		if w.reader {
			w.in.cutReads.Add(1)
		} else {
			w.in.cutWrites.Add(1)
		}
		return false
	}
	now := time.Now()
	if count == 0 {
		w.first = now
	} else if now.Sub(w.first) >= w.timeout {
		return false
	} else if now.Sub(w.first) >= lockWaitNotice {
		if lw, ok := ctx.Value(lockWaitWatchKey{}).(*LockWaitWatch); ok {
			lw.tell()
		}
	}
	if now.Sub(w.last) < time.Millisecond {
		time.Sleep(rand.N(lockRetryGap)) // as the driver's busy timeout does
	}
	w.last = time.Now()
	return true
}

// LockWaitWatch learns that a statement whose context carries it
// (WithLockWaitWatch) waits for a lock another connection holds, on a
// handle with an Interrupter (OpenInterruptible): each retry of a wait
// that has lasted lockWaitNotice sends on C (buffered: one signal
// waits there). It is for a caller that must not wait for what it cannot
// end (a worker's hard stop, whose writes wait for another process's
// transaction): a signal says a wait went on a moment ago, and a fresh
// one comes about every millisecond while it goes on.
type LockWaitWatch struct{ c chan struct{} }

// NewLockWaitWatch returns a LockWaitWatch.
func NewLockWaitWatch() *LockWaitWatch { return &LockWaitWatch{c: make(chan struct{}, 1)} }

// C receives while a statement watched waits for another connection's lock.
func (lw *LockWaitWatch) C() <-chan struct{} { return lw.c }

// Drain drops a signal waiting on C (of a wait that may have ended).
func (lw *LockWaitWatch) Drain() {
	select {
	case <-lw.c:
	default:
	}
}

func (lw *LockWaitWatch) tell() {
	select {
	case lw.c <- struct{}{}:
	default:
	}
}

// WithLockWaitWatch returns ctx carrying lw, for the statements run with
// it (and the contexts made from it).
func WithLockWaitWatch(ctx context.Context, lw *LockWaitWatch) context.Context {
	return context.WithValue(ctx, lockWaitWatchKey{}, lw)
}

type lockWaitWatchKey struct{}

// lockWaitNotice is how long a lock wait goes on before a LockWaitWatch
// hears of it: a wait behind another connection's short write (a
// checkpoint, another process's commit) is over before.
const lockWaitNotice = 50 * time.Millisecond

// lockRetryGap bounds the sleep between two tries of a lock wait that
// come within a millisecond (1 ms on average).
const lockRetryGap = 2 * time.Millisecond

// waitLocks makes in's EndLockWaits end raw's lock waits: raw's busy
// timeout, as its pragma (or SetBusyTimeout) set it, becomes a lockWait.
func waitLocks(raw *sqlite3.Conn, in *Interrupter) error {
	ms, err := pragmaInt(raw, "busy_timeout")
	if err != nil || ms <= 0 {
		return err // ms <= 0: no wait to end
	}
	readOnly, err := pragmaInt(raw, "query_only")
	if err != nil {
		return err
	}
	return raw.BusyHandler((&lockWait{timeout: time.Duration(ms) * time.Millisecond, in: in, reader: readOnly != 0}).retry)
}

// pragmaInt reads the pragma name's value on raw.
func pragmaInt(raw *sqlite3.Conn, name string) (int64, error) {
	st, _, err := raw.Prepare("PRAGMA " + name)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	if !st.Step() {
		return 0, cmp.Or(st.Err(), errors.New("PRAGMA "+name+" returned no row"))
	}
	v := st.ColumnInt64(0)
	return v, st.Reset()
}

// WithTxInterrupter returns ctx carrying in, for a BeginTx: the statements
// of the transaction it begins read in as they read the handle's
// Interrupter, so in.Interrupt ends the one running in it (and every later
// one) from any goroutine, and its ROLLBACK then runs; the other
// connections, and the connection's later transactions, are not touched.
// It is for a transaction its owner can no longer be waited for (a
// handler that ignores its context), whose statements may run with a
// context that never ends.
func WithTxInterrupter(ctx context.Context, in *Interrupter) context.Context {
	return context.WithValue(ctx, txInterrupterKey{}, in)
}

type txInterrupterKey struct{}

// ErrInterrupted is what the statements an Interrupter ended match.
var ErrInterrupted = errors.New("interrupted: its database handle is closing")

// stopCtx is a statement's context as the driver sees it on a connection
// of an Interrupter: it reads as cancelled once either the statement's
// context ended or the Interrupter interrupted. The driver reads only Err
// (SQLite's progress and busy handlers poll it); Done stays the
// statement's own, so stopCtx never reaches database/sql or the caller.
// A connection has one, which every call into the driver points at its
// own context first (conn.watch; rows too, whose driver rows keep the
// pointer): database/sql makes the calls on a connection one at a time,
// and the driver reads Err only during them.
//
// It also keeps an interrupt from turning a statement that finished into a
// failure. SQLite calls the progress handler once more as a statement
// returns, after its last instruction ran: for a write outside a
// transaction, after its commit. An interrupt there makes the statement
// fail with "interrupted" although its write is stored, and inside a
// transaction although its changes stay in it; a caller told so would do
// the write again. So once the driver's look before the statement's step
// found the context alive (started), a look that finds the statement no
// longer running (halted: sqlite3_stmt_busy) reads as alive: there is
// nothing left to interrupt. Before its step, the statement is not running
// either: that look reads the context as it is, and an ended context
// refuses the step.
type stopCtx struct {
	context.Context
	stops  *Interrupter // nil: only the context
	txStop *Interrupter // the transaction's (WithTxInterrupter), if any
	// stmt is the statement the call steps, when known (nil: a call that
	// runs SQL text, or prepares); started says a look found the context
	// alive since the statement was handed in.
	stmt    busyer
	started bool
}

// busyer is a prepared statement (the driver's, or sqlite3.Stmt), which
// says whether it is running: stepped, and neither done nor reset.
type busyer interface{ Busy() bool }

func (c *stopCtx) Err() error {
	err := c.Context.Err()
	if err == nil && (c.stops != nil && c.stops.on.Load() || c.txStop != nil && c.txStop.on.Load()) {
		err = context.Canceled
	}
	switch {
	case err == nil:
		c.started = true
	case c.started && c.stmt != nil && !c.stmt.Busy():
		return nil // the statement halted: done, commit and all
	}
	return err
}

// busyOverrides holds SetBusyTimeout's overrides: file path -> timeout.
var busyOverrides sync.Map

// SetBusyTimeout makes connections opened from now on to the database
// file at path (as in the handle's name) wait up to d for other
// connections' locks, whatever the name's busy_timeout pragma says. It is
// for tests: a wait that an hour's busy timeout cannot end proves that
// something else ended it. restore removes the override.
func SetBusyTimeout(path string, d time.Duration) (restore func()) {
	busyOverrides.Store(path, d)
	return func() { busyOverrides.Delete(path) }
}

// busyOverride is SetBusyTimeout's timeout for the database name, if any.
func busyOverride(name string) (time.Duration, bool) {
	u, err := url.Parse(name)
	if err != nil {
		return 0, false
	}
	d, ok := busyOverrides.Load(cmp.Or(u.Path, u.Opaque))
	if !ok {
		return 0, false
	}
	return d.(time.Duration), true
}

// ErrPanicked is what a driver call that panicked returns (wrapping the
// panic's value when it is an error).
var ErrPanicked = errors.New("sqlite driver panicked")

// guard turns a panic into *err and marks the connection broken.
func guard(broken *atomic.Bool, err *error) {
	if p := recover(); p != nil {
		broken.Store(true)
		if pe, ok := p.(error); ok {
			*err = fmt.Errorf("%w: %w", ErrPanicked, pe)
		} else {
			*err = fmt.Errorf("%w: %v", ErrPanicked, p)
		}
	}
}

type connector struct {
	c     driver.Connector
	name  string
	stops *Interrupter // nil: statements end only with their context
	begin string       // ownBegin's
	keep  map[string]bool
}

func (n connector) Driver() driver.Driver { return n.c.Driver() }

func (n connector) Connect(ctx context.Context) (dc driver.Conn, err error) {
	var broken atomic.Bool
	defer guard(&broken, &err)
	raw, err := n.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := &conn{raw: raw.(sqlite.Conn), broken: &broken, stops: n.stops, begin: n.begin, keep: n.keep}
	if d, ok := busyOverride(n.name); ok {
		if err := c.raw.Raw().BusyTimeout(d); err != nil {
			_ = raw.Close()
			return nil, err
		}
	}
	if n.stops != nil {
		if err := waitLocks(c.raw.Raw(), n.stops); err != nil {
			_ = raw.Close()
			return nil, err
		}
	}
	return c, nil
}

// conn is one connection; broken once a call on it panicked.
type conn struct {
	raw    sqlite.Conn
	broken *atomic.Bool
	inTx   atomic.Bool // between BeginTx and the end of its transaction
	ownTx  bool        // that transaction's BEGIN was c.begin (see BeginTx), which BeginAgain can run again
	// committed: TryCommit committed the open transaction, which the
	// *sql.Tx's Commit then only ends (see TryCommit).
	committed bool
	stops     *Interrupter // see OpenInterruptible
	txStop    *Interrupter // the open transaction's (WithTxInterrupter), if any
	sc        stopCtx      // watch's (with stops)
	// stmts are the connection's own statements (WriteTx's, a
	// transaction's BEGIN, COMMIT and ROLLBACK, the kept ones), prepared
	// on the connection the first time they run there; finalized when it
	// closes.
	stmts map[string]*sqlite3.Stmt
	begin string          // the BEGIN of a transaction with the default options; "": the driver's
	keep  map[string]bool // statements Exec runs prepared (OpenInterruptible's keep)
}

// watch is the context a call into the driver made with ctx hands it: the
// connection's stopCtx, now reading ctx and the Interrupter (if any), for
// a call that steps no prepared statement of the driver's (see watchStmt).
func (c *conn) watch(ctx context.Context) context.Context {
	return c.watchStmt(ctx, nil)
}

// watchStmt is watch for a call that steps st: once st halted, the
// progress handler's last look cannot interrupt it (see stopCtx).
func (c *conn) watchStmt(ctx context.Context, st busyer) context.Context {
	txStop := c.txStop
	if txStop != nil && txStop.on.Load() && ctx.Value(unstoppedKey{}) != nil {
		txStop = nil // the store's own statements after RestartTx
	}
	c.sc.Context, c.sc.stops, c.sc.txStop, c.sc.stmt, c.sc.started = ctx, c.stops, txStop, st, false
	return &c.sc
}

// Unstopped marks ctx for the statements that the store runs in the
// transaction RestartTx began: the transaction's Interrupter
// (WithTxInterrupter), which stays on, does not end them. Every other
// statement on the connection (a handler's, still running as it was
// abandoned, or started since) is ended or refused by it, as before.
func Unstopped(ctx context.Context) context.Context {
	return context.WithValue(ctx, unstoppedKey{}, true)
}

type unstoppedKey struct{}

// unwatched points the connection's stopCtx at nothing that can end: the
// steps of st from now on run to their end.
func (c *conn) unwatched(st busyer) {
	c.sc.Context, c.sc.stops, c.sc.txStop, c.sc.stmt, c.sc.started = context.Background(), nil, nil, st, false
}

// ErrRolledBack is what a statement, or the commit, of a transaction whose
// connection left it returns: SQLite rolls a whole transaction back when a
// write in it is interrupted (its context ended) or fails for memory, disk
// or locks, and a statement's RAISE(ROLLBACK), COMMIT or ROLLBACK ends it
// too. database/sql cannot tell: the statements it then runs for the
// transaction would each commit on its own, outside it.
var ErrRolledBack = errors.New("SQLite rolled the transaction back whole (a write in it was interrupted or failed for memory, disk or locks), or a statement ended it: nothing more runs in it")

// ended reports ErrRolledBack when c's transaction is no longer open in
// SQLite (the connection is back in autocommit mode).
func (c *conn) ended() error {
	if c.inTx.Load() && c.raw.Raw().GetAutocommit() {
		return ErrRolledBack
	}
	return nil
}

// StmtError is the failure of a statement that says more than SQLite's
// error: that the statement's context ended it (SQLite only says
// "interrupted", or "database is locked" for a wait on another process's
// writer that the context cut short), and whether the failure ended the
// transaction the statement ran in (SQLite rolled it back whole). It
// matches the driver's error and, when Cause is set, the context's error
// (context.Canceled or context.DeadlineExceeded) with errors.Is.
type StmtError struct {
	Err   error // the driver's
	Cause error // the statement's context's error, when its end stopped the statement; or ErrInterrupted
	// EndedTx: the statement ran in a transaction that is no longer open
	// after it failed; every later statement of it is refused
	// (ErrRolledBack).
	EndedTx bool
}

func (e *StmtError) Error() string {
	switch e.Cause {
	case nil:
		return e.Err.Error()
	case ErrInterrupted:
		return e.Err.Error() + " (" + e.Cause.Error() + ")"
	}
	return e.Err.Error() + " (its context ended: " + e.Cause.Error() + ")"
}

func (e *StmtError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// EndedTx reports whether err is a statement's failure that ended the
// transaction it ran in (see StmtError).
func EndedTx(err error) bool {
	var se *StmtError
	return errors.As(err, &se) && se.EndedTx
}

// CutShort returns err matching ctx's error too when err is SQLite's
// answer to ctx's end: an interrupted statement, or a busy wait the end
// cut short. Other errors, and errors that match ctx's already, are
// returned as they are.
func CutShort(ctx context.Context, err error) error {
	if err == nil || ctx == nil {
		return err
	}
	cause := ctx.Err()
	if cause == nil || errors.Is(err, cause) || !(errors.Is(err, sqlite3.INTERRUPT) || errors.Is(err, sqlite3.BUSY)) {
		return err
	}
	var se *StmtError
	if errors.As(err, &se) {
		return err // marked already, by the statement that failed
	}
	return &StmtError{Err: err, Cause: cause}
}

// failed is what a statement on c that failed with err returns: err marked
// with what its context did (CutShort) and whether the failure ended c's
// transaction.
func (c *conn) failed(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrRolledBack) || errors.Is(err, ErrPanicked) {
		return err
	}
	err = c.interrupted(ctx, CutShort(ctx, err))
	if c.ended() == nil {
		return err
	}
	var se *StmtError
	if errors.As(err, &se) {
		se.EndedTx = true
		return err
	}
	return &StmtError{Err: err, EndedTx: true}
}

// interrupted marks err, the failure of a statement run with ctx, as the
// Interrupter's doing (ErrInterrupted) when it is SQLite's answer to an
// interrupt (interrupted, or a busy wait given up) or to EndLockWaits (a
// busy wait given up) that ctx did not ask for.
func (c *conn) interrupted(ctx context.Context, err error) error {
	if c.stops == nil || ctx.Err() != nil || !c.stops.answered(err) {
		return err
	}
	var se *StmtError
	if errors.As(err, &se) {
		return err
	}
	return &StmtError{Err: err, Cause: ErrInterrupted}
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
)

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (s driver.Stmt, err error) {
	st := &stmt{broken: c.broken, c: c, query: query}
	if ctx.Value(prepareOnFirstRunKey{}) != nil {
		return st, nil
	}
	if err := st.prepare(ctx); err != nil {
		return nil, c.interrupted(ctx, err)
	}
	return st, nil
}

type prepareOnFirstRunKey struct{}

// PrepareOnFirstRun returns ctx for a PrepareContext whose statements SQLite
// parses on their first run instead: a prepared statement that never runs
// then costs nothing. The store prepares all of its statements (some 140)
// on each of its pools when it opens, where parsing them made up most of
// an Open's CPU (22 of 39 ms). A statement that cannot be parsed fails its
// first run instead of the prepare.
func PrepareOnFirstRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, prepareOnFirstRunKey{}, true)
}

// parsed has SQLite parse s on its first run, with the run's ctx, and
// reports a failure as the run's would be (conn.failed). A run after the
// first costs one nil check more than before PrepareOnFirstRun.
func (s *stmt) parsed(ctx context.Context) error {
	if s.raw != nil {
		return nil
	}
	if err := s.prepare(ctx); err != nil {
		return s.c.failed(ctx, err)
	}
	return nil
}

// prepare has SQLite parse s, with ctx.
func (s *stmt) prepare(ctx context.Context) (err error) {
	defer guard(s.broken, &err)
	raw, err := s.c.raw.PrepareContext(s.c.watch(ctx), s.query)
	if err != nil {
		return err
	}
	s.raw = raw
	s.busy, _ = raw.(busyer)
	return nil
}

func (c *conn) Close() (err error) {
	defer guard(c.broken, &err)
	for q, s := range c.stmts {
		_ = s.Close()
		delete(c.stmts, q)
	}
	return c.raw.Close()
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction as the driver does. One with the default
// options on a handle whose name sets _txlock (the store's writer) runs the
// BEGIN the name states, and later its COMMIT or ROLLBACK, as statements
// prepared once per connection and kept (conn.run, as WriteTx's), where the
// driver would parse them again for every transaction: the same
// statements, run the same way (ctx ends the BEGIN's wait for another
// connection's writer, and an Interrupter's interrupt; the COMMIT runs
// uninterrupted, a failed one is rolled back, and so is a ROLLBACK). Other
// options (read-only, an isolation level) go to the driver. A BEGIN that
// failed leaves no transaction behind: rolled back, or its connection
// dropped (before stopCtx kept the progress handler's last look from
// failing a BEGIN that ran, the connection stayed inside that
// transaction, and every later write on it ran in it, never committed).
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (t driver.Tx, err error) {
	defer guard(c.broken, &err)
	c.txStop = nil
	defer func() {
		if err == nil {
			c.txStop, _ = ctx.Value(txInterrupterKey{}).(*Interrupter)
		}
	}()
	if c.begin != "" && opts == (driver.TxOptions{}) {
		raw := c.raw.Raw()
		old := raw.SetInterrupt(c.watch(ctx))
		err = c.run(c.begin)
		raw.SetInterrupt(old)
		if err != nil {
			if c.rollback() != nil {
				c.broken.Store(true)
			}
			return nil, c.interrupted(ctx, CutShort(ctx, err))
		}
		c.inTx.Store(true)
		c.ownTx = true
		return tx{broken: c.broken, c: c}, nil
	}
	raw, err := c.raw.BeginTx(c.watch(ctx), opts)
	if err != nil {
		if !c.raw.Raw().GetAutocommit() {
			// The BEGIN ran and then failed: a statement after it (the
			// driver's PRAGMA query_only) did, or the progress handler's
			// look as it returned interrupted it (the driver runs it as
			// SQL text, whose statement stopCtx does not know). The
			// connection, inside a transaction database/sql does not
			// know of, is dropped.
			c.broken.Store(true)
		}
		return nil, c.interrupted(ctx, CutShort(ctx, err))
	}
	c.inTx.Store(true)
	c.ownTx = false
	return tx{raw: raw, broken: c.broken, c: c}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (r driver.Result, err error) {
	defer guard(c.broken, &err)
	if len(args) == 0 && (query == beginImmediate || query == commitTx || query == rollbackTx) {
		if how := ctx.Value(beginAgainKey{}); how != nil {
			switch query {
			case commitTx:
				return c.tryCommit()
			case rollbackTx:
				return c.rollbackKeep()
			}
			return c.beginAgain(ctx, how == againRestart)
		}
	}
	if err := c.ended(); err != nil {
		return nil, err
	}
	if len(args) == 0 && c.keep[query] {
		return c.execKept(ctx, query)
	}
	r, err = c.raw.(driver.ExecerContext).ExecContext(c.watch(ctx), query, args)
	if err != nil {
		return nil, c.failed(ctx, err)
	}
	if c.ended() != nil { // several statements, one of them a COMMIT or ROLLBACK
		return nil, &StmtError{Err: ErrStatementEndedTx, EndedTx: true}
	}
	return r, nil
}

// BeginAgain begins, on the connection of tx (a transaction begun with
// the default options on a handle whose name sets _txlock, as the store's
// writer), a new transaction in place of the one SQLite rolled back whole
// (a write in it interrupted, or failed for memory, disk or locks), for
// database/sql's tx to go on with: its later statements run in the new
// transaction, and its Commit or Rollback ends that. The connection is
// not given back to its pool meanwhile, so on a pool of one (the writer
// slot) no other caller of the process writes between the two
// transactions. It fails, changing nothing, when tx's transaction is
// still open; a BEGIN that failed leaves the connection outside any
// transaction, as before (tx's statements are refused: ErrRolledBack).
func BeginAgain(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(context.WithValue(ctx, beginAgainKey{}, againAfterRollback), beginImmediate)
	return err
}

// RestartTx is BeginAgain for a transaction whose owner can no longer be
// waited for (a handler left behind that ignores its context), which the
// caller ended with its Interrupter (WithTxInterrupter) first: the
// statement the owner runs in it, if any, has returned (database/sql runs
// one call at a time on a connection), what SQLite left of the
// transaction is rolled back (an interrupted write took it all; a
// transaction still open is rolled back now), and a new one begins in its
// place on the same connection, which no other caller of the process
// gets meanwhile. The Interrupter stays on: only statements run with a
// context from Unstopped (as ctx is made here) run in the new
// transaction, whose Commit or Rollback, through tx, ends it. A BEGIN
// that failed leaves the connection outside any transaction (tx's
// statements are refused; its Rollback has nothing to do).
func RestartTx(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(context.WithValue(Unstopped(ctx), beginAgainKey{}, againRestart), beginImmediate)
	return err
}

// TryCommit commits the transaction of tx (begun on the connection as
// BeginAgain's is) and leaves it open when the COMMIT fails with the
// transaction still open in SQLite (a DEFERRABLE INITIALLY DEFERRED
// foreign key broken, checked at COMMIT): tx's statements then go on in
// it, a ROLLBACK TO a savepoint of it among them, and its Commit or
// Rollback ends it, as before the COMMIT. database/sql's Commit gives the
// connection back to its pool whatever the COMMIT did, so the driver's
// Commit rolls such a transaction back, and with it everything it wrote
// before the failing writes (see the store's runner.finishTx). A COMMIT
// that ended the transaction without committing (SQLite rolled it back)
// leaves it as BeginAgain finds it, its failure marked (StmtError.EndedTx).
// Once TryCommit returned nil, tx's Commit ends database/sql's side and
// returns nil. Like the driver's Commit, it is not interrupted.
func TryCommit(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(context.WithValue(ctx, beginAgainKey{}, againKeep), commitTx)
	return err
}

// tryCommit is TryCommit on c.
func (c *conn) tryCommit() (driver.Result, error) {
	if !c.inTx.Load() || !c.ownTx {
		return nil, errors.New("litedriver: TryCommit outside a transaction the connection began itself")
	}
	if err := c.ended(); err != nil {
		return nil, &StmtError{Err: err, EndedTx: true}
	}
	if err := c.run(commitTx); err != nil {
		if c.ended() != nil {
			return nil, &StmtError{Err: err, EndedTx: true}
		}
		return nil, err
	}
	c.committed = true
	return keptResult{}, nil
}

// RollbackKeep rolls back the transaction of tx (begun on the connection
// as BeginAgain's is) and keeps the connection, as SQLite rolling it back
// whole does: BeginAgain may then begin again on it before any other
// caller of the process writes. tx's other statements are refused
// meanwhile (ErrRolledBack).
func RollbackKeep(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(context.WithValue(ctx, beginAgainKey{}, againKeep), rollbackTx)
	return err
}

// rollbackKeep is RollbackKeep on c.
func (c *conn) rollbackKeep() (driver.Result, error) {
	if !c.inTx.Load() || !c.ownTx {
		return nil, errors.New("litedriver: RollbackKeep outside a transaction the connection began itself")
	}
	if err := c.rollback(); err != nil {
		return nil, err
	}
	return keptResult{}, nil
}

// beginAgainKey marks the Exec of BeginAgain, RestartTx, TryCommit and
// RollbackKeep: only they begin again or end a transaction so (an
// application's BEGIN on the *sql.Tx is refused as any statement of an
// ended transaction is).
type beginAgainKey struct{}

const (
	againAfterRollback = iota + 1 // BeginAgain
	againRestart                  // RestartTx
	againKeep                     // TryCommit, RollbackKeep
)

// beginAgain is BeginAgain on c; restart: RestartTx, which first rolls
// back a transaction still open.
func (c *conn) beginAgain(ctx context.Context, restart bool) (driver.Result, error) {
	raw := c.raw.Raw()
	switch {
	case !c.inTx.Load() || !c.ownTx:
		return nil, errors.New("litedriver: BeginAgain outside a transaction the connection began itself")
	case restart && !raw.GetAutocommit():
		if err := c.rollback(); err != nil {
			c.broken.Store(true) // left inside the transaction: dropped once released
			return nil, fmt.Errorf("litedriver: RestartTx: the rollback failed: %w", err)
		}
	case !raw.GetAutocommit():
		return nil, errors.New("litedriver: BeginAgain: the transaction is still open")
	}
	old := raw.SetInterrupt(c.watch(ctx))
	err := c.run(c.begin)
	raw.SetInterrupt(old)
	if err != nil {
		if c.rollback() != nil {
			c.broken.Store(true)
		}
		return nil, c.interrupted(ctx, CutShort(ctx, err))
	}
	return keptResult{}, nil
}

// execKept runs query, one of the handle's kept statements, as the
// driver's Exec would (with ctx, the rowid reset first), but prepared once
// on the connection (conn.run).
func (c *conn) execKept(ctx context.Context, query string) (driver.Result, error) {
	raw := c.raw.Raw()
	raw.SetLastInsertRowID(0)
	old := raw.SetInterrupt(c.watch(ctx))
	err := c.run(query)
	raw.SetInterrupt(old)
	if err != nil {
		return nil, c.failed(ctx, err)
	}
	if c.ended() != nil { // a RELEASE of the savepoint that began the transaction
		return nil, &StmtError{Err: ErrStatementEndedTx, EndedTx: true}
	}
	return keptResult{id: raw.LastInsertRowID(), rows: raw.Changes()}, nil
}

// keptResult is an Exec's result, as the driver's.
type keptResult struct{ id, rows int64 }

func (r keptResult) LastInsertId() (int64, error) { return r.id, nil }
func (r keptResult) RowsAffected() (int64, error) { return r.rows, nil }

// ErrStatementEndedTx is what an Exec of several statements returns when
// one of them ended the transaction it ran in (COMMIT, ROLLBACK, END): the
// transaction is gone, whatever it did, and later statements are refused.
var ErrStatementEndedTx = errors.New("a statement ended the transaction it ran in (COMMIT, ROLLBACK or the like)")

func (c *conn) CheckNamedValue(arg *driver.NamedValue) error {
	return c.raw.(driver.NamedValueChecker).CheckNamedValue(arg)
}

// IsValid tells database/sql to discard a broken connection when it is
// released.
func (c *conn) IsValid() bool { return !c.broken.Load() }

func (c *conn) ResetSession(context.Context) error {
	if c.broken.Load() {
		return driver.ErrBadConn
	}
	return nil
}

type tx struct {
	raw    driver.Tx // nil: begun by conn.BeginTx itself (conn.begin), ended by conn.run
	broken *atomic.Bool
	c      *conn
}

// Commit refuses to commit on a connection that panicked: what the failed
// statement left behind is unknown, so the transaction is rolled back. A
// transaction SQLite already ended commits nothing: ErrRolledBack.
func (t tx) Commit() (err error) {
	defer guard(t.broken, &err)
	if t.broken.Load() {
		_ = t.Rollback()
		return fmt.Errorf("%w: the transaction was rolled back", ErrPanicked)
	}
	defer t.c.endTx()
	if t.c.committed { // by TryCommit
		return nil
	}
	if err := t.c.ended(); err != nil {
		return err
	}
	if t.raw != nil {
		return t.raw.Commit()
	}
	// As the driver's Commit: no interrupt (the connection's context is
	// the background's between calls), and a COMMIT that failed with the
	// transaction still open (a deferred foreign key broken) rolls it
	// back: a connection left inside it would run every later statement
	// in it.
	err = t.c.run(commitTx)
	if err != nil {
		_ = t.c.rollback()
	}
	return err
}

// Rollback of a transaction SQLite already ended has nothing to do.
func (t tx) Rollback() (err error) {
	defer guard(t.broken, &err)
	defer t.c.endTx()
	if t.c.ended() != nil {
		return nil
	}
	if t.raw != nil {
		return t.raw.Rollback()
	}
	return t.c.rollback()
}

// endTx forgets the transaction that ended: its interrupter no longer
// reaches the connection's statements.
func (c *conn) endTx() {
	c.inTx.Store(false)
	c.committed = false
	c.txStop = nil
}

type stmt struct {
	raw    driver.Stmt // nil until its first run (PrepareOnFirstRun)
	query  string
	broken *atomic.Bool
	c      *conn  // refuses to run in a transaction SQLite ended (conn.ended)
	busy   busyer // raw, for stopCtx
	// dollars says whether the statement has $-named parameters (see
	// numbered), once asked: dollarsUnknown until its first run.
	dollars uint8
}

const (
	dollarsUnknown = iota
	dollarsNone
	dollarsSome
)

var (
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

func (s *stmt) Close() (err error) {
	if s.raw == nil {
		return nil
	}
	defer guard(s.broken, &err)
	return s.raw.Close()
}

// NumInput is -1 (database/sql does not count the arguments) before the
// statement's first run, when SQLite has not parsed it yet.
func (s *stmt) NumInput() int {
	if s.raw == nil {
		return -1
	}
	return s.raw.NumInput()
}

// Exec and Query are never called: database/sql prefers the context forms.
func (s *stmt) Exec(args []driver.Value) (r driver.Result, err error) {
	if err := s.parsed(context.Background()); err != nil {
		return nil, err
	}
	defer guard(s.broken, &err)
	return s.raw.Exec(args) //nolint:staticcheck // required by driver.Stmt
}

func (s *stmt) Query(args []driver.Value) (r driver.Rows, err error) {
	if err := s.parsed(context.Background()); err != nil {
		return nil, err
	}
	defer guard(s.broken, &err)
	raw, err := s.raw.Query(args) //nolint:staticcheck // required by driver.Stmt
	if err != nil {
		return nil, err
	}
	return &rows{raw: raw.(rawRows), broken: s.broken, c: s.c, ctx: context.Background()}, nil
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (r driver.Result, err error) {
	defer guard(s.broken, &err)
	if err := s.c.ended(); err != nil {
		return nil, err
	}
	if err := s.parsed(ctx); err != nil {
		return nil, err
	}
	r, err = s.raw.(driver.StmtExecContext).ExecContext(s.c.watchStmt(ctx, s.busy), s.numbered(args))
	if err != nil {
		return nil, s.c.failed(ctx, err)
	}
	return r, nil
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (r driver.Rows, err error) {
	defer guard(s.broken, &err)
	if err := s.c.ended(); err != nil {
		return nil, err
	}
	if err := s.parsed(ctx); err != nil {
		return nil, err
	}
	raw, err := s.raw.(driver.StmtQueryContext).QueryContext(s.c.watchStmt(ctx, s.busy), s.numbered(args))
	if err != nil {
		return nil, s.c.failed(ctx, err)
	}
	write := s.autocommitWrite()
	if write {
		unwatch(ctx)
	}
	return &rows{raw: raw.(rawRows), broken: s.broken, write: write, c: s.c, ctx: ctx, busy: s.busy}, nil
}

// autocommitWrite reports whether the statement writes and runs on its own,
// outside a transaction: the one kind whose early reset skips SQLite's
// auto-checkpoint (see rows.Close). Inside a transaction the checkpoint runs
// at COMMIT, so a batch's statements are not stepped again.
func (s *stmt) autocommitWrite() bool {
	st, ok := s.raw.(interface{ Conn() *sqlite3.Conn })
	ro, ok2 := s.raw.(interface{ ReadOnly() bool })
	return ok && ok2 && !ro.ReadOnly() && st.Conn().GetAutocommit()
}

// numbered binds the nth positional argument to the parameter $n, as
// Postgres does. SQLite treats $1, $2 as names and numbers its parameters
// in order of first appearance, so "SET a = $2 WHERE id = $1" would bind
// the first argument to $2; the driver binds positional arguments by that
// number. A statement without $n parameters ("?", "?NNN", ":name") binds
// as before.
//
// Whether the statement has any $-named parameter is read once, from its
// parameters' names: most statements (every one sqlc generates, ?NNN) have
// none, and asking SQLite for each argument's "$n" copied the name into
// SQLite's memory and searched the statement's parameters, each run.
func (s *stmt) numbered(args []driver.NamedValue) []driver.NamedValue {
	bi, ok := s.raw.(interface{ BindIndex(name string) int })
	if !ok {
		return args
	}
	if s.dollars == dollarsUnknown {
		s.dollars = dollarsSome // unless the names say otherwise
		if bn, ok := s.raw.(interface {
			BindCount() int
			BindName(param int) string
		}); ok {
			s.dollars = dollarsNone
			for i := 1; i <= bn.BindCount(); i++ {
				if strings.HasPrefix(bn.BindName(i), "$") {
					s.dollars = dollarsSome
					break
				}
			}
		}
	}
	if s.dollars == dollarsNone {
		return args
	}
	var out []driver.NamedValue
	for i, a := range args {
		if a.Name != "" {
			continue
		}
		if id := bi.BindIndex("$" + strconv.Itoa(a.Ordinal)); id != 0 && id != a.Ordinal {
			if out == nil {
				out = slices.Clone(args)
			}
			out[i].Ordinal = id
		}
	}
	if out == nil {
		return args
	}
	return out
}

// CheckNamedValue is the driver statement's. database/sql asks it before
// the statement's run, so a statement not parsed yet is parsed here
// (interrupted only by the Interrupter, not by the run's ctx); if that
// fails, the argument passes as is and the run fails on the parse.
func (s *stmt) CheckNamedValue(arg *driver.NamedValue) error {
	if s.raw == nil && s.prepare(context.Background()) != nil {
		return nil
	}
	return s.raw.(driver.NamedValueChecker).CheckNamedValue(arg)
}

// rawRows is what the driver's rows implement.
type rawRows interface {
	driver.Rows
	driver.RowsColumnScanner
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypeScanType
}

type rows struct {
	raw    rawRows
	broken *atomic.Bool
	c      *conn           // marks a failed step (conn.failed)
	ctx    context.Context // the query's, which the driver steps it with
	busy   busyer          // the statement (see stopCtx)
	// write marks a statement that writes (INSERT/UPDATE/DELETE ...
	// RETURNING) in autocommit mode, wrote once its first step returned a
	// row, done once it stepped to its end (or failed).
	write, wrote, done bool
}

var _ rawRows = (*rows)(nil)

func (r *rows) Columns() []string { return r.raw.Columns() }

// watch points the connection's stopCtx at the query's context before a
// step. A write outside a transaction made all its changes at its first
// step (RETURNING rows are buffered) and commits at its last: once the
// first returned a row, the rest only reads the buffered rows out and
// commits, and runs to its end whatever the context says. An interrupt
// there would fail the call after its changes were made, and a reset
// (database/sql's Close) would then commit them, a failed call's write
// stored; a context that ends later than the changes is too late.
func (r *rows) watch() {
	if r.wrote {
		r.c.unwatched(r.busy)
		return
	}
	r.c.watchStmt(r.ctx, r.busy)
}

// stepped records a step's outcome err.
func (r *rows) stepped(err error) error {
	r.done = err != nil
	r.wrote = r.write && err == nil
	if err != nil && err != io.EOF {
		return r.c.failed(r.ctx, err)
	}
	return err
}

// Close steps a write statement to its end before resetting it. SQLite runs
// the WAL auto-checkpoint (and every wal hook) only when sqlite3_step
// returns SQLITE_DONE in autocommit mode, never when a statement is reset
// early, and QueryRow resets after the first row: a write read with
// QueryRow (each :one RETURNING write of the store) committed without ever
// checkpointing, and a workload of such writes grew the WAL without bound.
// Its changes were all made at the first step (RETURNING rows are
// buffered), so stepping on only reads what is left and lets SQLite finish
// as an Exec would, uninterrupted (see watch). A write never stepped is not
// started here: nobody reads it.
func (r *rows) Close() (err error) {
	defer guard(r.broken, &err)
	for r.wrote && !r.done {
		r.watch()
		if err := r.stepped(r.raw.NextRow()); err != nil && err != io.EOF {
			return errors.Join(err, r.raw.Close())
		}
	}
	return r.raw.Close()
}

func (r *rows) Next(dest []driver.Value) (err error) {
	defer guard(r.broken, &err)
	r.watch()
	return r.stepped(r.raw.Next(dest))
}

func (r *rows) NextRow() (err error) {
	defer guard(r.broken, &err)
	r.watch()
	return r.stepped(r.raw.NextRow())
}

func (r *rows) ScanColumn(ctx driver.ScanContext, i int, dest any) (err error) {
	defer guard(r.broken, &err)
	return r.raw.ScanColumn(ctx, i, dest)
}

func (r *rows) ColumnTypeDatabaseTypeName(i int) string { return r.raw.ColumnTypeDatabaseTypeName(i) }

func (r *rows) ColumnTypeNullable(i int) (nullable, ok bool) { return r.raw.ColumnTypeNullable(i) }

func (r *rows) ColumnTypeScanType(i int) (typ reflect.Type) { return r.raw.ColumnTypeScanType(i) }
