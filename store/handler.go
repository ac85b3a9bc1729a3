package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/queries"
)

// The handler lifecycle: how one claimed job is run (panic recovery,
// timeout, heartbeats), how its handler's result settles it, and what a
// stop does to it. Queue.Work, Queue.WorkTx, the client and alktest all
// run jobs through runJob below; RunJob, RunJobTx and RunJobInTx expose it
// for one job at a time.

// Handler processes one job. Returning nil acks it; an error retries it with
// backoff until its attempts are spent; an error wrapped with Permanent
// fails it at once; Snooze(d) runs it again after d without spending an
// attempt. A panic counts as an error, and so does runtime.Goexit (what
// t.FailNow does when a test calls it from a handler): the job is settled
// as a failed handler's, its error naming the Goexit, and the worker goes
// on with another goroutine.
//
// The handler's context ends at its Timeout, when the worker stops (after
// Grace), and when the job's claim is lost: Queue.Cancel cancelled the job
// (in any process) or the claim expired and another worker took the job.
// Then context.Cause(ctx) matches ErrClaimLost and Work settles nothing: the
// job is no longer this handler's.
type Handler func(ctx context.Context, job *Job) error

// TxHandler processes one job inside a transaction that the worker began:
// what it writes through tx commits together with the job's completion,
// or not at all. Its result is read as a Handler's: nil completes the job
// in tx and commits; an error (or a panic) rolls tx back and then retries,
// fails or snoozes the job on its own. When the claim was lost while the
// handler ran (the job was cancelled, or another worker took it after its
// claim lapsed) tx rolls back whatever the handler returned: a job's
// effects commit once per successful run.
//
// The handler may settle its job itself inside tx (AckTx, RetryTx, FailTx,
// SnoozeTx, CancelTx) and return nil; tx then commits with that settle.
// The ctx it receives carries tx: on SQLite an auto-commit write made with
// it (Enqueue, Ack, ...) fails at once instead of waiting for the writer
// slot tx holds; use the Tx forms. The handler must not end tx: its
// Commit and Rollback return an error matching ErrInvalidArgument and
// change nothing (Work ends it).
//
// On SQLite the transaction holds the writer slot for the handler's whole
// run: while one transactional handler runs, every other write of the
// database waits (see the README's engine differences).
type TxHandler func(ctx context.Context, tx Tx, job *Job) error

type permanentError struct{ err error }

// Error is the wrapped error's text: Permanent marks the error by its type,
// so a job's LastError reads as the handler's own error.
func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a handler error as not worth retrying: the job goes to
// dead at once.
func Permanent(err error) error { return &permanentError{err} }

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent: Work fails such a job at once instead of retrying it.
func IsPermanent(err error) bool {
	var perm *permanentError
	return errors.As(err, &perm)
}

type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.delay) }

// Snooze is a handler result: Work puts the job back to run again after
// delay (a negative one counts as 0) without spending an attempt or
// recording an error, as Job.Snooze does. Work recognises it wrapped, too.
func Snooze(delay time.Duration) error { return &snoozeError{max(delay, 0)} }

// SnoozeDelay reports whether err, or an error it wraps, is a Snooze
// result, and its delay: Work puts such a job back without spending an
// attempt.
func SnoozeDelay(err error) (time.Duration, bool) {
	if err == nil { // every successful run asks: errors.As's target would escape to the heap
		return 0, false
	}
	var snooze *snoozeError
	if errors.As(err, &snooze) {
		return snooze.delay, true
	}
	return 0, false
}

// DefaultBackoff is exponential with jitter: about 1s, 2s, 4s, ... capped at
// one hour. Attempt n waits between step n-1 and step n (0.5-1s, 1-2s, 2-4s,
// ..., 34-60 min), so retries of one job never get closer together; from
// attempt 14 on every retry waits exactly one hour (the jitter drawn on the
// way up keeps jobs that failed together apart).
func DefaultBackoff(attempt int) time.Duration {
	step := func(n int) time.Duration { // 1s, 2s, 4s, ... capped at one hour
		if n < 1 {
			return time.Second / 2
		}
		return min(time.Second<<min(n-1, 12), time.Hour) // 1s<<12 is past the cap
	}
	lo, hi := step(attempt-1), step(attempt)
	return lo + rand.N(hi-lo+1)
}

// Outcome is what the handler lifecycle did with a job once its handler
// returned. Every run of a handler ends in exactly one of them.
type Outcome uint8

const (
	// OutcomeAcked: the handler returned nil and the job completed (for a
	// TxHandler, in its transaction, which committed; for Work, handed to
	// the batched ack, which a lapsed claim may still refuse).
	OutcomeAcked Outcome = iota + 1
	// OutcomeRetried: an error with attempts left: pending again after the
	// backoff.
	OutcomeRetried
	// OutcomeFailed: a Permanent error, or an error on the last attempt: the
	// job is dead.
	OutcomeFailed
	// OutcomeSnoozed: Snooze(d): pending again after d, its attempt given
	// back.
	OutcomeSnoozed
	// OutcomeSettledByHandler: the handler settled the job itself (Ack,
	// Retry, Fail, Snooze, Cancel, Release or a Tx form) and was left as it
	// did; JobResult.SettledAs says which of them it was.
	OutcomeSettledByHandler
	// OutcomeReleased: a stop cancelled the handler, which then failed: the
	// job is back in its queue with its attempt given back.
	OutcomeReleased
	// OutcomeClaimLost: the claim was lost while the handler ran (the job
	// was cancelled, or another worker took it after its claim lapsed):
	// nothing was settled, and a TxHandler's transaction rolled back.
	OutcomeClaimLost
	// OutcomeCancelled: the handler cancelled its own job (Job.Cancel or
	// CancelTx). It is only ever a JobResult.SettledAs: such a run's
	// Outcome is OutcomeSettledByHandler, and a job cancelled by
	// Queue.Cancel while it ran is OutcomeClaimLost with State
	// JobCancelled.
	OutcomeCancelled
)

