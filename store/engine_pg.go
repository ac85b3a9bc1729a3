package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/schema"
)

// pgEngine runs the store on PostgreSQL through a pgx pool.
type pgEngine struct {
	pool    *pgxpool.Pool
	owned   bool     // created by Open, so closed by Close
	conns   *pgConns // the owned pool's connections; nil on OpenPool's
	horizon *horizon
	gate    *wakeGate
	learner learner
	persist persister
	stall   *stallWatch
	// maxConns is the pool's size; txSlots bounds the transactions that
	// the transactional handlers the store runs (WorkTx, RunJobTx, a group
	// member's ConsumeTx) hold open at once on it to one fewer (see
	// Store.handlerTxSlots).
	maxConns int
	txSlots  chan struct{}
	// lockWaits bounds the pooled connections that worker heartbeats hold
	// waiting for row locks other transactions hold (heartbeatLocked) to a
	// quarter of the pool (at least one), so that an application
	// transaction holding many running jobs' rows does not park the whole
	// pool behind it.
	lockWaits chan struct{}
	// citusMark: on Citus, a transaction's first alkstore statement is
	// preceded by the commit marker (citusMarkingTx).
	citusMark bool
	// auto is the ops of auto-commit statements on the pool, built once:
	// building them for every call cost each enqueue two allocations.
	auto ops
}

// migrationLockID keeps alkstore's migration lock apart from goose's default
// one, which the application may use for its own migrations.
const migrationLockID = 0x616c6b73746f7265 // "alkstore"

func openPostgres(ctx context.Context, dsn string, c config) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// A URL that does not parse is bad input, as a key=value DSN that
		// does not parse is (Open): no server was asked.
		return nil, opErr("open", "", fmt.Errorf("%w: %w", ErrInvalidArgument, err))
	}
	if c.maxConns > 0 {
		cfg.MaxConns = int32(min(c.maxConns, math.MaxInt32))
	}
	setSessionDefaults(cfg)
	conns := trackConns(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, opErr("open", "", err)
	}
	s, err := newPostgres(ctx, pool, true, c)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.eng.(*pgEngine).conns = conns
	return s, nil
}

// readCommitted is how the store begins every transaction of its own
// (Begin, InTx, WorkTx's, and those that make a call atomic): READ
// COMMITTED, as the README promises, whatever the database's or role's
// default_transaction_isolation. Under REPEATABLE READ or SERIALIZABLE the
// README's compacted counter (4 incrementers × 25 in InTx) failed 38-54 of
// its 100 calls with SQLSTATE 40001. pgx sends BEGIN ISOLATION LEVEL READ
// COMMITTED: the same one round trip as BEGIN. A transaction the
// application adopts (AdoptPgx) keeps the level it was begun with.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// setSessionDefaults makes each connection of the pool Open makes run the
// SessionDefaults query (queries/pg/schema.sql) when it connects: READ
// COMMITTED for the store's auto-commit statements (claims and settles
// failed with 40001 under a SERIALIZABLE default) and no
// idle_session_timeout. Set by a statement, not as startup parameters:
// a server before PostgreSQL 14 refuses an unknown one
// (idle_session_timeout), and so does a pooler such as PgBouncer by
// default. One round trip per new connection. A pool the application
// passes to OpenPool keeps its own settings (README: Engine differences).
func setSessionDefaults(cfg *pgxpool.Config) {
	connected := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if connected != nil {
			if err := connected(ctx, conn); err != nil {
				return err
			}
		}
		return pgdb.New(conn).SessionDefaults(ctx)
	}
}

// pgConns is the set of connections an owned pool holds open, kept by the
// pool's connect and close hooks (never per operation), so that a hard
// stop can cancel what runs on them.
type pgConns struct {
	mu  sync.Mutex
	set map[*pgx.Conn]struct{}
}

// ownConns holds the connections of every pool Open made in this process
// (each pgConns set's too), each with whether a transaction on it was
// adopted (AdoptPgx, by any store): a publish in an adopted transaction
// wakes at no commit of a store's, only by its NOTIFY, so the store whose
// pool the connection is in hears that connection's stream wakes
// (pgConns.has) for the rest of its life, as another process's; its echo
// reads are a small price.
var ownConns = struct {
	mu      sync.Mutex
	adopted map[*pgx.Conn]bool
}{adopted: map[*pgx.Conn]bool{}}

