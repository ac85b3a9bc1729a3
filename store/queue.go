package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// Queue is a handle on a queue of at-least-once jobs. Creating one does no
// I/O; a bad name is reported by every operation on the handle.
type Queue struct {
	handle
}

// Queue returns the handle for the queue called name. Names with the
// reserved prefix are refused (the outbox's backing queues use it).
func (s *Store) Queue(name string) *Queue {
	return &Queue{newHandle(s, name)}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// JobState is where a job is in its life.
type JobState string

// A job is pending or running until it reaches one of the final states:
// completed, cancelled, expired or dead. FinishedAt says when. A final job
// stays as long as its queue's QueueConfig says, except that an acked job
// of a queue keeping no completed jobs (the default) is deleted at once.
const (
	JobPending   JobState = "pending"   // waiting for its run time or a worker
	JobRunning   JobState = "running"   // claimed; its claim expires at ClaimExpiresAt
	JobCompleted JobState = "completed" // acked, in a queue that keeps completed jobs
	JobCancelled JobState = "cancelled" // cancelled (Queue.Cancel)
	JobExpired   JobState = "expired"   // not run before its ExpiresAt
	JobDead      JobState = "dead"      // failed for good: out of attempts, or Fail; see Errors
)

// final reports whether s is one of the final states.
func (s JobState) final() bool {
	switch s {
	case JobCompleted, JobCancelled, JobExpired, JobDead:
		return true
	}
	return false
}

// MaxAttemptErrors is how many attempt errors a job keeps (Job.Errors):
// the newest ones. A bound keeps a job's row small however long it keeps
// failing (each error is cut to 8 KiB: at most 160 KiB), and each retry
// rewrites the row, errors included. Twenty covers most of a job's
// attempts at DefaultMaxAttempts, and the first attempts of a job that
// failed 25 times rarely say more than the last ones.
const MaxAttemptErrors = 20

// AttemptError is the error one attempt of a job ended with: Retry's or
// Fail's cause, or the note that a claim lapsed on its last attempt.
type AttemptError struct {
	Attempt int // the attempt it ended (Job.Attempts at the time)
	At      time.Time
	Error   string
}

// DefaultMaxAttempts is the number of claims a job gets unless
// EnqueueOpts.MaxAttempts says otherwise.
const DefaultMaxAttempts = 25

// Job is one job. A job returned by Claim carries its claim: Ack, Retry,
// Fail and Heartbeat act on it and fail with ErrClaimLost once the claim
// expired or another worker reclaimed the job. A job past its ExpiresAt is
// never handed out again (see EnqueueOpts.ExpiresAt).
type Job struct {
	ID             int64
	Queue          string
	Payload        []byte // as enqueued: nil stays nil, empty stays empty (non-nil)
	Priority       int
	State          JobState
	Attempts       int // claims so far, this one included
	MaxAttempts    int
	CreatedAt      time.Time
	RunAt          time.Time
	ClaimedAt      *time.Time // nil before the first claim; set by every claim
	ClaimExpiresAt *time.Time
	ExpiresAt      *time.Time
	Worker         string
	LastError      string
	Errors         []AttemptError // the last MaxAttemptErrors attempts' errors, oldest first
	FinishedAt     *time.Time     // when it reached its final state

	q     *Queue
	token int64 // the claim that fences this job; 0 when not claimed
}

// EnqueueOpts are a job's options. The zero value runs the job now, at
// priority 0, with DefaultMaxAttempts, never expiring.
type EnqueueOpts struct {
	Priority    int           // higher runs first
	RunAt       time.Time     // when it becomes claimable; zero: now (+ Delay)
	Delay       time.Duration // used when RunAt is zero
	MaxAttempts int           // 0: DefaultMaxAttempts
	// ExpiresAt: zero never expires. From ExpiresAt on the job is never
	// handed out, whatever its state: a pending job is not claimed and a
	// job whose claim lapsed is not reclaimed; both end expired at the
	// next Claim, SweepExpired or janitor pass. A claim taken
	// before ExpiresAt still holds: its worker may settle the job.
	ExpiresAt time.Time
}

// NewJob is one job for EnqueueMany.
type NewJob struct {
	Payload []byte
	Opts    EnqueueOpts
}

// newJob is a validated job with its times resolved from the store's clock.
type newJob struct {
	payload     []byte
	priority    int32
	maxAttempts int32
	runAt       time.Time
	expiresAt   *time.Time
}

func resolveJob(now time.Time, payload []byte, o EnqueueOpts) (newJob, error) {
	j := newJob{payload: payload, maxAttempts: DefaultMaxAttempts, runAt: now.Add(o.Delay)}
	switch {
	case o.MaxAttempts < 0:
		return j, fmt.Errorf("%w: MaxAttempts %d < 0", ErrInvalidArgument, o.MaxAttempts)
	case o.Delay < 0:
		return j, fmt.Errorf("%w: negative Delay %s", ErrInvalidArgument, o.Delay)
	case !o.RunAt.IsZero() && o.Delay != 0:
		return j, fmt.Errorf("%w: set RunAt or Delay, not both", ErrInvalidArgument)
	case o.Priority > 1<<30 || o.Priority < -(1<<30):
		return j, fmt.Errorf("%w: Priority %d out of range", ErrInvalidArgument, o.Priority)
	case o.MaxAttempts > 1<<30:
		return j, fmt.Errorf("%w: MaxAttempts %d out of range", ErrInvalidArgument, o.MaxAttempts)
	}
	j.priority = int32(o.Priority)
	if o.MaxAttempts > 0 {
		j.maxAttempts = int32(o.MaxAttempts)
	}
	if !o.RunAt.IsZero() {
		j.runAt = o.RunAt.Truncate(time.Microsecond)
	}
	if !o.ExpiresAt.IsZero() {
		e := o.ExpiresAt.Truncate(time.Microsecond)
		j.expiresAt = &e
	}
	return j, nil
}

// Enqueue adds a job and returns its id.
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts EnqueueOpts) (int64, error) {
	return q.enqueue(ctx, autoWrite(ctx), payload, opts)
}