var outcomeNames = [...]string{"", "acked", "retried", "failed", "snoozed", "settled by handler", "released", "claim lost", "cancelled"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// JobResult is what one run of a handler did: what RunJob returns and
// what Job.OnResult hands its functions once the run was settled.
type JobResult struct {
	Outcome Outcome
	// Err is the handler's error (a panic becomes one; for a TxHandler also
	// a transaction that could not begin or commit); nil when it returned
	// nil.
	Err error
	// SettleErr is why the settle the Outcome names failed (the job is then
	// left to its claim's lapse); nil when it was done.
	SettleErr error
	// State is the job's state once the run was settled: JobCompleted
	// (acked: kept as completed or deleted), JobPending (retried, snoozed,
	// released), JobDead or JobCancelled; for OutcomeSettledByHandler, what
	// the handler's own settle left. For OutcomeClaimLost it is the state
	// the job was found in afterwards: JobCancelled (Queue.Cancel),
	// JobRunning (another worker took it after its claim lapsed), any other
	// state another worker settled it to meanwhile, or "" when the job no
	// longer exists (deleted) or could not be read. Empty when SettleErr is
	// set.
	State JobState
	// RunAt is when a job back in JobPending runs again (retried, snoozed,
	// released); zero otherwise.
	RunAt time.Time
	// SettledAs is, for OutcomeSettledByHandler, what the handler's own
	// settle did, named as the lifecycle names its own: OutcomeAcked
	// (Job.Ack), OutcomeRetried (Retry with attempts left, State
	// JobPending), OutcomeFailed (Fail, or Retry on the last attempt),
	// OutcomeSnoozed (Snooze), OutcomeReleased (Release) or
	// OutcomeCancelled (Cancel), their Tx forms included. It is what
	// tells the three put-backs apart, which all leave State JobPending
	// with RunAt. Zero for every other Outcome.
	SettledAs Outcome
}

// RunJob runs handler once on job, a job this process claimed
// (Queue.Claim), through the same lifecycle as Queue.Work: the handler's
// context ends after opts.Timeout or when the claim is lost (a heartbeat
// finds it gone), its claim is heartbeat every opts.Visibility/3 while it
// runs, a panic becomes an error, and its result settles the job by Work's
// rules with opts.Backoff. Cancelling ctx is a hard stop: a handler that
// then fails is released with its attempt given back (OutcomeReleased).
// Only opts' Timeout, Visibility (the heartbeat's extension) and Backoff
// matter; a bad option fails with ErrInvalidArgument. RunJob returns once
// the job is settled.
func RunJob(ctx context.Context, job *Job, opts WorkOpts, handler Handler) (JobResult, error) {
	r, err := newRunner(job, opts, handlerFor(handler, nil))
	if err != nil {
		return JobResult{}, err
	}
	return r.runAlone(ctx, job), nil
}

// RunJobTx is RunJob for a TxHandler: it begins a transaction, runs the
// handler in it and completes the job in it before committing, as
// Queue.WorkTx does. As WorkTx, it is refused (ErrInvalidArgument) on a
// PostgreSQL pool of one connection.
func RunJobTx(ctx context.Context, job *Job, opts WorkOpts, handler TxHandler) (JobResult, error) {
	r, err := newTxRunner(job, opts, handler)
	if err != nil {
		return JobResult{}, err
	}
	return r.runAlone(ctx, job), nil
}

// newTxRunner is newRunner for a TxHandler run alone, refused on a
// PostgreSQL pool of one connection, where its transaction would hold the
// only one and its claim's heartbeat could not run (errOnePooledConn).
func newTxRunner(job *Job, opts WorkOpts, handler TxHandler) (*runner, error) {
	r, err := newRunner(job, opts, handlerFor(nil, handler))
	if err != nil {
		return nil, err
	}
	if err := job.q.s.checkTxPool(); err != nil {
		return nil, opErr("run job", job.q.name, err)
	}
	return r, nil
}

// RunJobInTx is RunJobTx in the caller's transaction tx, which it neither
// commits nor rolls back: the handler's writes and the job's settle, every
// outcome's, are all in tx. It is for tests that roll tx back to leave no
// trace; a worker wants RunJobTx, which rolls the handler's writes back
// when it fails. A claim lost meanwhile gives OutcomeClaimLost, and the
// caller must roll tx back.
func RunJobInTx(ctx context.Context, tx Tx, job *Job, opts WorkOpts, handler TxHandler) (JobResult, error) {
	r, err := newTxRunner(job, opts, handler)
	if err != nil {
		return JobResult{}, err
	}
	if _, err := tx.state(); err != nil {
		return JobResult{}, opErr("run job", job.Queue, err)
	}
	r.callerTx = &tx
	return r.runAlone(ctx, job), nil
}

// jobHandler is one of a Handler or a TxHandler.
type jobHandler struct {
	plain Handler
	tx    TxHandler
}

func handlerFor(h Handler, txh TxHandler) jobHandler { return jobHandler{plain: h, tx: txh} }

func (h jobHandler) missing() bool { return h.plain == nil && h.tx == nil }

// runner runs jobs through the lifecycle for a worker (Work) or alone
// (RunJob). A worker sets settleCtx, stopped, start, stop and ack.
type runner struct {
	q        *Queue
	opts     WorkOpts
	h        jobHandler
	callerTx *Tx // RunJobInTx: the caller's transaction

	settleCtx context.Context // settles run with it: it survives the stop
	stopped   func() bool     // the stop cancelled the handlers
	// start gives a running handler its context (rj.ctx and rj.cancel)
	// and registers it with the heartbeats, claim checks and timeouts;
	// stop forgets it once the handler returned. (Two functions, not one
	// returning the other: that closure cost an allocation a job.)
	start func(rj *runningJob)
	stop  func(rj *runningJob)
	// settled, unless nil, is called once the job of a handler whose job
	// this runner settles itself (runningJob.ownSettle) is settled (a
	// SQLite worker's: see worker.settling).
	settled func(rj *runningJob)
	ack     func(j *Job) error // completes a job whose handler returned nil
	// ackLater: ack hands the job to a batched ack, which reports its
	// result (Job.OnResult) once the batch committed.
	ackLater bool
}

func newRunner(job *Job, opts WorkOpts, h jobHandler) (*runner, error) {
	switch {
	case job == nil || job.q == nil:
		return nil, opErr("run job", "", errNotClaimed)
	case h.missing():
		return nil, opErr("run job", job.q.name, fmt.Errorf("%w: nil handler", ErrInvalidArgument))
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, opErr("run job", job.q.name, err)
	}
	return &runner{q: job.q, opts: opts, h: h}, nil
}

// runAlone runs one job outside a worker: ctx is the stop, and the job's
// own heartbeat runs beside its handler. Its handler context is the
// standard pair (a cause for the lost claim, a timer for the Timeout): one
// job does not need the worker's shared timeouts.
func (r *runner) runAlone(ctx context.Context, j *Job) JobResult {
	r.settleCtx = r.q.s.life.settleCtx(ctx)
	r.stopped = func() bool { return ctx.Err() != nil }
	var endTimeout, endBeats context.CancelFunc
	var done chan struct{}
	r.start = func(rj *runningJob) {
		claimCtx, claimGone := context.WithCancelCause(ctx)
		if rj.untimed { // its Timeout starts once its transaction began (callTx)
			rj.ctx, endTimeout = claimCtx, func() {}
		} else {
			rj.ctx, endTimeout = context.WithTimeout(claimCtx, r.opts.Timeout)
		}
		rj.cancel = claimGone
		var beatCtx context.Context
		beatCtx, endBeats = context.WithCancel(r.settleCtx)
		done = make(chan struct{})
		go func() {
			defer close(done)
			every := max(r.opts.Visibility/3, time.Millisecond)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-beatCtx.Done():
					return
				case <-t.C:
				}
				if rj.ctx.Err() == nil && !rj.held.Load() {
					heartbeat(beatCtx, r.q, j, r.opts.Visibility, rj)
				}
			}
		}()
	}
	r.stop = func(*runningJob) { endBeats(); <-done; endTimeout() }
	r.ack = func(j *Job) error { return j.Ack(r.settleCtx) }
	return r.runJob(j)
}

