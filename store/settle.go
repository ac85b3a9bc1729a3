package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"
)

// Settling a claimed job: every statement here is fenced by the job's
// claim token, so only the claim that holds the job changes it; one that
// matches no row means the claim is gone (ErrClaimLost).
//
// Each settle has a Tx form that runs in the caller's transaction: the
// job's new state commits with the caller's business rows, or not at all.
// A Tx settle that returns ErrClaimLost changed nothing, but the caller's
// other writes in tx did happen: roll tx back (another worker, or a
// Cancel, owns the job now). A Tx settle spends the job's claim at once,
// as far as this process is concerned (a second settle is refused, and
// Work's heartbeats stop); when tx rolls back the claim is the job's again,
// so it can be settled anew. On an adopted transaction (AdoptPgx,
// AdoptSQL) nothing tells the store that the caller rolled back: the claim
// stays spent and the job runs again once its claim lapses.

// Ack completes the job: it is deleted, or kept as completed when its queue
// keeps completed jobs (QueueConfig.CompletedRetention).
func (j *Job) Ack(ctx context.Context) error { return j.ack(ctx, nil) }

// AckTx is Ack inside tx: the job completes only if tx commits, together
// with what else tx wrote (River's JobCompleteTx). It fails with
// ErrClaimLost when the claim expired, the job was cancelled, or another
// worker took it: the caller must then roll tx back.
func (j *Job) AckTx(ctx context.Context, tx Tx) error { return j.ack(ctx, &tx) }

func (j *Job) ack(ctx context.Context, tx *Tx) error {
	_, err := j.settle(ctx, "ack", tx, true, func(o target, now time.Time) (bool, error) {
		j.after, j.next, j.as = JobCompleted, time.Time{}, OutcomeAcked
		return o.ack(ctx, j.ID, j.token, now)
	})
	return err
}

// Retry puts the job back to run again after delay, recording cause as its
// LastError and in its Errors (invalid UTF-8 and NUL bytes replaced by
// U+FFFD, cut to 8 KiB). It
// returns false when the job had no attempts left: then it is dead, with
// cause as its last error. A negative delay is refused with
// ErrInvalidArgument before any I/O, the claim left as it was.
func (j *Job) Retry(ctx context.Context, delay time.Duration, cause string) (bool, error) {
	if err := j.checkDelay("retry", delay); err != nil {
		return false, err
	}
	return j.retry(ctx, nil, delay, cause)
}

// RetryTx is Retry inside tx. It fails with ErrClaimLost when the claim is
// gone: the caller must then roll tx back.
func (j *Job) RetryTx(ctx context.Context, tx Tx, delay time.Duration, cause string) (bool, error) {
	if err := j.checkDelay("retry", delay); err != nil {
		return false, err
	}
	return j.retry(ctx, &tx, delay, cause)
}

func (j *Job) retry(ctx context.Context, tx *Tx, delay time.Duration, cause string) (bool, error) {
	cause = cleanCause(cause)
	if delay < 0 {
		delay = 0
	}
	retried := false
	_, err := j.settle(ctx, "retry", tx, true, func(o target, now time.Time) (bool, error) {
		runAt := now.Add(delay).Truncate(time.Microsecond)
		ok, err := o.retry(ctx, retryReq{claimRef{j.ID, j.token}, now, runAt, cause})
		if err != nil || ok {
			retried = ok
			if ok {
				j.after, j.next, j.as = JobPending, runAt, OutcomeRetried
				o.afterCommit(j.q.wakeFn) // idle workers recompute when it is due
			}
			return ok, err
		}
		j.after, j.next, j.as = JobDead, time.Time{}, OutcomeFailed
		return o.bury(ctx, buryReq{claimRef{j.ID, j.token}, now, cause, true})
	})
	return retried, err
}

// Fail ends the job dead with cause (recorded like Retry's), whatever
// attempts remain.
func (j *Job) Fail(ctx context.Context, cause string) error { return j.fail(ctx, nil, cause) }

// FailTx is Fail inside tx. It fails with ErrClaimLost when the claim is
// gone: the caller must then roll tx back.
func (j *Job) FailTx(ctx context.Context, tx Tx, cause string) error { return j.fail(ctx, &tx, cause) }

func (j *Job) fail(ctx context.Context, tx *Tx, cause string) error {
	cause = cleanCause(cause)
	_, err := j.settle(ctx, "fail", tx, true, func(o target, now time.Time) (bool, error) {
		j.after, j.next, j.as = JobDead, time.Time{}, OutcomeFailed
		return o.bury(ctx, buryReq{claimRef{j.ID, j.token}, now, cause, false})
	})
	return err
}

