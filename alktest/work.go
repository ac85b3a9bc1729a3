package alktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alkstore/alkstore/store"
)

// Outcome is how a job was settled after its handler ran: the store's
// handler lifecycle decides it (store.RunJob), the same code that settles
// Queue.Work's jobs.
type Outcome = store.Outcome

// The outcomes WorkJob and WorkJobTx report.
const (
	Acked   = store.OutcomeAcked   // the handler returned nil: the job is done
	Retried = store.OutcomeRetried // an error, attempts left: pending again after the backoff
	Failed  = store.OutcomeFailed  // a Permanent error, an error on the last attempt, or a payload that does not decode: dead
	Snoozed = store.OutcomeSnoozed // store.Snooze(d): pending again after d, the attempt given back
	// SettledByHandler: the handler settled the job itself (Ack, Retry,
	// Fail, their Tx forms, ...); it was left as the handler did.
	SettledByHandler = store.OutcomeSettledByHandler
	// Released: ctx was cancelled while the handler ran (a hard stop), and
	// the handler then failed: the job is back with its attempt given back.
	Released = store.OutcomeReleased
	// ClaimLost: the job's claim was lost while the handler ran (it was
	// cancelled): nothing was settled. In WorkTx and WorkJobTx the test's
	// transaction must then be rolled back.
	ClaimLost = store.OutcomeClaimLost
)

// WorkResult is what Work did.
type WorkResult struct {
	Err     error      // the handler's error (a panic becomes one; a payload that does not decode, ErrCodec); nil on success
	Outcome Outcome    // how the job was settled
	Job     *store.Job // the job after it was settled; nil when it is gone (acked jobs are deleted unless the queue keeps completed ones)
}

// runOpts are the handler options alktest runs jobs with: WorkOpts'
// defaults (a 30 s Timeout, a Visibility of Timeout + 30 s, DefaultBackoff).
var runOpts = store.WorkOpts{}

// visibility is the claim alktest takes, as long as Work's default.
const visibility = time.Minute

// worker is the claim owner alktest's claims carry (Job.Worker).
const worker = "alktest"

// Handler is a handler of jobs of T, as JobQueue.Work takes it.
type Handler[T any] func(ctx context.Context, job *store.Job, v T) error

// TxHandler is a transactional handler of jobs of T, as JobQueue.WorkTx
// takes it: what it writes through tx commits with the job's settle.
type TxHandler[T any] func(ctx context.Context, tx store.Tx, job *store.Job, v T) error

// Work enqueues v on q with opts and works that job, as WorkJob does.
// When the job cannot be claimed (the queue is paused, or its ExpiresAt
// has passed), Work deletes it again and fails tb, leaving the queue as it
// found it.
func Work[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], v T, opts store.EnqueueOpts, handler Handler[T]) WorkResult {
	tb.Helper()
	mustWork(tb, q, handler == nil)
	id := enqueue(ctx, tb, q, nil, v, opts)
	job, why := claim(ctx, q, nil, id)
	if job == nil {
		if err := q.Queue().Delete(context.WithoutCancel(ctx), id); err != nil {
			why += fmt.Sprintf(" (and deleting it again failed: %v)", err)
		}
		tb.Fatalf("%s", why)
	}
	return run(ctx, tb, q, nil, job, func(ctx context.Context, job *store.Job) (jobResult, error) {
		return store.RunJob(ctx, job, runOpts, typed(q, handler))
	})
}

// WorkJob claims the job id of q (the one the code under test enqueued),
// whatever else the queue holds, and runs handler on it once, through the
// store's handler lifecycle (store.RunJob, what JobQueue.Work runs), without
// a worker loop: the job is claimed even when it is not due yet (a Delay or
// a RunAt in the future); the handler's ctx ends after 30 s; a panic
// becomes an error; the job is settled by the handler's result with Work's
// rules (nil acks; Permanent fails; Snooze reschedules without spending
// the attempt; another error retries after store.DefaultBackoff, or fails
// on the last attempt). A payload that does not decode fails the job with
// ErrCodec without running the handler, as JobQueue.Work does. No other job
// of the queue is touched.
//
// WorkJob fails tb, saying why, when the job cannot be claimed: there is
// no such job in q, it is finished, another worker's claim holds it, it is
// past its ExpiresAt, or the queue is paused.
func WorkJob[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], id int64, handler Handler[T]) WorkResult {
	tb.Helper()
	mustWork(tb, q, handler == nil)
	job, why := claim(ctx, q, nil, id)
	if job == nil {
		tb.Fatalf("%s", why)
	}
	return run(ctx, tb, q, nil, job, func(ctx context.Context, job *store.Job) (jobResult, error) {
		return store.RunJob(ctx, job, runOpts, typed(q, handler))
	})
}

