package store

// The read horizon on PostgreSQL: reads stop below offsets whose
// transactions may still commit (see horizon.go).

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// settled returns the horizon the next read on o may use. A read inside a
// transaction uses only the transaction's own connection: it must never
// wait for a second connection of the pool, which other transactions may
// hold while they wait for theirs. When its snapshot cannot teach the
// tracker (see mayLearn) and it holds events back, the store learns from a
// pool snapshot in the background, for later reads.
func (o pgOps) settled(ctx context.Context) (int64, error) {
	// Committed events above the horizon usually wait only for a short
	// transaction still in flight somewhere in the cluster: outside a
	// transaction, look again a moment later (twice at most) rather than
	// return a short page.
	for attempt := 1; ; attempt++ {
		snap, err := o.q.SettledSnapshot(ctx)
		if err != nil {
			return 0, err
		}
		learn := o.mayLearn(snap)
		hz := o.eng.horizon.observe(snap, learn)
		o.eng.persist.maybe(o.eng)
		if o.inTx {
			if !learn && hz < snap.VisibleHead {
				o.eng.learner.learn(o.eng)
			}
			return hz, nil
		}
		if hz >= snap.VisibleHead || attempt == settleAttempts {
			o.eng.stall.observe(ctx, hz, snap.VisibleHead)
			return hz, nil
		}
		t := time.NewTimer(time.Duration(attempt) * 300 * time.Microsecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// settleAttempts bounds the snapshots one read takes while events above the
// horizon settle.
const settleAttempts = 3

// mayLearn says whether snap, which o just took, may teach the tracker its
// candidate: whether xmax + age(xmax) is the next unassigned transaction id
// as of a moment after the snapshot. Outside a transaction it always is.
// PostgreSQL fixes age()'s reference at its first call in a transaction, to
// the transaction's own id if it has one, else to the next unassigned id of
// that moment. So inside a transaction it is only when the transaction holds
// no id and no earlier statement in it called age() (under READ COMMITTED,
// an earlier statement's snapshot is older than this one), which the store
// only knows of a transaction it began and in which only its own statements
// ran. Every SettledSnapshot calls age(), so only the first one may learn.
func (o pgOps) mayLearn(snap pgdb.SettledSnapshotRow) bool {
	return o.mayLearnBefore() && !snap.HasXid
}

// mayLearnBefore is mayLearn's half known before the statement runs (the
// snapshot's HasXid is not), for a statement that computes the horizon
// itself (ReadEvents); like mayLearn it counts as the transaction's call of
// age().
func (o pgOps) mayLearnBefore() bool {
	if !o.inTx {
		return true
	}
	if o.txs == nil {
		return false
	}
	first := !o.txs.ageUsed.Swap(true)
	return first && !o.txs.foreign.Load()
}

// learner takes pool snapshots in the background for reads inside
// transactions that could not teach the tracker themselves: one at a time,
// and never one that a transaction waits for.
type learner struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	busy   bool
	closed bool
	wg     sync.WaitGroup
}

// learn starts a background snapshot unless one is under way.
func (l *learner) learn(e *pgEngine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy || l.closed {
		return
	}
	l.busy = true
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if snap, err := pgdb.New(e.pool).SettledSnapshot(l.ctx); err == nil {
			e.horizon.observe(snap, true)
			e.persist.maybe(e)
		}
		l.mu.Lock()
		l.busy = false
		l.mu.Unlock()
	}()
}

// stop ends a background snapshot under way and refuses new ones.
func (l *learner) stop() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
}

func (o pgOps) settledHorizon(ctx context.Context) (int64, error) { return o.settled(ctx) }

func (o pgOps) firstEventAbove(ctx context.Context, offset int64) (*time.Time, error) {
	rows, err := o.q.FirstEventAbove(ctx, offset)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0].CreatedAt, nil
}