// Snooze puts the job back to run again after delay without spending its
// attempt (the claim's Attempts increment is undone) and without recording
// an error: the job is not failing, it asked to wait. A negative delay is
// refused with ErrInvalidArgument before any I/O, the claim left as it was.
// Inside Queue.Work a handler may return Snooze(delay) instead.
func (j *Job) Snooze(ctx context.Context, delay time.Duration) error {
	if err := j.checkDelay("snooze", delay); err != nil {
		return err
	}
	return j.snooze(ctx, nil, delay)
}

// SnoozeTx is Snooze inside tx. It fails with ErrClaimLost when the claim
// is gone: the caller must then roll tx back.
func (j *Job) SnoozeTx(ctx context.Context, tx Tx, delay time.Duration) error {
	if err := j.checkDelay("snooze", delay); err != nil {
		return err
	}
	return j.snooze(ctx, &tx, delay)
}

// checkDelay refuses a negative delay to Retry and Snooze (and their Tx
// forms) before any I/O, as every negative option is refused; it counted as
// 0. The claim is left as it was. Work's own settles (a Backoff's delay, a
// Snooze handler result) still take a negative delay as 0.
func (j *Job) checkDelay(op string, delay time.Duration) error {
	if delay >= 0 {
		return nil
	}
	name := ""
	if j != nil && j.q != nil {
		name = j.q.name
	}
	return opErr(op, name, fmt.Errorf("%w: negative delay %s", ErrInvalidArgument, delay))
}

func (j *Job) snooze(ctx context.Context, tx *Tx, delay time.Duration) error {
	delay = max(delay, 0)
	_, err := j.settle(ctx, "snooze", tx, true, func(o target, now time.Time) (bool, error) {
		runAt := now.Add(delay).Truncate(time.Microsecond)
		ok, err := o.snooze(ctx, snoozeReq{claimRef{j.ID, j.token}, now, runAt})
		j.after, j.next, j.as = JobPending, runAt, OutcomeSnoozed
		if ok {
			o.afterCommit(j.q.wakeFn) // idle workers recompute when it is due
		}
		return ok, err
	})
	return err
}

// Cancel ends the job cancelled, as Queue.Cancel does, and spends the
// claim: a handler that cancels its own job should then return (its result
// no longer settles the job).
func (j *Job) Cancel(ctx context.Context) error { return j.cancel(ctx, nil) }

// CancelTx is Cancel inside tx: the job ends cancelled only if tx commits.
// It fails with ErrClaimLost when the job is no longer live (finished, or
// cancelled already): the caller must then roll tx back.
func (j *Job) CancelTx(ctx context.Context, tx Tx) error { return j.cancel(ctx, &tx) }

func (j *Job) cancel(ctx context.Context, tx *Tx) error {
	_, err := j.settle(ctx, "cancel", tx, true, func(o target, now time.Time) (bool, error) {
		ok, err := o.cancel(ctx, j.q.name, j.ID, now)
		j.after, j.next, j.as = JobCancelled, time.Time{}, OutcomeCancelled
		if ok {
			o.afterCommit(j.q.s.wake(claimTopic(j.q.name)))
		}
		return ok, err
	})
	return err
}

// Release gives a claimed job back to its queue without spending its
// attempt: it is claimable again at once, in its old place in line (its
// RunAt is kept). It is what a stop does with a job whose handler it
// cancelled: the job did not fail. A handler that releases its own job
// should then return (its result no longer settles the job). Like Ack, it
// fails with ErrClaimLost once the claim expired or another worker holds
// the job.
func (j *Job) Release(ctx context.Context) error { return j.release(ctx, nil) }

// release is Release, in tx when one is given (a failed transactional
// handler's, on SQLite: see runner.settleInTx).
func (j *Job) release(ctx context.Context, tx *Tx) error {
	_, err := j.settle(ctx, "release", tx, true, func(o target, now time.Time) (bool, error) {
		ok, err := o.release(ctx, j.ID, j.token, now)
		j.after, j.next, j.as = JobPending, j.RunAt, OutcomeReleased
		if ok {
			o.afterCommit(j.q.wakeFn)
		}
		return ok, err
	})
	return err
}

// Heartbeat sets the claim to run out at now + extend and sets
// ClaimExpiresAt. It does not add extend to what is left: an extend
// shorter than that shortens the claim.
// Queue.Work heartbeats for its handlers (see WorkOpts.Visibility); a
// handler need not, and the worker's heartbeats leave ClaimExpiresAt as
// it was, so a handler may read it without a race.
func (j *Job) Heartbeat(ctx context.Context, extend time.Duration) error {
	if extend <= 0 {
		name := ""
		if j != nil {
			name = j.Queue
		}
		return opErr("heartbeat", name, fmt.Errorf("%w: extend must be positive", ErrInvalidArgument))
	}
	deadline, _, err := j.extend(ctx, nil, extend)
	if err == nil {
		j.ClaimExpiresAt = &deadline
	}
	return err
}