// WorkTx is Work inside the test's transaction tx: v is enqueued in tx,
// claimed in tx and worked as WorkJobTx does, so that rolling tx back
// leaves no trace of the job or of what the handler wrote. When the job
// cannot be claimed, WorkTx deletes it again (in tx) and fails tb.
func WorkTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T], v T, opts store.EnqueueOpts, handler TxHandler[T]) WorkResult {
	tb.Helper()
	mustWork(tb, q, handler == nil)
	id := enqueue(ctx, tb, q, &tx, v, opts)
	job, why := claim(ctx, q, &tx, id)
	if job == nil {
		if err := q.Queue().DeleteTx(context.WithoutCancel(ctx), tx, id); err != nil {
			why += fmt.Sprintf(" (and deleting it again failed: %v)", err)
		}
		tb.Fatalf("%s", why)
	}
	return run(ctx, tb, q, &tx, job, func(ctx context.Context, job *store.Job) (jobResult, error) {
		return store.RunJobInTx(ctx, tx, job, runOpts, typedTx(q, handler))
	})
}

// WorkJobTx is WorkJob inside the test's transaction tx, for a test that
// rolls tx back and needs no cleanup: the job (committed, or enqueued in
// tx) is claimed in tx, handler runs with tx (and a ctx that carries it),
// and the job is settled in tx whatever the outcome (store.RunJobInTx), so
// the handler's writes and the job's settle stay in tx, neither committed
// nor rolled back by WorkJobTx. A handler that is not transactional runs
// as well: wrap it as func(ctx, _ store.Tx, j, v) { return h(ctx, j, v) };
// its own writes then commit on their own (on SQLite, an auto-commit write
// made with its ctx fails at once, since tx holds the writer slot).
func WorkJobTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T], id int64, handler TxHandler[T]) WorkResult {
	tb.Helper()
	mustWork(tb, q, handler == nil)
	job, why := claim(ctx, q, &tx, id)
	if job == nil {
		tb.Fatalf("%s", why)
	}
	return run(ctx, tb, q, &tx, job, func(ctx context.Context, job *store.Job) (jobResult, error) {
		return store.RunJobInTx(ctx, tx, job, runOpts, typedTx(q, handler))
	})
}

// mustWork fails tb, before anything is enqueued or claimed, for a queue
// of no store or a nil handler.
func mustWork[T any](tb testing.TB, q *store.JobQueue[T], nilHandler bool) {
	tb.Helper()
	mustStore(tb, q)
	if nilHandler {
		tb.Fatalf("alktest: nil handler")
	}
}

// enqueue adds v as a job (in tx when not nil) and returns its id; a
// unique key that is held fails tb, since nothing was enqueued to work.
func enqueue[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], tx *store.Tx, v T, opts store.EnqueueOpts) int64 {
	tb.Helper()
	var e store.Enqueued
	var err error
	switch {
	case opts.Unique.Key == "" && tx == nil:
		e.ID, err = q.Enqueue(ctx, v, opts)
	case opts.Unique.Key == "":
		e.ID, err = q.EnqueueTx(ctx, *tx, v, opts)
	case tx == nil:
		e, err = q.EnqueueUnique(ctx, v, opts)
	default:
		e, err = q.EnqueueUniqueTx(ctx, *tx, v, opts)
	}
	switch {
	case err != nil:
		tb.Fatalf("alktest: %v", err)
	case e.Duplicate:
		tb.Fatalf("alktest: unique key %q is held by job %d: nothing was enqueued to work", opts.Unique.Key, e.ID)
	}
	return e.ID
}

// claim claims job id of q (in tx when not nil); when it cannot, it
// returns nil and why.
func claim[T any](ctx context.Context, q *store.JobQueue[T], tx *store.Tx, id int64) (*store.Job, string) {
	job, err := hooks.ClaimJob(ctx, q.Queue(), tx, id, worker, visibility)
	if err != nil {
		return nil, fmt.Sprintf("alktest: claim job %d: %v", id, err)
	}
	if job != nil {
		return job, ""
	}
	return nil, "alktest: " + unclaimable(ctx, q.Queue(), tx, id)
}