// runningJob is a running handler as the heartbeat, claim checks and
// timeouts see it.
type runningJob struct {
	job   *Job
	since time.Time // when its handler started
	// lease: when its claim runs out, on the store's clock, as the claim
	// or the worker's last heartbeat set it (a handler's own Heartbeat
	// may have set it later); read and written by the worker's
	// heartbeats once the run started.
	lease  time.Time
	ctx    context.Context         // the handler's: done at its Timeout, a hard stop or a lost claim
	cancel context.CancelCauseFunc // ends ctx with a cause (ErrClaimLost, a stop, the run's end)
	// lost: the claim was found gone while the handler ran (loseClaim),
	// whether or not ctx had already ended for another reason.
	lost atomic.Bool
	// held: the handler's own transaction extended the claim and holds the
	// writer slot (SQLite), so nothing can take the job meanwhile and a
	// heartbeat would only wait for the slot.
	held atomic.Bool
	// awaiting: a worker's heartbeat waits for the lock of the job's row,
	// which another transaction holds (awaitLock); the worker's other
	// beats leave the claim to it. The heartbeats goroutine's alone.
	awaiting bool
	// taken: a claim's slot (Job.runSlot) was given to a run.
	taken atomic.Bool
	// abandoned: the worker's stop gave up waiting for the handler, which
	// ignored its cancelled context, and Work returned without it: what
	// it returns settles nothing (see worker.abandon). skip: the handler
	// would have started after that, so it does not run. (abandoned is set
	// under the worker's mu, which stopJob takes before it is read.)
	abandoned atomic.Bool
	skip      bool
	// txSlot: the handler's transaction holds one of the store's
	// handlerTxSlots (releaseTxSlot gives it back once: when the
	// transaction ends, or once the worker that abandoned the handler
	// rolled it back). tx: that transaction, once begun (the store's own,
	// not a caller's), for the worker to roll back (endAbandonedTx).
	txSlot atomic.Bool
	tx     atomic.Pointer[Tx]
	// untimed: ctx has no deadline: the handler's Timeout starts once its
	// own transaction began (callTx), not while it waits for a
	// transaction slot, a pooled connection or SQLite's writer slot.
	untimed bool
	// token: the job's claim as its run began (set before the run
	// starts, never changed), for a transactional handler holding
	// SQLite's writer to extend while the job's lock is held by a settle
	// that waits for that writer (see worker.claimsToHold). ownSettle:
	// the runner settles the job with a statement of its own, not by the
	// batched ack (the handler failed, or it had a transaction); set once
	// the handler returned, before stop.
	token     int64
	ownSettle bool
	// stopped: the runner called stop for it (settleRun). The handler's
	// goroutine's alone, for a worker's runJob to tell, when the
	// goroutine exits, whether the worker still counts the run.
	stopped bool
	// claimedTo: when the claim ran out as claimed (set before the run
	// starts, never changed: a lower bound of the lease, which heartbeats
	// and extensions only move later; see worker.claimsToHold).
	claimedTo time.Time
	// savepoint: on SQLite, the claim's token when the handler runs after
	// the savepoint SavepointHandler, in the transaction that extended
	// its claim (callTx); 0 otherwise. The handler's goroutine's alone.
	savepoint int64
	// heldOthers: the claims of the store's other jobs (every worker's)
	// that rj's transaction extended while it holds SQLite's writer
	// (holdOthers), by worker, set back to its Visibility from the commit
	// (releaseOthers). The handler's goroutine's alone.
	heldOthers []heldClaims

	// A worker's: the handler's place among the running ones (oldest
	// first), and the bucket whose context, its context's parent, ends it
	// at its Timeout.
	prev, next *runningJob
	bucket     *timeoutBucket
}

// loseClaim cancels the handler: its claim is gone, for cause (an error
// matching ErrClaimLost).
func (rj *runningJob) loseClaim(cause error) {
	rj.lost.Store(true)
	rj.cancel(cause)
}

// runJob is the handler lifecycle: it runs the handler of j and settles j
// by its result. Every handler run of every worker goes through it.
func (r *runner) runJob(j *Job) JobResult {
	res, _ := r.run(j, r.begin(j))
	return res
}

// run runs the handler of j (its run begun: rj) and settles j, and
// reports whether the worker abandoned the handler
// (runningJob.abandoned).
func (r *runner) run(j *Job, rj *runningJob) (res JobResult, abandoned bool) {
	var call handlerCall
	// A handler that exits its goroutine failed: its job is settled so
	// before the goroutine ends, and a worker puts another goroutine in
	// its place (worker.runJob). On the caller's goroutine (RunJob) the
	// Goexit goes on once the job is settled, as t.FailNow wants.
	defer call.afterExit(func(err error) { r.finish(j, rj, r.exitedTx(rj), err) })
	tx, err := r.call(j, rj, &call)
	return r.finish(j, rj, tx, err)
}

// finish settles j by its handler's result (settle) and reports it to the
// job's result functions, unless the batched ack does (see
// runner.ackLater).
func (r *runner) finish(j *Job, rj *runningJob, tx *Tx, err error) (JobResult, bool) {
	res, later, abandoned := r.settleRun(j, rj, tx, err)
	if !later {
		j.endRun(res)
	}
	return res, abandoned
}

// begin starts the run of j's handler: its slot, its context, its
// registration with the worker (start).
func (r *runner) begin(j *Job) *runningJob {
	token := j.beginRun() // the job's claim as the run began
	rj := j.runSlot()
	rj.job, rj.since, rj.token = j, time.Now(), token
	rj.untimed = r.h.tx != nil && r.callerTx == nil
	rj.savepoint, rj.heldOthers = 0, nil
	if j.ClaimExpiresAt != nil {
		rj.lease = *j.ClaimExpiresAt
		rj.claimedTo = rj.lease
	}
	r.start(rj)
	return rj
}

// call runs the handler of j (in its transaction, begun here, for a
// transactional one); tx is that transaction, nil when none was begun.
func (r *runner) call(j *Job, rj *runningJob, call *handlerCall) (tx *Tx, err error) {
	ctx := rj.ctx
	switch {
	case rj.skip:
		return nil, context.Cause(ctx)
	case r.h.tx != nil:
		return r.callTx(ctx, j, rj, call)
	default:
		return nil, call.run(func() error { return r.h.plain(ctx, j) })
	}
}

// exitedTx is the transaction of a handler that exited its goroutine:
// the caller's (RunJobInTx), or its own (callTx stored it before the
// handler ran).
func (r *runner) exitedTx(rj *runningJob) *Tx {
	switch {
	case r.h.tx == nil:
		return nil
	case r.callerTx != nil:
		return r.callerTx
	}
	return rj.tx.Load()
}

// settleRun settles j by its handler's result (tx, err: see call); later
// says the result is reported by the batched ack (see runner.ackLater),
// abandoned that the worker gave up on the handler (and nothing was
// settled).
func (r *runner) settleRun(j *Job, rj *runningJob, tx *Tx, err error) (res JobResult, later, abandoned bool) {
	rj.ownSettle = err != nil || tx != nil || !r.ackLater
	r.stop(rj)
	rj.stopped = true
	if rj.ownSettle && r.settled != nil {
		defer r.settled(rj)
	}
	if rj.abandoned.Load() || rj.skip {
		// Work returned without this handler: settle nothing (its claim,
		// no longer extended, lapses and the job runs again), only end
		// its transaction.
		rj.cancel(nil)
		if tx != nil && r.callerTx == nil {
			_ = tx.Rollback(r.settleCtx)
		}
		rj.releaseTxSlot(r.q.s)
		return JobResult{Outcome: OutcomeClaimLost, Err: err}, false, !rj.skip
	}
	lost := rj.lost.Load()
	if tx != nil && err == nil && !lost && rj.savepoint != 0 {
		if gone := tx.rolledBackWhole(); gone != nil {
			// The handler returned nil, but a write of its failed and
			// SQLite rolled its transaction back whole (its Timeout or a
			// stop interrupted it, or memory, disk or locks failed it):
			// nothing it wrote is left, and the run failed as if it had
			// returned that error. Settled so, in a transaction begun
			// again on the writer (settleInTx, settleAfresh), with the
			// claims it had extended revived. Before, the ack failed on
			// the rolled back transaction, and the job was settled on its
			// own after its claim and the waiting jobs' claims had lapsed
			// (interrupt56).
			err = fmt.Errorf("the handler returned nil, but its transaction was rolled back: %w", gone)
		}
	}
	stoppedIt := err != nil && r.stopped()
	rj.cancel(nil) // the run is over: its context ends
	if tx != nil && err != nil && !lost && rj.savepoint != 0 {
		res, ok := r.settleInTx(tx, j, rj, err, stoppedIt)
		rj.releaseTxSlot(r.q.s) // the transaction ended
		if ok {
			return res, false, false
		}
		// Neither the transaction nor one begun again on its connection
		// settled the job (settleAfresh), rolled back: settle on its own
		// below.
		tx = nil
	}
	if tx != nil {
		res, lostNow, err2 := r.finishTx(tx, j, rj, err, lost)
		if res.Outcome != 0 {
			return res, false, false
		}
		lost = lostNow
		if err == nil {
			err = err2 // the completion or the commit failed: settle by that
		}
	}
	if lost {
		return r.lostResult(j, err), false, false
	}
	res, later = r.settle(j, err, stoppedIt, r.callerTx)
	return res, later, false
}