// extend is Heartbeat without touching the job's fields (the worker runs it
// beside the handler, which owns them), in tx when one is given. It
// returns the token it extended: a heartbeat holds no lock while it waits
// (on SQLite, for the writer slot a transactional handler holds), so a
// settle may spend the claim meanwhile; a claim lost with a token the job
// no longer holds was spent by this process, not taken away.
func (j *Job) extend(ctx context.Context, tx *Tx, extend time.Duration) (time.Time, int64, error) {
	if j == nil || j.q == nil {
		return time.Time{}, 0, opErr("heartbeat", "", errNotClaimed)
	}
	token := j.claimToken()
	if token == 0 {
		return time.Time{}, 0, opErr("heartbeat", j.q.name, errSettled(j.ID))
	}
	var deadline time.Time
	err := run0(j.q.handle, "heartbeat", viaOf(ctx, tx), func(o target) error {
		now := j.q.s.now()
		deadline = now.Add(extend).Truncate(time.Microsecond)
		ok, err := o.heartbeat(ctx, heartbeatReq{claimRef{j.ID, token}, now, deadline})
		if err == nil && !ok {
			err = fmt.Errorf("job %d: %w", j.ID, ErrClaimLost)
		}
		return err
	})
	return deadline, token, err
}

// settled reports whether the job's claim was spent by Ack, Retry, Fail,
// Snooze or Release, or their Tx forms (a handler may settle its own job).
func (j *Job) settled() bool { return j.claimToken() == 0 }

// claimToken is the job's claim token, 0 once settled. It waits for a
// settle in flight (see settle), so a token read is never stale by one.
func (j *Job) claimToken() int64 {
	if j.mu != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
	}
	return j.token
}

// peekToken is claimToken without waiting: ok is false while a settle of
// the job is in flight. Read by a transaction that holds SQLite's writer
// (see runner.holdOthers), which must not wait for a settle that waits
// for that writer.
func (j *Job) peekToken() (token int64, ok bool) {
	if j.mu == nil {
		return j.token, true
	}
	if !j.mu.TryLock() {
		return 0, false
	}
	defer j.mu.Unlock()
	return j.token, true
}

var errNotClaimed = fmt.Errorf("%w: not a claimed job (use a job returned by Claim)", ErrInvalidArgument)

func errSettled(id int64) error {
	return fmt.Errorf("%w: job %d was already settled (Ack, Retry, Fail, Snooze or Release spend its claim)", ErrInvalidArgument, id)
}

// viaOf is tx's target when there is one, else an auto-commit write.
func viaOf(ctx context.Context, tx *Tx) via {
	if tx != nil {
		return tx.via(ctx)
	}
	return autoWrite(ctx)
}

// settle runs one fenced statement for the job's claim, in tx when one is
// given; a statement that matched no row means the claim is gone. spends
// says the statement ends the claim. In tx, a spent claim comes back if tx
// rolls back.
func (j *Job) settle(ctx context.Context, op string, tx *Tx, spends bool, fn func(o target, now time.Time) (bool, error)) (bool, error) {
	if j == nil || j.q == nil {
		return false, opErr(op, "", errNotClaimed)
	}
	// The lock makes settles of the same claim take turns, and makes a
	// claim check wait for a settle in flight; a claim spent meanwhile is
	// refused below.
	if j.mu != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
	}
	if j.token == 0 {
		return false, opErr(op, j.q.name, errSettled(j.ID))
	}
	token := j.token
	ok, err := run(j.q.handle, op, viaOf(ctx, tx), func(o target) (bool, error) {
		ok, err := fn(o, j.q.s.now())
		if err == nil && !ok {
			err = fmt.Errorf("job %d: %w", j.ID, ErrClaimLost)
		}
		if err == nil && spends {
			j.token = 0 // settled: the claim is spent
		}
		return ok, err
	})
	if err == nil && spends && tx != nil {
		tx.onRollback(func() { j.restoreClaim(token) })
	}
	return ok, err
}

// restoreClaim gives the job its claim back after the transaction that
// settled it rolled back.
func (j *Job) restoreClaim(token int64) {
	if j.mu != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
	}
	if j.token == 0 {
		j.token = token
	}
}