// EnqueueTx adds a job inside tx: it exists only if tx commits.
func (q *Queue) EnqueueTx(ctx context.Context, tx Tx, payload []byte, opts EnqueueOpts) (int64, error) {
	return q.enqueue(ctx, tx.via(), payload, opts)
}

func (q *Queue) enqueue(ctx context.Context, v via, payload []byte, opts EnqueueOpts) (int64, error) {
	return run(q.handle, "enqueue", v, func(o target) (int64, error) {
		if err := q.s.checkPayload("payload", payload); err != nil {
			return 0, err
		}
		now := q.s.now()
		j, err := resolveJob(now, payload, opts)
		if err != nil {
			return 0, err
		}
		id, err := o.enqueue(ctx, q.name, now, j)
		if err == nil {
			o.afterCommit(q.wake)
		}
		return id, err
	})
}

// EnqueueMany adds jobs in one statement on PostgreSQL (one transaction on
// SQLite) and returns their ids in order. All or none are stored.
func (q *Queue) EnqueueMany(ctx context.Context, jobs []NewJob) ([]int64, error) {
	return q.enqueueMany(ctx, autoWrite(ctx), jobs)
}

// EnqueueManyTx is EnqueueMany inside tx.
func (q *Queue) EnqueueManyTx(ctx context.Context, tx Tx, jobs []NewJob) ([]int64, error) {
	return q.enqueueMany(ctx, tx.via(), jobs)
}

func (q *Queue) enqueueMany(ctx context.Context, v via, jobs []NewJob) ([]int64, error) {
	return run(q.handle, "enqueue many", v, func(o target) ([]int64, error) {
		now := q.s.now()
		resolved := make([]newJob, len(jobs))
		for i, nj := range jobs {
			if err := q.s.checkPayload(fmt.Sprintf("job %d's payload", i), nj.Payload); err != nil {
				return nil, err
			}
			j, err := resolveJob(now, nj.Payload, nj.Opts)
			if err != nil {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
			resolved[i] = j
		}
		if len(jobs) == 0 {
			return []int64{}, nil
		}
		ids, err := o.enqueueMany(ctx, q.name, now, resolved)
		if err == nil {
			o.afterCommit(q.wake)
		}
		return ids, err
	})
}

func (q *Queue) wake() { q.s.wake(queueTopic(q.name))() }

// Claim takes up to n claimable jobs for worker: ready jobs in priority
// (highest first), run_at, id order, and jobs whose previous claim expired.
// Each claim increments Attempts and holds the job for visibility; after
// that the job is claimable again. A job whose claim expired on its last
// allowed attempt ends dead instead, and one past its ExpiresAt expired.
// Claim has no transactional form on purpose: a claim's lease must not
// depend on a business transaction.
func (q *Queue) Claim(ctx context.Context, worker string, n int, visibility time.Duration) ([]*Job, error) {
	return run(q.handle, "claim", autoWrite(ctx), func(o target) ([]*Job, error) {
		if err := validateLocalName("worker", worker); err != nil {
			return nil, err
		}
		if visibility <= 0 {
			return nil, fmt.Errorf("%w: visibility must be positive", ErrInvalidArgument)
		}
		if n <= 0 {
			return []*Job{}, nil
		}
		now := q.s.now()
		token, err := newClaimToken()
		if err != nil {
			return nil, err
		}
		jobs, err := o.claim(ctx, claimReq{queue: q.name, worker: worker, n: min(n, 1<<20),
			now: now, expiresAt: now.Add(visibility).Truncate(time.Microsecond), token: token})
		if err != nil {
			return nil, err
		}
		// RETURNING promises no order; hand jobs out in claim order.
		slices.SortFunc(jobs, func(a, b *Job) int {
			switch {
			case a.Priority != b.Priority:
				return b.Priority - a.Priority
			case !a.RunAt.Equal(b.RunAt):
				return a.RunAt.Compare(b.RunAt)
			}
			return int(a.ID - b.ID)
		})
		for _, j := range jobs {
			j.q = q
		}
		return jobs, nil
	})
}

type claimReq struct {
	queue, worker  string
	n              int
	now, expiresAt time.Time
	token          int64
}

// newClaimToken draws the random token that fences one Claim's jobs.
func newClaimToken() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1), nil // positive
}