// adoptConn marks conn adopted if a pool Open made holds it.
func adoptConn(conn *pgx.Conn) {
	ownConns.mu.Lock()
	if _, ok := ownConns.adopted[conn]; ok {
		ownConns.adopted[conn] = true
	}
	ownConns.mu.Unlock()
}

func dropOwnConn(conn *pgx.Conn) {
	ownConns.mu.Lock()
	delete(ownConns.adopted, conn)
	ownConns.mu.Unlock()
}

// trackConns hooks cfg so the returned set follows its pool's connections.
func trackConns(cfg *pgxpool.Config) *pgConns {
	c := &pgConns{set: map[*pgx.Conn]struct{}{}}
	connected, closing := cfg.AfterConnect, cfg.BeforeClose
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if connected != nil {
			if err := connected(ctx, conn); err != nil {
				return err
			}
		}
		ownConns.mu.Lock()
		ownConns.adopted[conn] = false
		ownConns.mu.Unlock()
		c.mu.Lock()
		c.set[conn] = struct{}{}
		c.mu.Unlock()
		return nil
	}
	cfg.BeforeClose = func(conn *pgx.Conn) {
		c.mu.Lock()
		delete(c.set, conn)
		c.mu.Unlock()
		dropOwnConn(conn)
		if closing != nil {
			closing(conn)
		}
	}
	return c
}

// forget drops a connection taken out of the pool for good (hijacked).
func (c *pgConns) forget(conn *pgx.Conn) {
	c.mu.Lock()
	delete(c.set, conn)
	c.mu.Unlock()
	dropOwnConn(conn)
}

// has reports whether pid is the backend of one of the pool's connections
// to listener's server (pids are only unique on one server) that never
// carried an adopted transaction (ownConns).
func (c *pgConns) has(pid uint32, listener *pgx.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.set {
		if conn.PgConn().PID() == pid && remoteAddr(conn) == remoteAddr(listener) {
			ownConns.mu.Lock()
			adopted := ownConns.adopted[conn]
			ownConns.mu.Unlock()
			return !adopted
		}
	}
	return false
}

func remoteAddr(conn *pgx.Conn) string {
	if a := conn.PgConn().Conn().RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// cancelAll asks the server to cancel whatever statement runs on each of
// the pool's connections (a cancel request on a connection of its own per
// backend; an idle backend ignores it).
func (c *pgConns) cancelAll() {
	c.mu.Lock()
	pgcs := make([]*pgconn.PgConn, 0, len(c.set))
	for conn := range c.set {
		pgcs = append(pgcs, conn.PgConn())
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, pc := range pgcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
			defer cancel()
			_ = pc.CancelRequest(ctx)
		}()
	}
	wg.Wait()
}

// cancelUntil asks the server to cancel the statement running on pc, and
// again every cancelAgain until returned is closed (the statement
// returned): the server drops a cancel that reaches the backend before
// the statement does (one for a backend reading its next command), as a
// goroutine descheduled between taking its connection and sending the
// statement lets it. Only for a connection closed afterwards: a cancel
// still on its way could cut its next statement.
func cancelUntil(pc *pgconn.PgConn, returned <-chan struct{}) {
	again := time.NewTicker(cancelAgain)
	defer again.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_ = pc.CancelRequest(ctx)
		cancel()
		select {
		case <-returned:
			return
		case <-again.C:
		}
	}
}

// cancelAgain is how often cancelUntil sends its cancel again.
const cancelAgain = 50 * time.Millisecond

// interrupt cancels the statements running on the store's own pool (a hard
// stop); a pool the application passed to OpenPool is not the store's to
// cancel.
func (e *pgEngine) interrupt() {
	if e.conns != nil {
		e.conns.cancelAll()
	}
}

// endLockWaits does nothing: a statement of the store's waits for a row
// another transaction holds only to ack finished jobs apart, which a hard
// stop gives up on by itself (heldAcks.drain, which reports it:
// lifecycle.locksHeld).
func (e *pgEngine) endLockWaits() {}