// settledResult is res with the state (and next run) the settle of j
// left.
func (r *runner) settledResult(j *Job, res JobResult) JobResult {
	if j.mu != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
	}
	res.State, res.RunAt = j.after, j.next
	if res.Outcome == OutcomeSettledByHandler {
		res.SettledAs = j.as
	}
	return res
}

// lostResult is the result of a run whose claim was lost: nothing was
// settled, and the job is read to say what became of it.
func (r *runner) lostResult(j *Job, err error) JobResult {
	res := JobResult{Outcome: OutcomeClaimLost, Err: err}
	if found, ferr := r.q.Job(r.settleCtx, j.ID); ferr == nil {
		res.State = found.State
		if found.State == JobPending {
			res.RunAt = found.RunAt
		}
	}
	return res
}

// callTx begins the handler's transaction (or takes the caller's) and runs
// the handler in it. tx is nil when none was begun.
func (r *runner) callTx(ctx context.Context, j *Job, rj *runningJob, call *handlerCall) (*Tx, error) {
	s := r.q.s
	if r.callerTx != nil {
		tx := *r.callerTx
		return r.callerTx, call.run(func() error { return r.h.tx(withTx(ctx, s, tx), tx.lend(j), j) })
	}
	if err := s.takeHandlerTx(ctx); err != nil {
		return nil, err
	}
	rj.txSlot.Store(true)
	tx, err := s.begin(ctx, true) // the runner ends it, settling j in it
	if err != nil {
		rj.releaseTxSlot(s)
		return nil, err
	}
	rj.tx.Store(&tx)
	if rj.abandoned.Load() { // Work gave up on the handler while it began: runAndSettle rolls back
		return &tx, context.Cause(ctx)
	}
	if s.singleWriter() {
		// The transaction holds the writer slot until it ends, so no other
		// worker can take the job meanwhile, and a heartbeat beside it
		// would only wait for the slot. Extend the claim here instead (the
		// claim may have aged while the transaction waited for the slot),
		// past the handler's Timeout and by a Visibility for the settle,
		// and so the claims of the store's other jobs, this worker's and
		// every other worker's, which wait for the writer meanwhile
		// (holdOthers). The handler then runs after a
		// savepoint: when it fails, its writes are rolled back to there and
		// its job settled in this transaction (settleInTx), so that the
		// extensions commit whatever the handler's outcome. Rolled back
		// whole, they went with its writes, the claim had lapsed while the
		// transaction held the writer, and the settle found it gone: a
		// Permanent error, a Snooze, a retry's backoff or a stop's release
		// did nothing and the job ran again at once (attack55 F1). These
		// statements run to their end even when the stop comes now (the
		// handler then fails, and its job is released here).
		sctx := r.settleCtx
		deadline, token, err := j.extend(sctx, &tx, r.opts.Timeout+r.opts.Visibility)
		if err != nil {
			if errors.Is(err, ErrClaimLost) {
				rj.loseClaim(err)
			}
			return &tx, err
		}
		rj.held.Store(true)
		r.holdOthers(sctx, &tx, rj, deadline)
		if err := tx.execOwn(sctx, queries.SavepointHandler); err != nil {
			return &tx, err
		}
		rj.savepoint = token
	}
	// The Timeout runs from here: waiting for a transaction slot or the
	// writer spent it before, and a handler that needed less than its
	// Timeout failed, its attempt spent (attack54: 5 of 6 jobs dead on a
	// pool of 2). At the deadline the run's own context ends too, so that
	// its claim is no longer extended (see heartbeats).
	hctx, endTimeout := context.WithTimeout(ctx, r.opts.Timeout)
	defer endTimeout()
	stopAt := context.AfterFunc(hctx, func() {
		if ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) {
			rj.cancel(context.DeadlineExceeded)
		}
	})
	defer stopAt()
	return &tx, call.run(func() error { return r.h.tx(withTx(hctx, s, tx), tx.lend(j), j) })
}

// holdOthers extends, in tx (on SQLite's writer), the claims of the
// store's other jobs that would run out before tx ends (within the
// Timeout of rj's handler) to deadline, rj's own: the jobs of every
// worker of the store (writerHolds), rj's own worker's and the others',
// Work's and WorkTx's, running or claimed and about to run. They wait for
// the writer meanwhile, where neither their heartbeats nor their own
// transactions' extensions can run. Without it they lapsed while a
// handler held the writer longer than what was left of their leases, and
// each such job, its transaction begun at last, found its claim gone and
// ended dead without its handler running (attack55 F2: 2 of 3 jobs,
// Concurrency 3, handlers of 1.5 s and a Visibility of 1 s), or, a plain
// Work handler's, was told its claim was lost and ran again; until
// session 56 only rj's own worker's were extended, and a second queue's
// worker lost them so (attack56a F1). Only the claims that, as claimed,
// run out before rj's Timeout and a third of their worker's Visibility
// are extended (none in a burn-down of short handlers, where no statement
// is added); a heartbeat may have extended some already, which costs an
// update (HoldClaims never moves a lease earlier). The extensions commit
// whatever the handler's outcome (see settleInTx). A failure costs only
// the extensions: their heartbeats ask again once the writer is free.
func (r *runner) holdOthers(ctx context.Context, tx *Tx, rj *runningJob, deadline time.Time) {
	workers := r.q.s.holds.list()
	if len(workers) == 0 {
		return
	}
	end := deadline.Add(-r.opts.Visibility) // the handler's Timeout from now
	var claims []claimRef
	var held []heldClaims
	for _, w := range workers {
		n := len(claims)
		if claims = w.claimsToHold(rj, end, claims); len(claims) > n {
			held = append(held, heldClaims{visibility: w.opts.Visibility, claims: claims[n:len(claims):len(claims)]})
		}
	}
	if len(claims) == 0 {
		return
	}
	// Should the worker abandon the handler (it ignores its cancelled
	// context past a stop), the rollback of tx takes these extensions
	// along while their jobs still wait for the writer: their claims then
	// lapsed, and each job, released by the stop or run at last, found its
	// claim gone and ended dead without running, or ran again (attack56a
	// F7: 4 of 4 runs). The rollback sets them to a Visibility from then
	// instead, as releaseOthers would have, before the writer is free
	// (keepOnAbandon, reviveHeld). Registered first: an abandon between
	// the extension and the registration would undo the extension
	// unseen.
	r.keepHeldOnAbandon(tx, held)
	if err := r.extendInTx(ctx, tx, claims, deadline, true); err != nil {
		r.q.s.log.Warn("alkstore: could not extend the claims waiting for a transactional handler's writer", "queue", r.q.name, "jobs", len(claims), "error", err)
		return
	}
	rj.heldOthers = held
}