func (o pgOps) oldestWriteTransaction(ctx context.Context) (*WriteTransaction, error) {
	rows, err := o.q.OldestWriteTransaction(ctx)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	r := rows[0]
	tx := &WriteTransaction{PID: int(r.Pid), Database: r.Datname, State: r.State}
	if r.XactStart != nil {
		tx.Age = max(r.Now.Sub(*r.XactStart), 0)
	}
	if r.QueryStart != nil {
		tx.QueryStart = *r.QueryStart
	}
	return tx, nil
}

// persister writes the newest candidate the store proved settled into the
// database's one-row settled_candidate (schema 00050), for stores that
// have never read: every read returns the row, and its candidate settles
// for them at once (docs/design/stream-horizon.md, step 6). One write at a
// time, at most one a second, on the pool in the background: a read never
// waits for it. A failed write (a role without UPDATE on the table) is
// logged once and tried again a minute later.
type persister struct {
	ctx       context.Context
	cancel    context.CancelFunc
	log       *slog.Logger
	busy      atomic.Bool
	notBefore atomic.Int64 // unix nanoseconds: no write starts earlier
	nextFetch atomic.Int64 // unix nanoseconds: no held read fetches the row earlier
	warned    atomic.Bool
	mu        sync.Mutex
	closed    bool
	wg        sync.WaitGroup
}

// Intervals between the persister's writes: after one that succeeded, and
// after a failure.
const (
	persistEvery      = time.Second
	persistRetryAfter = time.Minute
)

// maybe starts a write when the store proved a head above the stored one,
// the last write is a second old and none is under way. The common case,
// nothing new proven, is two atomic loads.
func (p *persister) maybe(e *pgEngine) {
	if e.horizon.proven.Load() <= e.horizon.stored.Load() {
		return
	}
	if time.Now().UnixNano() < p.notBefore.Load() || !p.busy.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.busy.Store(false)
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer p.busy.Store(false)
		c, ok := e.horizon.newestProven()
		if !ok || c.head <= e.horizon.stored.Load() {
			return
		}
		err := pgdb.New(e.pool).SaveSettledCandidate(p.ctx, pgdb.SaveSettledCandidateParams{Head: c.head, Next: c.next})
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.notBefore.Store(time.Now().Add(persistRetryAfter).UnixNano())
			if !p.warned.Swap(true) {
				p.log.Warn("alkstore: could not store the settled stream horizon for other stores (they may wait for long write transactions to end before their first read returns events); trying again every minute",
					"err", err)
			}
			return
		}
		// Stored, or another store stored a greater head first (the row
		// only moves forward): either way the row's head is at least c's.
		atomicMax(&e.horizon.stored, c.head)
		p.notBefore.Store(time.Now().Add(persistEvery).UnixNano())
	}()
}

// stop refuses new writes and lets one under way finish, for up to
// persistGrace (a one-shot reader, such as the CLI's tail, closes the
// store right after its read: its proof would otherwise never be stored),
// then cancels it; at once when the store is abandoned.
func (p *persister) stop(abandoned bool) {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	if !abandoned {
		t := time.NewTimer(persistGrace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	p.cancel()
	<-done
}

// persistGrace bounds how long Close waits for a write under way.
const persistGrace = time.Second

// fetchEvery bounds how often held reads of a store read the stored
// candidate.
const fetchEvery = time.Second

// provenFor is called by a read held back below the newest visible event:
// at most once a second per store, it reads the stored candidate (on the
// read's own connection: inside a transaction, the transaction's) and adds
// it to the tracker; outside transactions only (a failure would end one).
// It returns the newest head then proven settled for every later
// snapshot, or 0 when it did not look or found nothing; a failure (a
// schema before 00050, a role without SELECT on the table) is the same as
// nothing.
func (o pgOps) provenFor(ctx context.Context) int64 {
	p := &o.eng.persist
	now := time.Now().UnixNano()
	due := p.nextFetch.Load()
	if now < due || !p.nextFetch.CompareAndSwap(due, now+int64(fetchEvery)) {
		return 0
	}
	r, err := o.q.ProvenCandidate(ctx)
	if err != nil {
		return 0
	}
	return o.eng.horizon.adopt(r.Head, r.Next, r.Xmin)
}
