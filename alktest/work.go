package alktest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/alkstore/alkstore/store"
)

// Outcome is how a job was settled after its handler ran.
type Outcome string

const (
	Acked   Outcome = "acked"   // the handler returned nil: the job is done
	Retried Outcome = "retried" // an error, attempts left: pending again after the backoff
	Failed  Outcome = "failed"  // a Permanent error, an error on the last attempt, or a payload that does not decode: dead
	Snoozed Outcome = "snoozed" // store.Snooze(d): pending again after d, the attempt given back
	// SettledByHandler: the handler settled the job itself (Ack, Retry,
	// Fail); Work left it as the handler did.
	SettledByHandler Outcome = "settled by handler"
)

// WorkResult is what Work did.
type WorkResult struct {
	Err     error      // the handler's error (a panic becomes one; a payload that does not decode, ErrCodec); nil on success
	Outcome Outcome    // how the job was settled
	Job     *store.Job // the job after it was settled; nil when it is gone (acked jobs are deleted unless the queue keeps completed ones)
}

// handlerTimeout bounds a handler's run, as WorkOpts.Timeout's default.
const handlerTimeout = 30 * time.Second

// worker is the claim owner alktest's claims carry (Job.Worker).
const worker = "alktest"

// Work enqueues v on q with opts and works that job, as WorkJob does.
// When the job cannot be claimed (the queue is paused, or opts.ExpiresAt
// has passed), Work deletes it again and fails tb, leaving the queue as it
// found it.
func Work[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], v T, opts store.EnqueueOpts,
	handler func(ctx context.Context, job *store.Job, v T) error) WorkResult {
	tb.Helper()
	id := enqueue(ctx, tb, q, v, opts)
	job, why := claim(ctx, q, nil, id)
	if job == nil {
		if err := q.Queue().Delete(context.WithoutCancel(ctx), id); err != nil {
			why += fmt.Sprintf(" (and deleting it again failed: %v)", err)
		}
		tb.Fatalf("%s", why)
	}
	return work(ctx, tb, q, job, handler)
}

// WorkJob claims the job id of q (the one the code under test enqueued),
// whatever else the queue holds, and runs handler on it once, as
// JobQueue.Work would, without a worker loop: the job is claimed even when
// it is not due yet (a Delay or a RunAt in the future), the handler's ctx
// ends after 30 s, a panic becomes an error, and the job is settled by the
// handler's result with Work's rules (nil acks; Permanent fails; Snooze
// reschedules without spending the attempt; another error retries after
// store.DefaultBackoff, or fails on the last attempt). A payload that does
// not decode fails the job with ErrCodec without running the handler, as
// JobQueue.Work does. No other job of the queue is touched.
//
// WorkJob fails tb, saying why, when the job cannot be claimed: there is
// no such job in q, it is finished, another worker's claim holds it, it is
// past its ExpiresAt, or the queue is paused.
func WorkJob[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], id int64,
	handler func(ctx context.Context, job *store.Job, v T) error) WorkResult {
	tb.Helper()
	job, why := claim(ctx, q, nil, id)
	if job == nil {
		tb.Fatalf("%s", why)
	}
	return work(ctx, tb, q, job, handler)
}

// enqueue adds v as a job and returns its id; a unique key that is held
// fails tb, since nothing was enqueued to work.
func enqueue[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], v T, opts store.EnqueueOpts) int64 {
	tb.Helper()
	if opts.Unique.Key == "" {
		id, err := q.Enqueue(ctx, v, opts)
		if err != nil {
			tb.Fatalf("alktest: %v", err)
		}
		return id
	}
	e, err := q.EnqueueUnique(ctx, v, opts)
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
	job, err := hooks.ClaimJob(ctx, q.Queue(), tx, id, worker, handlerTimeout+30*time.Second)
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
	now := time.Now()
	switch {
	case j.ExpiresAt != nil && !j.ExpiresAt.After(now) && (j.State == store.JobPending || j.State == store.JobRunning):
		return fmt.Sprintf("job %d of queue %q is past its ExpiresAt (%s): it is never handed out", id, q.Name(), j.ExpiresAt.Format(time.RFC3339Nano))
	case j.State == store.JobPending || (j.State == store.JobRunning && j.ClaimExpiresAt != nil && !j.ClaimExpiresAt.After(now) && j.Attempts < j.MaxAttempts):
		if st, err := q.Stats(ctx); err == nil && st.Paused {
			return fmt.Sprintf("queue %q is paused: none of its jobs is claimed until Resume (job %d is %s)", q.Name(), id, j.State)
		}
		return fmt.Sprintf("job %d of queue %q is %s but could not be claimed (is the queue paused by a transaction not committed yet?)", id, q.Name(), j.State)
	case j.State == store.JobRunning && j.Attempts >= j.MaxAttempts && j.ClaimExpiresAt != nil && !j.ClaimExpiresAt.After(now):
		return fmt.Sprintf("job %d of queue %q is running and its claim lapsed on its last attempt (%d of %d): the next claim ends it dead", id, q.Name(), j.Attempts, j.MaxAttempts)
	case j.State == store.JobRunning:
		until := ""
		if j.ClaimExpiresAt != nil {
			until = " until " + j.ClaimExpiresAt.Format(time.RFC3339Nano)
		}
		return fmt.Sprintf("job %d of queue %q is running: worker %q holds its claim%s", id, q.Name(), j.Worker, until)
	}
	return fmt.Sprintf("job %d of queue %q is %s: a finished job is not worked again (Requeue it first)", id, q.Name(), j.State)
}

// work runs handler on the claimed job and settles it.
func work[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], job *store.Job,
	handler func(ctx context.Context, job *store.Job, v T) error) WorkResult {
	tb.Helper()
	var res WorkResult
	if decoded, err := q.Payload(job); err != nil {
		res.Err = err // as JobQueue.Work: fail it at once
		res.Outcome, err = Failed, job.Fail(ctx, err.Error())
		settled(tb, job, err)
	} else {
		hctx, cancel := context.WithTimeout(ctx, handlerTimeout)
		res.Err = call(hctx, handler, job, decoded)
		cancel()
		res.Outcome = settle(ctx, tb, job, res.Err)
	}
	after, err := q.Queue().Job(ctx, job.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		tb.Fatalf("alktest: %v", err)
	default:
		res.Job = after
	}
	return res
}

// settle settles the job as Work does with the handler's result; a settle
// refused with ErrInvalidArgument means the handler spent the claim itself.
func settle(ctx context.Context, tb testing.TB, job *store.Job, herr error) Outcome {
	tb.Helper()
	var out Outcome
	var err error
	delay, snoozed := store.SnoozeDelay(herr)
	switch {
	case herr == nil:
		out, err = Acked, job.Ack(ctx)
	case snoozed:
		out, err = Snoozed, job.Snooze(ctx, delay)
	case store.IsPermanent(herr):
		out, err = Failed, job.Fail(ctx, herr.Error())
	default:
		var retried bool
		retried, err = job.Retry(ctx, store.DefaultBackoff(job.Attempts), herr.Error())
		out = Retried
		if !retried {
			out = Failed
		}
	}
	if errors.Is(err, store.ErrInvalidArgument) {
		return SettledByHandler
	}
	settled(tb, job, err)
	return out
}

func settled(tb testing.TB, job *store.Job, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("alktest: settle job %d: %v", job.ID, err)
	}
}

func call[T any](ctx context.Context, h func(context.Context, *store.Job, T) error, j *store.Job, v T) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, j, v)
}