// AckMany acks many claimed jobs in one statement and returns how many
// were still held by their claims; the others changed nothing. Entries that
// hold no claim of this queue (nil, already settled, another queue's, or a
// job read by Job or Jobs) are skipped and not counted: one bad entry never
// sinks the batch. A
// batch with no such entry (nil or empty too) acks nothing and does no I/O.
// On PostgreSQL a batch some of whose claims were not held, or of a queue
// keeping completed jobs, takes a second statement, which commits on its
// own: on an error it still counts the jobs the first one acked. On SQLite
// a batch is acked all or none.
func (q *Queue) AckMany(ctx context.Context, jobs []*Job) (int64, error) {
	ids, err := q.ackMany(ctx, jobs)
	return int64(len(ids)), err
}

// ackMany is AckMany returning the ids it acked.
func (q *Queue) ackMany(ctx context.Context, jobs []*Job) ([]int64, error) {
	return q.ackGrowing(ctx, jobs, nil, nil)
}

// ackGrowing is ackMany for a worker's ack loop: where writes take turns
// on one writer (SQLite), once the ack holds the writer it also acks the
// jobs more returns (those that finished while it waited there, behind a
// claim), instead of leaving them to an ack of their own. more is nil, or
// is not called, elsewhere.
//
// On an error it returns the ids acked before it: on PostgreSQL a batch's
// second statement (CompleteJobs) commits on its own, after the first's
// acks did. run returns nil with an error, so they are kept outside it.
//
// With locked not nil, where rows have locks (PostgreSQL) the claims whose
// rows another transaction holds are not waited for: they are left
// unsettled and put in *locked (a worker's ack loop leaves them to be
// acked apart; see heldAcks).
func (q *Queue) ackGrowing(ctx context.Context, jobs []*Job, more func() []*Job, locked *[]claimRef) ([]int64, error) {
	var acked []int64
	_, err := run(q.handle, "ack many", autoWrite(ctx), func(o target) ([]int64, error) {
		refs := q.claimRefs(make([]claimRef, 0, len(jobs)), jobs)
		var err error
		if g, ok := o.ops.(growingAcker); ok && more != nil {
			acked, err = g.ackGrowing(ctx, q.name, refs, q.s.now, func(refs []claimRef) []claimRef {
				return q.claimRefs(refs, more())
			})
			return acked, err
		}
		if len(refs) == 0 {
			return nil, nil
		}
		if s, ok := o.ops.(lockSkipper); ok && locked != nil {
			acked, *locked, err = s.ackSkipping(ctx, q.name, refs, q.s.now())
			return acked, err
		}
		acked, err = o.ackMany(ctx, q.name, refs, q.s.now())
		return acked, err
	})
	return acked, err
}

// lockSkipper is the ops of an engine whose rows have locks that a
// transaction holds until it ends (PostgreSQL): ackSkipping is ackMany
// leaving the claims whose rows another transaction holds, which it
// returns (locked); ackLocked acks such claims by a statement that waits
// for their locks; reserveLockWait takes room for a statement that waits
// for such a lock, or fails with errNoLockWait.
type lockSkipper interface {
	ackSkipping(ctx context.Context, queue string, claims []claimRef, now time.Time) (acked []int64, locked []claimRef, err error)
	ackLocked(ctx context.Context, claims []claimRef, now time.Time) ([]int64, error)
	reserveLockWait() (release func(), err error)
}

// growingAcker is the ops of an engine whose writes take turns on one
// writer (SQLite): ackGrowing is ackMany that, once it holds the writer,
// reads the time and adds the claims more appends.
type growingAcker interface {
	ackGrowing(ctx context.Context, queue string, claims []claimRef, clock func() time.Time,
		more func([]claimRef) []claimRef) ([]int64, error)
}

// claimRefs appends the claims of jobs to refs: those that hold a claim of
// this queue (nil entries, settled jobs, other queues' and jobs read rather
// than claimed are skipped: a running job read by Job or Jobs carries its
// row's claim token, but holds no claim, as its own Ack says).
func (q *Queue) claimRefs(refs []claimRef, jobs []*Job) []claimRef {
	for _, j := range jobs {
		if j == nil || j.q == nil || j.Queue != q.name {
			continue
		}
		if token := j.claimToken(); token != 0 {
			refs = append(refs, claimRef{id: j.ID, token: token})
		}
	}
	return refs
}

type claimRef struct{ id, token int64 }

// cmpToken orders claims by their token.
func (c claimRef) cmpToken(d claimRef) int { return cmp.Compare(c.token, d.token) }

// appendClaims appends claims as the JSON object both engines' batch acks
// read: a member "id": claim_token a claim, in order. A job claimed twice
// has two members of one name; each dialect's AckJobs says how it reads
// them.
func appendClaims(b []byte, claims []claimRef) []byte {
	b = append(b, '{')
	for i, c := range claims {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, c.id, 10)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, c.token, 10)
	}
	return append(b, '}')
}