// Ack completes the job: it is deleted, or kept as completed when its queue
// keeps completed jobs (QueueConfig.CompletedRetention).
func (j *Job) Ack(ctx context.Context) error {
	_, err := j.settle(ctx, "ack", func(o target, now time.Time) (bool, error) {
		ok, err := o.ack(ctx, j.ID, j.token, now)
		if err != nil || ok {
			return ok, err
		}
		return o.complete(ctx, j.ID, j.token, now)
	})
	return err
}

// Retry puts the job back to run again after delay, recording cause as its
// LastError and in its Errors (invalid UTF-8 and NUL bytes replaced by
// U+FFFD, cut to 8 KiB). It
// returns false when the job had no attempts left: then it is dead, with
// cause as its last error.
func (j *Job) Retry(ctx context.Context, delay time.Duration, cause string) (bool, error) {
	cause = cleanCause(cause)
	if delay < 0 {
		delay = 0
	}
	retried := false
	_, err := j.settle(ctx, "retry", func(o target, now time.Time) (bool, error) {
		ok, err := o.retry(ctx, j.ID, j.token, now, now.Add(delay).Truncate(time.Microsecond), cause)
		if err != nil || ok {
			retried = ok
			if ok {
				o.afterCommit(j.q.wake) // idle workers recompute when it is due
			}
			return ok, err
		}
		return o.bury(ctx, j.ID, j.token, now, cause, true)
	})
	return retried, err
}

// Fail ends the job dead with cause (recorded like Retry's), whatever
// attempts remain.
func (j *Job) Fail(ctx context.Context, cause string) error {
	cause = cleanCause(cause)
	_, err := j.settle(ctx, "fail", func(o target, now time.Time) (bool, error) {
		return o.bury(ctx, j.ID, j.token, now, cause, false)
	})
	return err
}

// Heartbeat extends the claim to now + extend.
func (j *Job) Heartbeat(ctx context.Context, extend time.Duration) error {
	if extend <= 0 {
		return opErr("heartbeat", j.Queue, fmt.Errorf("%w: extend must be positive", ErrInvalidArgument))
	}
	var deadline time.Time
	_, err := j.settle(ctx, "heartbeat", func(o target, now time.Time) (bool, error) {
		deadline = now.Add(extend).Truncate(time.Microsecond)
		return o.heartbeat(ctx, j.ID, j.token, now, deadline)
	})
	if err == nil {
		j.ClaimExpiresAt = &deadline
	}
	return err
}

// release gives the job back to its queue without spending its attempt.
func (j *Job) release(ctx context.Context) error {
	_, err := j.settle(ctx, "release", func(o target, now time.Time) (bool, error) {
		ok, err := o.release(ctx, j.ID, j.token, now)
		if ok {
			o.afterCommit(j.q.wake)
		}
		return ok, err
	})
	return err
}

// settled reports whether the job's claim was spent by Ack, Retry, Fail or
// release (a handler may settle its own job).
func (j *Job) settled() bool { return j.token == 0 }

// settle runs one fenced statement for the job's claim; a statement that
// matched no row means the claim is gone.
func (j *Job) settle(ctx context.Context, op string, fn func(o target, now time.Time) (bool, error)) (bool, error) {
	switch {
	case j == nil || j.q == nil:
		return false, opErr(op, "", fmt.Errorf("%w: not a claimed job (use a job returned by Claim)", ErrInvalidArgument))
	case j.token == 0:
		return false, opErr(op, j.q.name, fmt.Errorf("%w: job %d was already settled (Ack, Retry or Fail spend its claim)", ErrInvalidArgument, j.ID))
	}
	return run(j.q.handle, op, autoWrite(ctx), func(o target) (bool, error) {
		ok, err := fn(o, j.q.s.now())
		if err == nil && !ok {
			err = fmt.Errorf("job %d: %w", j.ID, ErrClaimLost)
		}
		if err == nil && op != "heartbeat" {
			j.token = 0 // settled: the claim is spent
		}
		return ok, err
	})
}