func (e *pgEngine) lockWaitsEnded() (writes, reads bool) { return false, false }

func newPostgres(ctx context.Context, pool *pgxpool.Pool, owned bool, c config) (*Store, error) {
	citus, err := detectCitus(ctx, pool, c.log)
	if err != nil {
		return nil, opErr("open", "", err)
	}
	mpool, err := migrationPool(ctx, pool, citus)
	if err != nil {
		return nil, opErr("open", "", err)
	}
	err = migratePostgres(ctx, mpool, c.migrate)
	var citusMark bool
	if err == nil {
		citusMark, err = citusCommitMarker(ctx, mpool, citus, c.migrate, c.log)
	}
	if mpool != pool {
		mpool.Close()
	}
	if err != nil {
		return nil, opErr("open", "", err)
	}
	eng := &pgEngine{pool: pool, owned: owned, horizon: &horizon{}, citusMark: citusMark}
	eng.maxConns = int(pool.Config().MaxConns)
	eng.txSlots = make(chan struct{}, max(1, eng.maxConns-1))
	eng.lockWaits = make(chan struct{}, max(1, eng.maxConns/4))
	eng.auto = pgOps{q: pgdb.New(pool), eng: eng}
	eng.stall = &stallWatch{after: c.stallWarning, log: c.log, holder: pgOps{q: pgdb.New(pool), eng: eng}.oldestWriteTransaction}
	eng.learner.ctx, eng.learner.cancel = context.WithCancel(context.Background())
	eng.persist.ctx, eng.persist.cancel = context.WithCancel(context.Background())
	eng.persist.log = c.log
	eng.gate = &wakeGate{send: func(topic string) { sendTrailingWake(pool, topic) }}
	return newStore(eng, c, pool.Config().ConnConfig.Password), nil
}

// sendTrailingWake sends the gate's trailing NOTIFY for topic, best effort
// (a closed store has no listeners left), but not lost to a dead pooled
// connection: the pool hands out a connection used within the last second
// without pinging it, so after the server ended the pool's sessions (a
// restart, a failover, pg_terminate_backend) each idle one fails its next
// statement once, and the pool then drops it. After a failure it tries
// once more than the pool has idle connections; a repeated NOTIFY only
// wakes its receivers for a read more.
func sendTrailingWake(pool *pgxpool.Pool, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	payload := wake.EncodeWake(topic)
	if pgdb.New(pool).Notify(ctx, payload) == nil {
		return
	}
	// The failed connection is gone; each idle one may be dead too, and
	// one more try opens a fresh one.
	for retries := pool.Stat().IdleConns() + 1; retries > 0 && ctx.Err() == nil; retries-- {
		if pgdb.New(pool).Notify(ctx, payload) == nil {
			return
		}
	}
}

func migratePostgres(ctx context.Context, pool *pgxpool.Pool, apply bool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	m := migration{
		dialect: goose.DialectPostgres,
		files:   schema.Postgres,
		table:   schema.PostgresVersionTable,
		cli:     `goose -table ` + schema.PostgresVersionTable + ` -dir schema/pg postgres "$DSN" up`,
		objects: func(ctx context.Context) (schemaObjects, error) {
			r, err := pgdb.New(pool).SchemaObjects(ctx, schema.PostgresVersionTable)
			return schemaObjects{versionTable: r.HasVersionTable, tables: r.HasTables, defaultTable: r.DefaultVersionTable}, err
		},
		prepare: func(ctx context.Context) (lock.SessionLocker, error) {
			bootstrap, err := schema.PostgresBootstrap()
			if err != nil {
				return nil, err
			}
			// CREATE SCHEMA IF NOT EXISTS is not safe against itself: when
			// processes open a fresh database at once, all but one may fail
			// with a unique violation, which means the schema now exists.
			if _, err := db.ExecContext(ctx, bootstrap); err != nil && !isUniqueViolation(err) {
				return nil, fmt.Errorf("create schema alkstore: %w", err)
			}
			// Probe every second (goose's default is every 5 s) for up to 5
			// minutes: processes that start together wait for the first
			// one's migration.
			return lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID), lock.WithLockTimeout(1, 300))
		},
	}
	return migrateOrCheck(ctx, db, m, apply)
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func (e *pgEngine) kind() string { return "pg" }