// keepHeldOnAbandon registers with tx (Tx.keepOnAbandon) the revival of the
// claims of held, which tx extends for the jobs waiting for the writer
// it holds, should the store roll tx back from another goroutine: they
// are set to a Visibility from then (reviveHeld), before the writer is
// free. It keeps its own copy of held (releaseOthers edits the list).
func (r *runner) keepHeldOnAbandon(tx *Tx, held []heldClaims) {
	if len(held) == 0 {
		return
	}
	kept, s, jobs := slices.Clone(held), r.q.s, 0
	for _, h := range held {
		jobs += len(h.claims)
	}
	tx.keepOnAbandon(func(ctx context.Context, o ops) error {
		h, ok := o.(claimHolder)
		if !ok {
			return nil
		}
		if _, err := s.reviveHeld(ctx, h, kept); err != nil {
			s.log.Warn("alkstore: could not keep the claims waiting for an abandoned transactional handler's writer", "queue", r.q.name, "jobs", jobs, "error", err)
			return err
		}
		return nil
	})
}

// releaseOthers sets the claims holdOthers extended back to their worker's
// Visibility from now, in tx, just before it commits (one statement per
// Visibility among those workers): the extension covered the longest the
// transaction could hold the writer, and kept once the writer was free it
// delayed the jobs of a worker that then died, or a job whose handler Work
// then left behind, by up to the Timeout past the promised Visibility
// (review55a F1: 10 min instead of 3 s). A claim a heartbeat extends
// meanwhile is extended from there, as for Work. A failure leaves the
// extensions (the jobs come back later, none runs twice).
func (r *runner) releaseOthers(tx *Tx, rj *runningJob) {
	held := rj.heldOthers
	rj.heldOthers = nil
	for i, h := range held {
		if h.claims == nil {
			continue // set back with an earlier worker's of the same Visibility
		}
		claims := h.claims
		for k := i + 1; k < len(held); k++ {
			if held[k].visibility == h.visibility {
				claims = append(claims[:len(claims):len(claims)], held[k].claims...)
				held[k].claims = nil
			}
		}
		if err := r.extendInTx(r.settleCtx, tx, claims, r.q.s.now().Add(h.visibility), false); err != nil {
			r.q.s.log.Warn("alkstore: could not set back the claims a transactional handler extended while it held the writer", "queue", r.q.name, "jobs", len(claims), "error", err)
		}
	}
}

// extendInTx sets the live claims among claims to run out at deadline, in
// tx (setClaims); hold: only those that ran out earlier (holdClaims).
func (r *runner) extendInTx(ctx context.Context, tx *Tx, claims []claimRef, deadline time.Time, hold bool) error {
	return run0(r.q.handle, "heartbeat", tx.via(ctx), func(o target) error {
		h, ok := o.ops.(claimHolder)
		if !ok {
			return nil
		}
		var err error
		if hold {
			_, err = h.holdClaims(ctx, claims, r.q.s.now(), deadline)
		} else {
			_, err = h.setClaims(ctx, claims, r.q.s.now(), deadline)
		}
		return err
	})
}

// claimHolder is the ops of an engine whose transactions hold its only
// writer (SQLite): setClaims sets claims to run out at deadline (those
// live at now) in the transaction, holdClaims only those that ran out
// earlier (a heartbeat may have pushed one further: review56 R3), and
// both return the ids they kept.
type claimHolder interface {
	holdClaims(ctx context.Context, claims []claimRef, now, deadline time.Time) ([]int64, error)
	setClaims(ctx context.Context, claims []claimRef, now, deadline time.Time) ([]int64, error)
	// reviveClaims extends claims to deadline (those still held by their
	// tokens, lapsed or not: see runner.settleAfresh) and returns the ids
	// it extended.
	reviveClaims(ctx context.Context, claims []claimRef, deadline time.Time) ([]int64, error)
}

// settleInTx settles, on SQLite, the job of a transactional handler that
// failed, in its own transaction, which extended its claim (callTx): it
// rolls back to the savepoint before the handler (its writes, and any
// settle of its job it made in tx, are gone), records the retry, failure,
// snooze or release as Work does, and commits that with the claims'
// extensions. When SQLite rolled the transaction back whole, a new one
// on its connection settles the job instead (settleAfresh). ok is false
// when neither could, the transaction rolled back now: the caller settles
// on its own, as before. Either way tx has ended when it returns
// (committed, or rolled back); the caller gives its slot back.
func (r *runner) settleInTx(tx *Tx, j *Job, rj *runningJob, err error, stoppedIt bool) (JobResult, bool) {
	ctx := r.settleCtx
	afresh := func() (JobResult, bool) {
		if res, ok := r.settleAfresh(tx, j, rj, err, stoppedIt); ok {
			return res, true
		}
		r.rollbackTx(tx, j)
		return JobResult{}, false
	}
	if rerr := tx.execOwn(ctx, queries.RollbackToHandler); rerr != nil {
		return afresh()
	}
	// A settle of the handler's in tx (AckTx, SnoozeTx, ...) was rolled
	// back with its writes: the claim is the job's again (the rollback to
	// the savepoint ran what was to follow their rollback, see
	// txState.trackSavepoints, and dropped what was to follow their
	// commit: a group member's CommitTx in the handler no longer moves
	// its offset).
	j.restoreClaim(rj.savepoint)
	held := rj.heldOthers // releaseOthers forgets them
	res, _ := r.settle(j, err, stoppedIt, tx)
	if res.Outcome == OutcomeClaimLost || res.SettleErr != nil {
		// Nothing was settled: the statement that failed changed nothing
		// (SQLite undid it), or the claim is no longer the job's. Rolled
		// back, tx took the claims' extensions with it, and the waiting
		// jobs ended dead without their handlers running (attack57 F1: a
		// trigger refusing the retry's UPDATE); on PostgreSQL the job is
		// left to its claim's lapse and the others keep theirs. So the
		// claims are kept here, as settleAfresh keeps them, and commit.
		if _, rerr := r.reviveRunClaims(tx, j, rj, res.Outcome != OutcomeClaimLost); rerr != nil {
			if tx.lost() { // SQLite rolled tx back whole meanwhile
				rj.heldOthers = held // not revived: the new transaction revives them
				return afresh()
			}
			r.rollbackTx(tx, j)
			return res, true
		}
	} else {
		r.releaseOthers(tx, rj)
	}
	if open, cerr := tx.commitOrKeep(ctx); cerr != nil {
		if open { // kept, or rolled back whole on its connection
			rj.heldOthers = held
			return afresh()
		}
		// Rolled back (the claim is the job's again: see Job.settle).
		r.q.s.log.Warn("alkstore: commit of a failed transactional handler's settle failed", "queue", r.q.name, "job", j.ID, "error", cerr)
		return JobResult{}, false
	}
	return res, true
}