// AckMany acks many claimed jobs in one statement and returns how many
// were still held by their claims; the others changed nothing. Entries that
// hold no claim of this queue (nil, already settled, or another queue's)
// are skipped and not counted: one bad entry never sinks the batch.
func (q *Queue) AckMany(ctx context.Context, jobs []*Job) (int64, error) {
	return run(q.handle, "ack many", autoWrite(ctx), func(o target) (int64, error) {
		refs := make([]claimRef, 0, len(jobs))
		for _, j := range jobs {
			if j == nil || j.settled() || j.Queue != q.name {
				continue
			}
			refs = append(refs, claimRef{id: j.ID, token: j.token})
		}
		if len(refs) == 0 {
			return 0, nil
		}
		now := q.s.now()
		n, err := o.ackMany(ctx, refs, now)
		if err != nil || n == int64(len(refs)) {
			return n, err
		}
		kept, err := o.completeMany(ctx, refs, now) // the queue keeps completed jobs
		return n + kept, err
	})
}

type claimRef struct{ id, token int64 }

// Job returns a job of this queue, live or finished, or ErrNotFound.
func (q *Queue) Job(ctx context.Context, id int64) (*Job, error) {
	return q.getJob(ctx, autoRead, id)
}

// JobTx is Job inside tx; it sees jobs tx enqueued.
func (q *Queue) JobTx(ctx context.Context, tx Tx, id int64) (*Job, error) {
	return q.getJob(ctx, tx.via(), id)
}

func (q *Queue) getJob(ctx context.Context, v via, id int64) (*Job, error) {
	return run(q.handle, "job", v, func(o target) (*Job, error) {
		return o.getJob(ctx, q.name, id)
	})
}

// SweepExpired ends the jobs past their ExpiresAt as expired: pending ones
// and running ones whose claim lapsed (a live claim may still settle its
// job). It returns how many it ended.
func (q *Queue) SweepExpired(ctx context.Context) (int64, error) {
	return run(q.handle, "sweep expired", autoWrite(ctx), func(o target) (int64, error) {
		return o.sweepExpired(ctx, q.name, q.s.now())
	})
}

// Cancel moves a pending or running job to dead ("cancelled"); a running
// job's worker then loses its claim. ErrNotFound when no such live job.
func (q *Queue) Cancel(ctx context.Context, id int64) error {
	return run0(q.handle, "cancel", autoWrite(ctx), func(o target) error {
		ok, err := o.cancel(ctx, q.name, id, q.s.now())
		if err == nil && !ok {
			err = fmt.Errorf("live job %d: %w", id, ErrNotFound)
		}
		return err
	})
}

// Requeue moves a dead, cancelled or expired job back to pending, due now,
// with its attempts reset; its Errors stay. An ExpiresAt already past is
// dropped (the job would expire again at once). ErrNotFound when no such
// job in one of those states.
func (q *Queue) Requeue(ctx context.Context, id int64) error {
	return run0(q.handle, "requeue", autoWrite(ctx), func(o target) error {
		ok, err := o.requeue(ctx, q.name, id, q.s.now())
		if err == nil && !ok {
			err = fmt.Errorf("dead, cancelled or expired job %d: %w", id, ErrNotFound)
		} else if ok {
			o.afterCommit(q.wake)
		}
		return err
	})
}

// QueueStats counts a queue's jobs by state.
type QueueStats struct {
	Ready       int64         // pending and due
	Scheduled   int64         // pending, due later
	Running     int64         // claimed
	Dead        int64         // failed for good (state dead; completed, cancelled and expired jobs are not counted)
	OldestReady time.Duration // how long the oldest ready job has waited; 0 when none
}

// Stats counts the queue's jobs by state.
func (q *Queue) Stats(ctx context.Context) (QueueStats, error) {
	return run(q.handle, "stats", autoRead, func(o target) (QueueStats, error) {
		return o.queueStats(ctx, q.name, q.s.now())
	})
}

// dueTime reads NextJobDue's answer: unix microseconds, 0 for none.
func dueTime(us int64, err error) (*time.Time, error) {
	if err != nil || us == 0 {
		return nil, err
	}
	t := time.UnixMicro(us)
	return &t, nil
}

// nextDue is the earliest time a job of the queue becomes claimable; nil
// when no job is pending or running.
func (q *Queue) nextDue(ctx context.Context) (*time.Time, error) {
	return run(q.handle, "next due", autoRead, func(o target) (*time.Time, error) {
		return o.nextDue(ctx, q.name)
	})
}