func (e *pgEngine) readOps() ops  { return e.auto }
func (e *pgEngine) writeOps() ops { return e.auto }

func (e *pgEngine) begin(ctx context.Context) (driverTx, error) {
	tx, err := e.pool.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	// Nothing has run in the transaction yet, so it holds no id: every
	// offset drawn is older than its id will be (see pgTxState.offer).
	txs := &pgTxState{drawnBefore: e.horizon.drawn.Load()}
	g := e.txGuard(tx, false)
	return pgTx{tx: tx, g: g, o: &pgOps{q: pgdb.New(g), eng: e, inTx: true, txs: txs, owed: &txs.owed}}, nil
}

// txGuard guards a read-write transaction's statements (see txGuard): on
// Citus, marked for two-phase commit (citusMarkingTx).
func (e *pgEngine) txGuard(tx pgx.Tx, adopted bool) *txGuard {
	if !e.citusMark {
		return newTxGuard(tx, tx)
	}
	return newTxGuard(&citusMarkingTx{Tx: tx, checkReadOnly: adopted}, tx)
}

// wrapTx adopts a caller's transaction (AdoptPgx): the store never sees it
// commit, and does not know what ran in it before.
func (e *pgEngine) wrapTx(tx pgx.Tx) driverTx {
	txs := &pgTxState{adopted: true}
	txs.foreign.Store(true)
	g := e.txGuard(tx, true)
	return pgTx{tx: tx, g: g, o: &pgOps{q: pgdb.New(g), eng: e, inTx: true, txs: txs}}
}

func (e *pgEngine) close(abandoned bool) {
	if !abandoned {
		e.gate.flush()
	}
	e.learner.stop()
	e.persist.stop(abandoned)
	switch {
	case !e.owned:
		if abandoned {
			go e.gate.flush()
		}
	case abandoned:
		// pgxpool waits for every connection to come back, and the
		// trailing wakes for a server that may not answer (its statements
		// were given up: each wake waits up to rollbackTimeout).
		go func() { e.gate.flush(); e.pool.Close() }()
	default:
		e.pool.Close()
	}
}

// pgOps maps the store's operations onto the generated Postgres queries.
type pgOps struct {
	q    *pgdb.Queries // on the pool, or on the transaction when inTx
	eng  *pgEngine
	inTx bool
	txs  *pgTxState // the transaction's, when it is a Tx's; nil otherwise
	// owed collects, in a transaction the store commits, the topics written
	// without a wake, for trailing wakes after the commit; nil outside one.
	owed *owedWakes
}

// pgTxState is what the store knows about one Tx's transaction.
type pgTxState struct {
	// adopted: the caller began it and commits it, so no wake can follow
	// its commit (see wake).
	adopted bool
	// foreign: statements the store did not write may have run in it
	// (adopted, or business SQL through Tx); ageUsed: a SettledSnapshot
	// ran in it. Either means its next SettledSnapshot cannot teach the
	// tracker (see mayLearn).
	foreign, ageUsed atomic.Bool
	// owed: topics written without a wake, owed one after the commit.
	owed owedWakes
	// drawnBefore: the newest offset the store knew drawn before the
	// transaction could take its id (read right after its BEGIN; 0 for an
	// adopted one, which may hold an id already). release and begin are
	// the store's horizonRelease and the Tx's begin number there (begun);
	// offered: its candidate was offered (offer).
	drawnBefore int64
	release     *horizonRelease
	begin       uint64
	offered     atomic.Bool
}

// begun tells a transaction the store began its begin number (see
// horizonRelease), taken before its BEGIN.
func (t pgTx) begun(r *horizonRelease, begin uint64) {
	t.o.txs.release, t.o.txs.begin = r, begin
}

