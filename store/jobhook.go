package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	litedb "github.com/alkstore/alkstore/db/lite"
	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/internal/jobhook"
)

// Two operations for alktest that are not public API (see package
// internal/jobhook): claiming one given job, and reading a queue's jobs in
// every state in one snapshot. They live here, beside their per-engine
// statements, so the ops seam and the engines' files stay as they are.

func init() {
	jobhook.Set(jobhook.Hooks[*Queue, Tx, *Job]{ClaimJob: claimJobByID, ScanJobs: scanJobs})
}

// jobPicker is what both engines' ops add for the hooks.
type jobPicker interface {
	claimJobByID(ctx context.Context, r claimReq, id int64) (*Job, error) // nil: not claimable
	listQueueJobs(ctx context.Context, queue string, after int64, limit int) ([]*Job, error)
}

// snapshotter begins a read-only transaction that is one snapshot.
type snapshotter interface {
	beginSnapshot(ctx context.Context) (driverTx, error)
}

var (
	_ jobPicker   = pgOps{}
	_ jobPicker   = liteOps{}
	_ snapshotter = (*pgEngine)(nil)
	_ snapshotter = (*liteEngine)(nil)
)

func claimJobByID(ctx context.Context, q *Queue, tx *Tx, id int64, worker string, visibility time.Duration) (*Job, error) {
	v := autoWrite(ctx)
	if tx != nil {
		v = tx.via(ctx)
	}
	return run(q.handle, "claim job", v, func(t target) (*Job, error) {
		if err := validateLocalName("worker", worker); err != nil {
			return nil, err
		}
		if visibility <= 0 {
			return nil, fmt.Errorf("%w: visibility must be positive", ErrInvalidArgument)
		}
		now := q.s.now()
		token, err := newClaimToken()
		if err != nil {
			return nil, err
		}
		j, err := t.ops.(jobPicker).claimJobByID(ctx, claimReq{queue: q.name, worker: worker, n: 1, now: now,
			expiresAt: now.Add(visibility).Truncate(time.Microsecond), token: token}, id)
		if j != nil {
			j.q, j.mu = q, new(sync.Mutex)
		}
		return j, err
	})
}

func scanJobs(ctx context.Context, q *Queue, tx *Tx, size int, fn func(page []*Job) bool) error {
	if size <= 0 {
		size = MaxJobsLimit
	}
	if tx != nil {
		return run0(q.handle, "jobs", tx.via(ctx), func(t target) error {
			return pageJobs(ctx, t.ops, q.name, size, fn)
		})
	}
	return run0(q.handle, "jobs", autoRead, func(target) error {
		dtx, err := q.s.eng.(snapshotter).beginSnapshot(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = dtx.rollback(context.WithoutCancel(ctx)) }()
		return pageJobs(ctx, dtx.ops(), q.name, size, fn)
	})
}

func pageJobs(ctx context.Context, o ops, queue string, size int, fn func(page []*Job) bool) error {
	for after := int64(0); ; {
		page, err := o.(jobPicker).listQueueJobs(ctx, queue, after, size)
		if err != nil {
			return err
		}
		if len(page) == 0 || !fn(page) || len(page) < size {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// beginSnapshot: REPEATABLE READ, read only, so every statement sees the
// snapshot of the first.
func (e *pgEngine) beginSnapshot(ctx context.Context) (driverTx, error) {
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	g := newTxGuard(tx, tx)
	return pgTx{tx: tx, g: g, o: &pgOps{q: pgdb.New(g), eng: e, inTx: true, txs: &pgTxState{}}}, nil
}

// beginSnapshot: a deferred transaction on a read connection, whose first
// read fixes the snapshot (WAL) the later ones see; no writer slot.
func (e *liteEngine) beginSnapshot(ctx context.Context) (driverTx, error) {
	tx, err := e.readers.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return liteTx{tx: tx, o: &liteOps{q: e.readQ.WithTx(tx)}, release: func() {}}, nil // holds no writer slot
}

// claimJobByID runs to the end once it started, as claim does: a claim
// that committed unseen would leave its job running with no handler.
func (o pgOps) claimJobByID(ctx context.Context, r claimReq, id int64) (*Job, error) {
	if !o.inTx {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(uninterrupted(ctx), uninterruptedTimeout)
		defer cancel()
	}
	rows, err := o.q.ClaimJobByID(ctx, pgdb.ClaimJobByIDParams{Now: r.now, ClaimExpiresAt: r.expiresAt,
		ClaimToken: r.token, Worker: r.worker, ID: id, Queue: r.queue})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return pgJob(rows[0]), nil
}

func (o pgOps) listQueueJobs(ctx context.Context, queue string, after int64, limit int) ([]*Job, error) {
	rows, err := o.q.ListQueueJobs(ctx, pgdb.ListQueueJobsParams{Queue: queue, After: after, MaxJobs: clampLimit(limit)})
	return mapRows(rows, err, pgJob)
}

func (o liteOps) claimJobByID(ctx context.Context, r claimReq, id int64) (*Job, error) {
	rows, err := o.q.ClaimJobByID(o.queryWrite(ctx), litedb.ClaimJobByIDParams{Now: r.now.UnixMicro(), ClaimExpiresAt: r.expiresAt.UnixMicro(),
		ClaimToken: r.token, Worker: r.worker, ID: id, Queue: r.queue})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return liteJob(rows[0]), nil
}

func (o liteOps) listQueueJobs(ctx context.Context, queue string, after int64, limit int) ([]*Job, error) {
	rows, err := o.q.ListQueueJobs(ctx, litedb.ListQueueJobsParams{Queue: queue, After: after, MaxJobs: int64(limit)})
	return mapRows(rows, err, liteJob)
}