// settleAfresh settles the job of a failed transactional handler on
// SQLite when SQLite rolled its transaction back whole (a write in it
// interrupted by the handler's Timeout or a stop, or failed for memory,
// disk or locks), and with it the extensions of the job's claim and of
// the claims waiting for the writer (holdOthers). Settled on its own
// after that, the job found its claim lapsed while the transaction held
// the writer (its retry and backoff, or its release, were not recorded,
// and it ran again at once), and the waiting jobs' claims had lapsed too,
// so each ended dead without its handler running (attack56a F4: 3 of 3
// runs). The transaction's connection is still this process's, and with
// it the writer slot: a new transaction begins on it (Tx.beginAgain)
// before any other write of the process, revives those claims to a
// Visibility from now (ReviveClaims, as releaseOthers would have set
// them), settles the job by its handler's result as settleInTx does, and
// commits.
//
// Reviving a lapsed claim is safe: it is fenced by its token and state
// running only, and every claim of a job sets a new token, so a job
// another process claimed meanwhile (between the rollback and the new
// BEGIN, the only moment the writer was free), cancelled, settled or
// swept is not touched; a lapsed claim nobody took again is held by this
// process alone (its handler runs, or waits to, in memory), as if its
// extension had committed. No other worker of this process could take
// it: its claims wait for the writer slot this transaction kept.
//
// ok is false, the new transaction (if any) still open, when it could not
// begin or revive the claims; and false after a failed commit.
func (r *runner) settleAfresh(tx *Tx, j *Job, rj *runningJob, err error, stoppedIt bool) (JobResult, bool) {
	ctx := r.settleCtx
	if berr := tx.beginAgain(ctx); berr != nil {
		return JobResult{}, false
	}
	// A settle of the handler's in tx went with the transaction: the
	// claim is the job's again (beginAgain ran its rollback hooks).
	j.restoreClaim(rj.savepoint)
	// The new transaction revives the waiting jobs' claims in place of
	// the extensions that went: its abandon (the store closing under it)
	// must keep them as the first one's would have (beginAgain dropped
	// that registration with the rest of the first transaction's).
	r.keepHeldOnAbandon(tx, rj.heldOthers)
	revived, rerr := r.reviveRunClaims(tx, j, rj, true)
	if rerr != nil {
		r.q.s.log.Warn("alkstore: could not revive the claims a transactional handler's transaction had extended before SQLite rolled it back", "queue", r.q.name, "job", j.ID, "error", rerr)
		return JobResult{}, false
	}
	res := JobResult{}
	if slices.Contains(revived, j.ID) {
		res, _ = r.settle(j, err, stoppedIt, tx)
	}
	// The claims revived commit whatever became of the job's settle: one
	// that failed changed nothing (SQLite undid its statement) and leaves
	// the job to its claim's lapse, as Work's settles do.
	if cerr := tx.Commit(ctx); cerr != nil {
		r.q.s.log.Warn("alkstore: commit of a failed transactional handler's settle failed", "queue", r.q.name, "job", j.ID, "error", cerr)
		return JobResult{}, false
	}
	if res.Outcome == 0 { // not revived: cancelled, or taken by another process
		return r.lostResult(j, err), true
	}
	return res, true
}

// reviveHeld extends with h, in the transaction begun on SQLite's writer
// in place of one that was rolled back (settleAfresh; liteTx's
// abandonKeeping), each worker's claims among held to its Visibility from
// now, fenced by their tokens and the running state (ReviveClaims), as
// releaseOthers would have set them back; it returns the ids extended.
func (s *Store) reviveHeld(ctx context.Context, h claimHolder, held []heldClaims) ([]int64, error) {
	var revived []int64
	for _, hc := range held {
		ids, err := h.reviveClaims(ctx, hc.claims, s.now().Add(hc.visibility))
		if err != nil {
			return revived, err
		}
		revived = append(revived, ids...)
	}
	return revived, nil
}

// reviveRunClaims sets, in tx, the claim of rj's job and the claims of the
// other jobs rj's transaction held (holdOthers) to a Visibility (their
// worker's) from now, as releaseOthers would have set them back, fenced
// by their tokens and state running only, lapsed or not (ReviveClaims:
// see settleAfresh for why that is safe on SQLite's writer), and returns
// the ids it revived. The transaction then holds no more extensions:
// releaseOthers has nothing left to do.
//
// own false leaves the job's claim out: it was lost (the job is not this
// handler's any more, or its lease ran out by the store's clock).
func (r *runner) reviveRunClaims(tx *Tx, j *Job, rj *runningJob, own bool) ([]int64, error) {
	ctx := r.settleCtx
	held := rj.heldOthers
	if own {
		held = append([]heldClaims{{r.opts.Visibility, []claimRef{{j.ID, rj.savepoint}}}}, held...)
	}
	rj.heldOthers = nil // revived here: nothing for releaseOthers
	var revived []int64
	err := run0(r.q.handle, "heartbeat", tx.via(ctx), func(o target) error {
		h, ok := o.ops.(claimHolder)
		if !ok {
			return errors.New("no claims to revive on this engine")
		}
		var err error
		revived, err = r.q.s.reviveHeld(ctx, h, held)
		return err
	})
	return revived, err
}

// rollbackTx rolls back the handler's own transaction tx, logging a
// failure.
func (r *runner) rollbackTx(tx *Tx, j *Job) {
	if rerr := tx.Rollback(r.settleCtx); rerr != nil && !errors.Is(rerr, ErrTxDone) {
		r.q.s.log.Warn("alkstore: rollback of a transactional handler failed", "queue", r.q.name, "job", j.ID, "error", rerr)
	}
}

// finishTx ends the handler's transaction: on success it completes the job
// in it (unless the handler settled it there) and commits; otherwise, or
// when the claim is lost, it rolls back. It returns the result when the
// job is settled (the handler's writes committed, or in the caller's
// transaction), else a zero one, whether the claim is lost, and why the
// completion or commit failed. In the caller's transaction it ends
// nothing.
//
// On SQLite (rj.savepoint set: the claims were extended in tx) a
// completion or commit that failed does not roll tx back whole: that took
// the extensions of the job's claim and of the claims waiting for the
// writer with it, the waiting jobs ended dead without their handlers
// running, and the job's own error was lost to its claim's lapse
// (attack57 F1: an application's trigger refusing the completion, a
// deferred foreign key the handler's writes broke, caught at COMMIT).
// The job is settled in tx by that error instead, as a failed handler's
// (settleInTx: the handler's writes rolled back to its savepoint, the
// claims kept), which is what PostgreSQL records once its transaction
// rolled back: a retry or failure by the completion's or commit's error.
func (r *runner) finishTx(tx *Tx, j *Job, rj *runningJob, err error, lost bool) (JobResult, bool, error) {
	ctx, own := r.settleCtx, r.callerTx == nil
	defer rj.releaseTxSlot(r.q.s) // the transaction ended, committed or not
	rollback := func() {
		if !own {
			return
		}
		if rerr := tx.Rollback(ctx); rerr != nil {
			r.q.s.log.Warn("alkstore: rollback of a transactional handler failed", "queue", r.q.name, "job", j.ID, "error", rerr)
		}
	}
	if lost || err != nil {
		rollback()
		return JobResult{}, lost, nil
	}
	keep := own && rj.savepoint != 0 // SQLite: settle in tx, the claims kept
	outcome := OutcomeSettledByHandler
	if !j.settled() {
		outcome = OutcomeAcked
		if aerr := j.AckTx(ctx, *tx); aerr != nil {
			if keep {
				if res, ok := r.settleInTx(tx, j, rj, aerr, false); ok {
					return res, false, nil
				}
				return JobResult{}, false, aerr // rolled back: settle on its own
			}
			rollback()
			return JobResult{}, errors.Is(aerr, ErrClaimLost), aerr
		}
	}
	if own {
		held := rj.heldOthers
		r.releaseOthers(tx, rj)
		if !keep {
			if cerr := tx.Commit(ctx); cerr != nil {
				return JobResult{}, false, cerr // rolled back: the claim is the job's again (see Job.settle)
			}
		} else if open, cerr := tx.commitOrKeep(ctx); cerr != nil {
			if !open {
				return JobResult{}, false, cerr
			}
			// Still on the writer: the set-back of the claims, after the
			// savepoint, goes with the handler's writes.
			rj.heldOthers = held
			if res, ok := r.settleInTx(tx, j, rj, cerr, false); ok {
				return res, false, nil
			}
			return JobResult{}, false, cerr
		}
	}
	return r.settledResult(j, JobResult{Outcome: outcome}), false, nil
}