// offer runs after a publish with the transaction id its statement
// returned (one that offering chose): in a Tx the store began, the first
// such publish that worked offers the tracker the
// candidate (drawnBefore, the Tx's id), which settles while the Tx still
// runs once every older transaction has ended (see horizon), and wakes the
// held readers this Tx may be holding, as its end would (horizonRelease).
// Without it, a receiver that read after the Tx took its id held the events
// the store published before the Tx began until the Tx ended.
func (o pgOps) offer(txid pgtype.Uint64) {
	t := o.txs
	if !o.offering() || !txid.Valid || txid.Uint64 > math.MaxInt64 || t.offered.Swap(true) {
		return
	}
	if o.eng.horizon.offer(t.drawnBefore, int64(txid.Uint64)) {
		t.release.release(t.begin)
	}
}

// offering reports whether a publish now may offer the Tx's candidate
// (offer): in a Tx the store began, until its first publish that worked.
// Only then does a publish use the statement that also returns the
// transaction id (PublishEventWithTxid and its twins): the extra result
// column cost every publish about 3% of its server instructions.
func (o pgOps) offering() bool {
	t := o.txs
	return t != nil && t.release != nil && t.drawnBefore > 0 && !t.offered.Load()
}

// wake returns the NOTIFY payload a write to topic carries. Writes the
// store sees commit go through the throttle, which follows skipped ones
// with a trailing wake after their commit (the write's statement then
// calls sent); the commit of an adopted transaction is never seen, so each
// of its writes notifies in its own statement (commit-atomic, and heard in
// this process through the feed).
func (o pgOps) wake(topic string) string {
	if o.txs != nil && o.txs.adopted {
		return wake.EncodeWake(topic)
	}
	return o.eng.gate.wake(topic)
}

// wakeRefundable is wake for a write whose statement may send nothing
// (wakeGate.wakeRefundable); refund gives back what it did not send.
func (o pgOps) wakeRefundable(topic string) (string, wakeGrant) {
	if o.txs != nil && o.txs.adopted {
		return wake.EncodeWake(topic), wakeGrant{}
	}
	return o.eng.gate.wakeRefundable(topic)
}

// carry is wake for an auto-commit write that reports its commit to
// carried (wakeGate.carry); in a transaction, wake.
func (o pgOps) carry(topic string) (string, uint64) {
	if o.inTx {
		return o.wake(topic), 0
	}
	return o.eng.gate.carry(topic)
}

// carryBatch is carry for an auto-commit batch (wakeGate.carryBatch).
func (o pgOps) carryBatch(topic string) (string, uint64) {
	if o.inTx {
		return o.wake(topic), 0
	}
	return o.eng.gate.carryBatch(topic)
}

// carried is sent for a write carry gave payload and seq: when its
// statement worked (an auto-commit write: it committed), its NOTIFY
// announced the writes owed a wake before it began.
func (o pgOps) carried(topic, payload string, seq uint64, err error) {
	o.sent(topic, payload)
	if seq != 0 && err == nil {
		o.eng.gate.covered(topic, seq)
	}
}

// sent runs after the statement of a write to topic that carried payload
// (wake's), whether it worked or not: a write that carried no wake is owed
// a trailing one after its commit, which for an auto-commit statement has
// happened (or never will: a wake more is harmless), and in a transaction
// happens at its commit (pgTx.commit, atomically).
func (o pgOps) sent(topic, payload string) {
	switch {
	case payload != "":
	case o.owed != nil:
		o.owed.add(topic)
	case !o.inTx:
		o.eng.gate.owe(topic)
	}
}

// atomically runs fn in one transaction when need is set: the caller's, or
// a new one from the pool. Single statements need none.
func (o pgOps) atomically(ctx context.Context, need bool, fn func(pgOps) error) error {
	if !need || o.inTx {
		return fn(o)
	}
	owed := &owedWakes{}
	err := pgx.BeginTxFunc(ctx, o.eng.pool, readCommitted, func(tx pgx.Tx) error {
		return fn(pgOps{q: pgdb.New(tx), eng: o.eng, inTx: true, owed: owed})
	})
	if err == nil {
		owed.paid(o.eng.gate)
	}
	return err
}

