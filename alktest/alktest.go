// Package alktest helps test code that uses alkstore queues, as rivertest
// does for River: assert that a job was (or was not) enqueued, in a store or
// inside a transaction, matching its typed payload; and run one job through
// a handler without a worker loop, to see what the handler returned and how
// Work would settle the job.
//
// The helpers read the store's jobs with Queue.JobsTx, every state, in one
// transaction (one snapshot of the queue): on SQLite that is
// a write transaction on the writer slot, so call the store forms when no
// transaction of yours is open on the same goroutine (use the Tx forms
// inside one).
package alktest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/alkstore/alkstore/store"
)

// maxJobs bounds how many of a queue's jobs an assertion reads.
const maxJobs = store.MaxJobsLimit

// Match selects jobs by their decoded payload (and the job, for its
// priority, state or run time). A nil Match matches every job.
type Match[T any] func(job *store.Job, v T) bool

// Payload matches jobs whose decoded payload equals want (reflect.DeepEqual).
func Payload[T any](want T) Match[T] {
	return func(_ *store.Job, v T) bool { return reflect.DeepEqual(v, want) }
}

// RequireEnqueued fails tb unless q holds a job (in any state) that match
// accepts, and returns the first such job, in enqueue order.
func RequireEnqueued[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], match Match[T]) *store.Job {
	tb.Helper()
	jobs := inStore(ctx, tb, q)
	return requireFound(tb, q, jobs, match, "")
}

// RequireEnqueuedTx is RequireEnqueued inside tx: it sees the jobs tx
// enqueued and has not committed.
func RequireEnqueuedTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T], match Match[T]) *store.Job {
	tb.Helper()
	jobs := inTx(ctx, tb, tx, q)
	return requireFound(tb, q, jobs, match, " in the transaction")
}

// RequireNotEnqueued fails tb if q holds a job that match accepts.
func RequireNotEnqueued[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], match Match[T]) {
	tb.Helper()
	requireNone(tb, q, inStore(ctx, tb, q), match, "")
}

// RequireNotEnqueuedTx is RequireNotEnqueued inside tx.
func RequireNotEnqueuedTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T], match Match[T]) {
	tb.Helper()
	requireNone(tb, q, inTx(ctx, tb, tx, q), match, " in the transaction")
}

func requireFound[T any](tb testing.TB, q *store.JobQueue[T], jobs []*store.Job, match Match[T], where string) *store.Job {
	tb.Helper()
	for _, j := range jobs {
		if matches(tb, q, j, match) {
			return j
		}
	}
	tb.Fatalf("alktest: no job of queue %q%s matches (%d jobs)", q.Queue().Name(), where, len(jobs))
	return nil
}

func requireNone[T any](tb testing.TB, q *store.JobQueue[T], jobs []*store.Job, match Match[T], where string) {
	tb.Helper()
	for _, j := range jobs {
		if matches(tb, q, j, match) {
			tb.Fatalf("alktest: job %d of queue %q%s matches, want none (payload %s)", j.ID, q.Queue().Name(), where, j.Payload)
		}
	}
}

// matches decodes j's payload as Work would; a job that does not decode
// matches nothing.
func matches[T any](tb testing.TB, q *store.JobQueue[T], j *store.Job, match Match[T]) bool {
	tb.Helper()
	v, err := q.Payload(j)
	if err != nil {
		return false
	}
	return match == nil || match(j, v)
}

// inStore reads q's jobs in a transaction of its own, rolled back.
func inStore[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T]) []*store.Job {
	tb.Helper()
	s := q.Queue().Store()
	if s == nil {
		tb.Fatalf("alktest: queue has no store (a zero-value handle?)")
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		tb.Fatalf("alktest: %v", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return inTx(ctx, tb, tx, q)
}

// inTx reads q's jobs in tx (Queue.JobsTx).
func inTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T]) []*store.Job {
	tb.Helper()
	jobs, err := enqueuedJobs(ctx, tx, q.Queue())
	if err != nil {
		tb.Fatalf("alktest: read the jobs of queue %q: %v", q.Queue().Name(), err)
	}
	return jobs
}

// allStates are the states an assertion reads, every one a job may be in.
var allStates = []store.JobState{store.JobPending, store.JobRunning, store.JobCompleted,
	store.JobCancelled, store.JobExpired, store.JobDead}