// errHandlerExited is the failure of a handler that exited its goroutine
// (runtime.Goexit), as t.FailNow does when a test calls it from a
// handler: the run failed, as a panic's does.
var errHandlerExited = errors.New("handler exited its goroutine (runtime.Goexit; t.FailNow, t.Fatal or t.SkipNow called from a handler?)")

// handlerCall runs a user's handler (Work's, WorkTx's, a group member's)
// and records how it ended. A panic is the handler's error ("handler
// panicked"). A runtime.Goexit cannot be stopped: the goroutine ends once
// its deferred calls ran. So the call records it (exited), and the frames
// above that have a failure's work to do (settle the job, roll back,
// deliver the event again, put a goroutine of the loop back in the ended
// one's place) do it in a deferred afterExit, with errHandlerExited as
// the handler's error. Before, the job or event stayed in flight until
// the loop's stop, which then waited 5 s more for the handler.
type handlerCall struct{ exited bool }

// run runs fn, turning a panic into an error and recording a Goexit.
// exited is set before fn runs and cleared only once the recovering call
// returned: every way out of fn other than a return or a recovered panic
// counts, a Goexit whose unwinding then panicked in one of the handler's
// own deferred calls too (the recover takes that panic, and Go goes on
// with the Goexit: the recovering call never returns). Before, exited was
// set only when the recovering call saw no panic, and such a handler was
// not settled: its job stayed running, its transaction held SQLite's
// writer, and a worker's slot was lost for good (review60a).
func (c *handlerCall) run(fn func() error) error {
	c.exited = true
	err := recovered(fn)
	c.exited = false
	return err
}

// recovered runs fn, turning a panic into an error.
func recovered(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}

// afterExit, deferred, calls failed with errHandlerExited when the handler
// run by c exited its goroutine. Nothing else unwinds through it: a panic
// of the store's own code goes on untouched.
func (c *handlerCall) afterExit(failed func(err error)) {
	if c.exited {
		failed(errHandlerExited)
	}
}

// settle settles the job by its handler's result, unless the handler
// settled it itself, in tx when one is given (the caller's, RunJobInTx;
// or on SQLite the failed handler's own, see settleInTx). stoppedIt says
// the handler failed after the stop cancelled it: the job did not fail,
// so it goes back with its attempt.
func (r *runner) settle(j *Job, err error, stoppedIt bool, tx *Tx) (JobResult, bool) {
	res := JobResult{Err: err}
	if j.settled() {
		res.Outcome = OutcomeSettledByHandler
		return r.settledResult(j, res), false
	}
	ctx := r.settleCtx
	delay, snoozed := SnoozeDelay(err)
	var serr error
	switch {
	case err == nil && r.ackLater:
		_ = r.ack(j)
		return JobResult{Outcome: OutcomeAcked, State: JobCompleted}, true
	case err == nil:
		res.Outcome, serr = OutcomeAcked, r.ack(j)
	case snoozed:
		res.Outcome, serr = OutcomeSnoozed, j.snooze(ctx, tx, delay)
	case stoppedIt && tx != r.callerTx, stoppedIt && tx == nil:
		res.Outcome, serr = OutcomeReleased, j.release(ctx, tx)
	case stoppedIt: // in the caller's transaction (RunJobInTx)
		res.Outcome, serr = OutcomeReleased, j.snooze(ctx, tx, 0)
	case IsPermanent(err):
		res.Outcome, serr = OutcomeFailed, j.fail(ctx, tx, err.Error())
	default:
		var retried bool
		retried, serr = j.retry(ctx, tx, r.opts.Backoff(j.Attempts), err.Error())
		res.Outcome = OutcomeRetried
		if serr == nil && !retried {
			res.Outcome = OutcomeFailed
		}
	}
	if serr != nil {
		if errors.Is(serr, ErrClaimLost) {
			// Lost since the handler returned (or unnoticed: RunJob has no
			// claim checks): nothing was settled.
			return r.lostResult(j, err), false
		}
		if errors.Is(serr, ErrInvalidArgument) && j.settled() {
			// The handler settled the job in a goroutine of its own.
			return r.settledResult(j, JobResult{Outcome: OutcomeSettledByHandler, Err: err}), false
		}
		res.SettleErr = serr
		r.q.s.log.Warn("alkstore: could not settle job", "queue", r.q.name, "job", j.ID, "outcome", res.Outcome.String(), "error", serr)
		r.q.s.life.settleFailed(1, serr)
		return res, false
	}
	return r.settledResult(j, res), false
}

// heartbeat extends j's claim by visibility; a claim found gone that this
// process did not spend cancels the handler rj.
func heartbeat(ctx context.Context, q *Queue, j *Job, visibility time.Duration, rj *runningJob) {
	if j.settled() { // the handler settled its job itself
		return
	}
	_, token, err := j.extend(ctx, nil, visibility)
	switch {
	case errors.Is(err, ErrClaimLost):
		if j.claimToken() == token { // not spent by a settle of ours meanwhile
			rj.loseClaim(fmt.Errorf("job %d: heartbeat: %w", j.ID, err))
		}
	case err != nil && !j.settled() && ctx.Err() == nil:
		q.s.log.Warn("alkstore: heartbeat failed", "queue", q.name, "job", j.ID, "error", err)
	}
}

// handlerTxSlots is how many transactions of transactional handlers the
// store runs (WorkTx and RunJobTx through callTx, a group member's
// ConsumeTx through inHandlerTx) this store holds open at once, all of
// them together, 0 for no bound: on PostgreSQL one fewer than its pool's
// connections (at least one). Each such transaction holds a pooled
// connection for its handler's whole run; with as many of them as
// connections, nothing was left for the store's own statements
// (heartbeats, claims, the settles of failed handlers, group leases),
// claims lapsed while their handlers ran, and jobs ran again (a pool of 4,
// Concurrency 10, handlers of 1 s and a Visibility of 2 s: 12-17 of 30
// jobs ran twice). ConsumeTx took none until session 55: a member's
// transaction beside WorkTx handlers took the last connection, and every
// job whose handler outlived its Visibility ran again in another process
// (attack55 F4). On SQLite such a transaction holds the writer slot
// instead (and a WorkTx one extends its claim itself: see callTx), so
// nothing is counted there.
func (s *Store) handlerTxSlots() int {
	if pg, ok := s.eng.(*pgEngine); ok {
		return cap(pg.txSlots)
	}
	return 0
}