// unclaimable says why job id of q could not be claimed.
func unclaimable(ctx context.Context, q *store.Queue, tx *store.Tx, id int64) string {
	var j *store.Job
	var err error
	if tx != nil {
		j, err = q.JobTx(ctx, *tx, id)
	} else {
		j, err = q.Job(ctx, id)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Sprintf("queue %q has no job %d", q.Name(), id)
	case err != nil:
		return fmt.Sprintf("job %d cannot be claimed, and reading it failed: %v", id, err)
	}
	// The claim refused a live job: the queue is paused, the job expired,
	// or (running) a claim holds it. Said without the store's clock, which
	// a test may have moved (store.WithClock).
	at := func(t *time.Time) string { return t.Format(time.RFC3339Nano) }
	switch j.State {
	case store.JobPending:
		if st, err := q.Stats(ctx); err == nil && st.Paused {
			return fmt.Sprintf("queue %q is paused: none of its jobs is claimed until Resume (job %d is pending)", q.Name(), id)
		}
		if j.ExpiresAt != nil {
			return fmt.Sprintf("job %d of queue %q is past its ExpiresAt (%s): an expired job is never handed out", id, q.Name(), at(j.ExpiresAt))
		}
		return fmt.Sprintf("job %d of queue %q is pending but could not be claimed (is the queue paused by a transaction not committed yet?)", id, q.Name())
	case store.JobRunning:
		msg := fmt.Sprintf("job %d of queue %q is running: worker %q holds its claim", id, q.Name(), j.Worker)
		if j.ClaimExpiresAt != nil {
			msg += " until " + at(j.ClaimExpiresAt)
		}
		if j.Attempts >= j.MaxAttempts {
			msg += fmt.Sprintf(", on its last attempt (%d of %d): once that claim lapses the job ends dead", j.Attempts, j.MaxAttempts)
		}
		if j.ExpiresAt != nil {
			msg += ", and it expires at " + at(j.ExpiresAt)
		}
		if st, err := q.Stats(ctx); err == nil && st.Paused {
			msg += fmt.Sprintf("; queue %q is paused", q.Name())
		}
		return msg
	}
	return fmt.Sprintf("job %d of queue %q is %s: a finished job is not worked again (Requeue it first)", id, q.Name(), j.State)
}

// jobResult is what the store's handler lifecycle reports for one run.
type jobResult = store.JobResult

// run runs the claimed job through the lifecycle and reads it back (in tx
// when not nil).
func run[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], tx *store.Tx, job *store.Job,
	runJob func(context.Context, *store.Job) (jobResult, error)) WorkResult {
	tb.Helper()
	r, err := runJob(ctx, job)
	switch {
	case err != nil:
		tb.Fatalf("alktest: %v", err)
	case r.SettleErr != nil:
		tb.Fatalf("alktest: settle job %d (%s): %v", job.ID, r.Outcome, r.SettleErr)
	}
	res := WorkResult{Err: r.Err, Outcome: r.Outcome}
	var after *store.Job
	if tx != nil {
		after, err = q.Queue().JobTx(ctx, *tx, job.ID)
	} else {
		after, err = q.Queue().Job(ctx, job.ID)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		tb.Fatalf("alktest: %v", err)
	default:
		res.Job = after
	}
	return res
}

// typed is handler on decoded payloads, as JobQueue.Work runs it: a
// payload that does not decode fails the job at once (a Permanent error
// matching ErrCodec) without running the handler.
func typed[T any](q *store.JobQueue[T], handler Handler[T]) store.Handler {
	if handler == nil {
		return nil
	}
	return func(ctx context.Context, job *store.Job) error {
		v, err := q.Payload(job)
		if err != nil {
			return store.Permanent(err)
		}
		return handler(ctx, job, v)
	}
}

// typedTx is typed for a TxHandler.
func typedTx[T any](q *store.JobQueue[T], handler TxHandler[T]) store.TxHandler {
	if handler == nil {
		return nil
	}
	return func(ctx context.Context, tx store.Tx, job *store.Job) error {
		v, err := q.Payload(job)
		if err != nil {
			return store.Permanent(err)
		}
		return handler(ctx, tx, job, v)
	}
}
