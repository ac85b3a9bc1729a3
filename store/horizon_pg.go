package store

// The read horizon on PostgreSQL: reads stop below offsets whose
// transactions may still commit (see horizon.go).

import (
	"context"
	"sync"
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