// allOrNone is atomically for a batch form that may write part of itself
// before it fails (a batch with unique jobs: several statements): inside
// the caller's transaction it runs after a savepoint and rolls back to it
// on failure, so nothing of the batch stays in that transaction and the
// transaction is usable again (PostgreSQL aborts a transaction at a failed
// statement until it rolls back to a savepoint). Two round trips more, only
// for these batches: a one-statement batch fails whole without one.
func (o pgOps) allOrNone(ctx context.Context, need bool, fn func(pgOps) error) error {
	if !need || !o.inTx {
		return o.atomically(ctx, need, fn)
	}
	if err := o.q.SavepointBatch(ctx); err != nil {
		return err
	}
	// The release and the rollback run even when ctx ended: a release that
	// pgx refused would leave the batch in the caller's transaction
	// although the call failed. The rollback fails when the transaction
	// itself is gone (a statement cut short by ctx closes the connection).
	sctx := uninterrupted(ctx)
	err := fn(o)
	if err == nil {
		if err = o.q.ReleaseBatch(sctx); err == nil {
			return nil
		}
	}
	if rerr := o.q.RollbackToBatch(sctx); rerr == nil {
		_ = o.q.ReleaseBatch(sctx)
	}
	return err
}

// allInserted checks a multi-row INSERT ... RETURNING id of want rows
// that ends with alkstore.all_inserted (EnqueueJobs, EnqueueJobsAlike,
// PublishEvents), all or none in one statement: when an application's
// trigger skipped rows (a BEFORE INSERT trigger returning NULL for a row),
// the statement itself fails, so none of it commits (a caller that retried
// would otherwise store the other rows twice) and a Tx's transaction is
// aborted, as by any failed statement (a batch with unique jobs counts its
// rows in Go instead, see placeUnique, and runs after a savepoint, see
// allOrNone). Its error becomes errSkippedRows'. The ids are drawn in
// input order, but RETURNING's row order is not promised, so they come
// back sorted.
func allInserted(want int, ids []int64, err error) ([]int64, error) {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgSkippedRows:
		return nil, &notStoredError{text: pgErr.Message + ": the batch is refused, all or none", cause: err}
	case err != nil:
		return nil, err
	case len(ids) != want: // a statement without the check
		return nil, errSkippedRows(strconv.Itoa(want-len(ids)), want)
	}
	slices.Sort(ids)
	return ids, nil
}

// pgSkippedRows is the SQLSTATE alkstore.all_inserted raises (schema 00024).
const pgSkippedRows = "AKSKP"

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// uninterruptedTimeout bounds a statement that must not be cancelled half
// way (see pgOps.claim).
const uninterruptedTimeout = time.Minute

func clampLimit(limit int) int32 { return int32(min(limit, math.MaxInt32)) }

// pgTx is a pgx transaction, begun by the store or adopted.
type pgTx struct {
	tx pgx.Tx
	// g: every statement the store runs on tx goes through it (see
	// txGuard), o.q's too.
	g *txGuard
	// o is a pointer so that each operation's ops (the interface) is o
	// itself: a pgOps value would be copied to the heap at every call.
	o *pgOps
}

func (t pgTx) ops() ops { return t.o }
func (t pgTx) rollback(ctx context.Context) error {
	t.g.endApp() // the application's rows still open: closed, as on SQLite
	if t.g.lockOwn() {
		defer t.g.mu.Unlock()
	}
	return t.tx.Rollback(ctx)
}

// abandon is the store's rollback from another goroutine than the Tx's
// user: serialised with the statement that user may be running (txGuard).
func (t pgTx) abandon(ctx context.Context) error { return t.g.end(ctx, t.tx.Rollback) }

// endedAfter: PostgreSQL refuses every statement of a transaction a failed
// statement aborted (25P02), so nothing runs outside the transaction. A
// statement cut short by its ctx closes the connection (pgx's way of
// stopping it), which ends the transaction on the server: every later use
// of the Tx is refused then, as on SQLite, instead of failing with "conn
// closed". So is one after a statement that ended the transaction itself.
func (t pgTx) endedAfter(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		// Ended through the pgx.Tx: its connection may serve another
		// caller by now, so it is not looked at (driverErr says ErrTxDone).
		return nil
	}
	if errors.Is(err, errConnBusy) {
		// Refused before it ran, because another statement of the
		// transaction (or the store's own rows) holds the connection: not
		// looked at either (that statement's goroutine uses it), and the
		// transaction goes on.
		return nil
	}
	c := t.tx.Conn()
	switch {
	case c == nil:
		return nil
	case c.IsClosed():
		return errPgConnClosed
	case c.PgConn().TxStatus() == 'I':
		return errStatementEndedTx
	}
	return nil
}