// enqueuedJobs reads the queue's jobs in tx, every state, in id order (up
// to maxJobs per state).
func enqueuedJobs(ctx context.Context, tx store.Tx, q *store.Queue) ([]*store.Job, error) {
	var jobs []*store.Job
	for _, st := range allStates {
		page, err := q.JobsTx(ctx, tx, store.JobsOpts{State: st, Limit: maxJobs})
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, page...)
	}
	slices.SortFunc(jobs, func(a, b *store.Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

// Outcome is how a job was settled after its handler ran.
type Outcome string

const (
	Acked   Outcome = "acked"   // the handler returned nil: the job is done
	Retried Outcome = "retried" // an error, attempts left: pending again after the backoff
	Failed  Outcome = "failed"  // a Permanent error, or an error on the last attempt: dead
	Snoozed Outcome = "snoozed" // store.Snooze(d): pending again after d, the attempt given back
	// SettledByHandler: the handler settled the job itself (Ack, Retry,
	// Fail); Work left it as the handler did.
	SettledByHandler Outcome = "settled by handler"
)

// WorkResult is what Work did.
type WorkResult struct {
	Err     error      // the handler's error (a panic becomes one); nil on success
	Outcome Outcome    // how the job was settled
	Job     *store.Job // the job after it was settled; nil when it is gone (acked jobs are deleted unless the queue keeps completed ones)
}

// Work enqueues v on q with opts, claims that job and runs handler on it
// once, as JobQueue.Work would, without a worker loop: the handler's ctx
// ends after 30 s, a panic becomes an error, and the job is settled by the
// handler's result with Work's rules (nil acks; Permanent fails; Snooze
// reschedules without spending the attempt; another error retries after store.DefaultBackoff, or fails on the last attempt).
// The queue must hold no other ready job of equal or higher priority (use
// a queue of the test's own): the claim must take this job. Work fails tb
// when the job cannot be enqueued, claimed or settled.
func Work[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], v T, opts store.EnqueueOpts,
	handler func(ctx context.Context, job *store.Job, v T) error) WorkResult {
	tb.Helper()
	var id int64
	var err error
	if opts.Unique.Key != "" {
		var e store.Enqueued
		e, err = q.EnqueueUnique(ctx, v, opts)
		if err == nil && e.Duplicate {
			tb.Fatalf("alktest: unique key %q is held by job %d: nothing was enqueued to work", opts.Unique.Key, e.ID)
		}
		id = e.ID
	} else {
		id, err = q.Enqueue(ctx, v, opts)
	}
	if err != nil {
		tb.Fatalf("alktest: %v", err)
	}
	const timeout = 30 * time.Second
	jobs, err := q.Queue().Claim(ctx, "alktest", 1, timeout+30*time.Second)
	switch {
	case err != nil:
		tb.Fatalf("alktest: %v", err)
	case len(jobs) == 0:
		tb.Fatalf("alktest: job %d is not ready to claim (a delay, or RunAt in the future?)", id)
	case jobs[0].ID != id:
		tb.Fatalf("alktest: claimed job %d instead of job %d: queue %q holds other ready jobs", jobs[0].ID, id, q.Queue().Name())
	}
	job := jobs[0]
	decoded, err := q.Payload(job)
	if err != nil {
		tb.Fatalf("alktest: %v", err)
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	res := WorkResult{Err: call(hctx, handler, job, decoded)}
	cancel()

	// Settle as Work does; a settle refused with ErrInvalidArgument means
	// the handler spent the claim itself.
	delay, snoozed := store.SnoozeDelay(res.Err)
	switch {
	case res.Err == nil:
		res.Outcome, err = Acked, job.Ack(ctx)
	case snoozed:
		res.Outcome, err = Snoozed, job.Snooze(ctx, delay)
	case store.IsPermanent(res.Err):
		res.Outcome, err = Failed, job.Fail(ctx, res.Err.Error())
	default:
		var retried bool
		retried, err = job.Retry(ctx, store.DefaultBackoff(job.Attempts), res.Err.Error())
		res.Outcome = Retried
		if !retried {
			res.Outcome = Failed
		}
	}
	if errors.Is(err, store.ErrInvalidArgument) {
		res.Outcome, err = SettledByHandler, nil
	}
	if err != nil {
		tb.Fatalf("alktest: settle job %d: %v", id, err)
	}
	after, err := q.Queue().Job(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		tb.Fatalf("alktest: %v", err)
	default:
		res.Job = after
	}
	return res
}

func call[T any](ctx context.Context, h func(context.Context, *store.Job, T) error, j *store.Job, v T) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, j, v)
}