// takeHandlerTx waits, as long as ctx allows, for a slot among
// handlerTxSlots; releaseHandlerTx gives one back once the transaction
// ended. What the waiter holds is kept meanwhile, on a connection the
// slots leave free: a job's claim by its worker's heartbeats (its handler
// runs, for them), a group member's partitions by the member's.
func (s *Store) takeHandlerTx(ctx context.Context) error {
	pg, ok := s.eng.(*pgEngine)
	if !ok {
		return nil
	}
	select {
	case pg.txSlots <- struct{}{}:
		return nil
	default:
	}
	select {
	case pg.txSlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// inHandlerTx is InTx for a transactional handler the store runs outside
// a worker (a group member's ConsumeTx): the transaction takes one of
// handlerTxSlots before it begins, waiting as long as ctx allows, and
// gives it back once it ended: committed, rolled back, or rolled back by
// the store's shutdown (abandoned) while fn still runs. What the caller
// holds meanwhile (a member's partitions) its own heartbeats keep, on the
// connection the slots leave free. call runs fn's handler: one that exits
// its goroutine failed, as one returning an error (InTx rolls back).
func (s *Store) inHandlerTx(ctx context.Context, call *handlerCall, fn func(ctx context.Context, tx Tx) error) error {
	if err := s.takeHandlerTx(ctx); err != nil {
		return err
	}
	var held atomic.Bool
	held.Store(true)
	release := func() {
		if held.CompareAndSwap(true, false) {
			s.releaseHandlerTx()
		}
	}
	defer release() // the transaction never began, or ended
	return s.inTx(ctx, true, func(ctx context.Context, tx Tx) error {
		tx.onRollback(release) // a shutdown's rollback ends it before fn returns
		if !s.singleWriter() {
			return fn(ctx, tx)
		}
		defer call.afterExit(func(error) { s.keepClaimsAfresh(ctx, tx) })
		err := fn(ctx, tx)
		// On SQLite the transaction held the writer for fn's whole run:
		// keep the claims of the store's jobs that waited for it.
		if err == nil {
			err = ctx.Err() // InTx would roll back, and the claims with it
		}
		if err != nil {
			s.keepClaimsAfresh(ctx, tx)
			return err
		}
		if kerr := s.keepClaims(s.settleCtx(ctx), tx); kerr != nil {
			s.log.Warn("alkstore: could not keep the claims waiting for a group member's transaction", "error", kerr)
		}
		// Committed here, kept open should its COMMIT fail (a deferred
		// foreign key the handler's writes broke): rolled back whole by
		// InTx, it took the claims just kept with it, and a Work job
		// waiting for the writer ended dead (review57 F1). Then they are
		// kept afresh, and the error delivers the event again.
		open, cerr := tx.commitOrKeep(ctx)
		if cerr != nil && open {
			s.keepClaimsAfresh(ctx, tx)
		}
		return cerr
	})
}

// settleCtx is ctx without its end, for the store's own statements that
// must run once the caller's work is done (see lifecycle.settleCtx).
func (s *Store) settleCtx(ctx context.Context) context.Context { return s.life.settleCtx(ctx) }

// keepClaimsAfresh is keepClaims for a group member's transaction on
// SQLite that is to roll back (its handler failed, or SQLite rolled it
// back whole): rolled back, it took nothing of the claims with it, but
// they had lapsed under it all the same. When some need it, the
// transaction is rolled back on its connection, which keeps the writer
// (no other write of the process comes between), a new one begins there
// (Tx.beginAgain: the rollback's hooks run, a partition rewound), revives
// them and commits; InTx's rollback then has nothing to do.
func (s *Store) keepClaimsAfresh(ctx context.Context, tx Tx) {
	held := s.claimsToKeep()
	if held == nil {
		return
	}
	sctx := s.settleCtx(ctx)
	if !tx.lost() && tx.rollbackKeep(sctx) != nil {
		return // InTx rolls back
	}
	if err := tx.beginAgain(sctx); err != nil {
		return
	}
	if err := s.reviveHeldIn(sctx, tx, held); err != nil {
		s.log.Warn("alkstore: could not keep the claims waiting for a group member's transaction", "error", err)
	}
	_ = tx.Commit(sctx)
}

// endAbandonedTx rolls back the transaction of a handler the worker
// abandoned (it ignored its cancelled context), so that the hung handler
// holds neither a pooled connection nor, on SQLite, the writer slot, and
// then gives its slot back. Kept open, the transaction held a connection
// the slots no longer counted, so the other transactional handlers' took
// the last one and their claims lapsed unextended (a job ran twice), a
// graceful Shutdown waited for it for ever, and on SQLite the settles of
// the worker's other jobs waited for the writer slot, so Work never
// returned (attack54). The rollback is the one Close makes of a
// transaction left open: a statement the handler still runs in it fails
// (on PostgreSQL its connection is closed), as does every later one
// (ErrTxDone). A transaction not begun yet is rolled back by its handler's
// goroutine, which finds rj abandoned after its Begin (callTx). On SQLite
// the claims the transaction extended for the jobs waiting for the writer
// (holdOthers) are set to a Visibility from the rollback before the
// writer is free (Tx.keepOnAbandon). The wait for the rollback is
// bounded: one that does not end leaves the slot held until the handler
// returns.
func (rj *runningJob) endAbandonedTx(s *Store) {
	tx := rj.tx.Load()
	if tx == nil || tx.h == nil {
		return
	}
	if leaveHandlerTx(tx.h.state, nil) { // holdOthers registered the claims it extended
		rj.releaseTxSlot(s)
	}
}

// leaveHandlerTx rolls back st, the transaction of a handler its loop
// leaves behind (Work's WorkTx handler, a group member's ConsumeTx
// handler: it ignored its cancelled context past a stop), as the shutdown
// rolls back a transaction still open (txState.abandon). keep, unless
// nil, is registered first (Tx.keepOnAbandon): on SQLite what it writes
// commits in a transaction begun again on the writer before the writer
// is free. It waits for the rollback up to rollbackTimeout and reports
// whether it ended; one that did not ends as the statement it waits for
// does.
func leaveHandlerTx(st *txState, keep func(ctx context.Context, o ops) error) bool {
	if keep != nil {
		st.keepOnAbandon(keep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, ended := runWithin(ctx, func() bool { return st.abandon(false) })
	return ended
}

// keepWaitingClaims is the keep (Tx.keepOnAbandon) of a group member's
// transaction on SQLite that its loop leaves behind (Group.leaveHandler):
// in the transaction begun again on the writer as it is rolled back, it
// sets the claims of the store's jobs that waited for that writer, and
// ran out or would within a third of their Visibility, to a Visibility
// from now (claimsToKeep, reviveHeld: fenced by token and state), as the
// member's commit would have (keepClaims). Without it the member's
// transaction held the writer until the store closed, and a Work job the
// stop had released, its release waiting for the writer, was left running
// with its attempt spent (review57 F2). As for keepClaims, a job whose
// settle is in flight is found among its worker's settling jobs
// (worker.settling) by the claim its run began with.
func (s *Store) keepWaitingClaims(ctx context.Context, o ops) error {
	held := s.claimsToKeep()
	h, ok := o.(claimHolder)
	if held == nil || !ok {
		return nil
	}
	if _, err := s.reviveHeld(ctx, h, held); err != nil {
		s.log.Warn("alkstore: could not keep the claims waiting for a group member's transaction left behind", "error", err)
		return err
	}
	return nil
}

// releaseTxSlot gives rj's slot back, once, if it holds one: where the
// transaction ended (finishTx, settleInTx's caller, a Begin that failed),
// or, for a handler the worker abandoned, by whichever of the worker
// (endAbandonedTx) and the handler's goroutine (runAndSettle) ends it
// first.
func (rj *runningJob) releaseTxSlot(s *Store) {
	if rj.txSlot.CompareAndSwap(true, false) {
		s.releaseHandlerTx()
	}
}

func (s *Store) releaseHandlerTx() {
	if pg, ok := s.eng.(*pgEngine); ok {
		<-pg.txSlots
	}
}

// errOnePooledConn refuses a transactional worker or group member on a
// PostgreSQL pool of one connection: its handler's transaction would hold
// the only connection, and nothing could extend its claim or renew its
// partitions' leases while it runs.
var errOnePooledConn = fmt.Errorf("%w: a transactional worker, handler or group member needs a PostgreSQL pool of 2 connections or more (its handlers' transactions hold one each, and its heartbeats need another)", ErrInvalidArgument)

// checkTxPool refuses transactional handlers (WorkTx, RunJobTx,
// RunJobInTx, ConsumeTx) on a PostgreSQL pool of one connection
// (errOnePooledConn).
func (s *Store) checkTxPool() error {
	if pg, ok := s.eng.(*pgEngine); ok && pg.maxConns < 2 {
		return errOnePooledConn
	}
	return nil
}