// errPgConnClosed is why a Tx whose connection closed is gone.
var errPgConnClosed = errors.New("the transaction's connection closed (as it does when a statement is cut short by its context), so PostgreSQL rolled the transaction back: nothing more runs in it")

func (t pgTx) commit(ctx context.Context) error {
	t.g.endApp() // the application's rows still open: closed, as on SQLite
	locked := t.g.lockOwn()
	err := t.tx.Commit(ctx)
	if locked {
		t.g.mu.Unlock()
	}
	if err != nil && t.o.eng.citusMark {
		err = citusCommitErr(err)
	}
	if err == nil && t.o.owed != nil {
		t.o.owed.paid(t.o.eng.gate) // the writes that went without a wake
	}
	return err
}

// Business SQL may call age(): the transaction's reads stop teaching the
// tracker (see pgOps.mayLearn).
func (t pgTx) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	t.o.txs.foreign.Store(true)
	if err := t.g.enter(); err != nil {
		return 0, err
	}
	tag, err := t.tx.Exec(ctx, sql, args...)
	ended := err == nil && t.tx.Conn().PgConn().TxStatus() == 'I'
	t.g.mu.Unlock()
	if ended {
		// Several statements, one of them a COMMIT or ROLLBACK that
		// refuseTxControl missed: the rest committed on their own.
		return tag.RowsAffected(), errStatementEndedTx
	}
	return tag.RowsAffected(), err
}

func (t pgTx) query(ctx context.Context, sql string, args ...any) (Rows, error) {
	t.o.txs.foreign.Store(true)
	// The application's rows, which it may keep open beside its next
	// statement, or past the end of the transaction (see appRows).
	r, err := t.g.appQuery(ctx, false, sql, args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (t pgTx) queryRow(ctx context.Context, sql string, args ...any) Row {
	t.o.txs.foreign.Store(true)
	return scanRow{t.g.appQueryRow(ctx, sql, args...)}
}

// scanRow makes a driver row's "no rows" match ErrNotFound.
type scanRow struct {
	r interface{ Scan(...any) error }
}

func (r scanRow) Scan(dest ...any) error { return noRows(r.r.Scan(dest...)) }

// ruleDomains maps a domain whose constraints are a table's rules to the
// table and the table's CHECK that casts a row to the domain.
// (The head rule of compaction_heads was the domain alkstore.head_nulls
// from schema 00033 to 00035; since 00036 it is NOT NULL on schema_version
// and compaction_rank, whose errors name the table themselves.)
var ruleDomains = map[string]struct{ table, check string }{
	"job_rules": {"jobs", "jobs_rules_check"}, // schema 00030
}

// jobRuleErr names the table of a broken rule on PostgreSQL. Since schema
// 00030 the rules of a jobs row are the constraints of the domain
// alkstore.job_rules, which the table's CHECK jobs_rules_check casts the
// row to, so PostgreSQL reports "value for domain alkstore.<domain>
// violates check constraint ..." with the rule's old constraint name and
// SQLSTATE 23514, but no table. The error gains the table in its text and
// in the *pgconn.PgError's TableName, as a table CHECK reports it.
func jobRuleErr(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "23514" || pe.TableName != "" || pe.SchemaName != "alkstore" {
		return err
	}
	d, ok := ruleDomains[pe.DataTypeName]
	if !ok {
		return err
	}
	pe.TableName = d.table
	return fmt.Errorf("a row of alkstore.%s breaks its rule %s (the table's CHECK %s casts the row to the domain alkstore.%s): %w", d.table, pe.ConstraintName, d.check, pe.DataTypeName, err)
}
