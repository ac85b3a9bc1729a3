package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"
)

// Queue is a handle on a queue of at-least-once jobs. Creating one does no
// I/O; a bad name is reported by every operation on the handle.
type Queue struct {
	handle
	// topic (queueTopic(name)) and wakeFn (wake) are built once, not per
	// enqueue: each cost every enqueue an allocation.
	topic  string
	wakeFn func()
}

func newQueue(h handle) *Queue {
	q := &Queue{handle: h, topic: queueTopic(h.name)}
	q.wakeFn = q.wake
	return q
}

// Queue returns the handle for the queue called name. Names with the
// reserved prefix are refused (the outbox's backing queues use it).
func (s *Store) Queue(name string) *Queue {
	return newQueue(newHandle(s, name))
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Store returns the store the queue belongs to (for helpers such as
// alktest that are handed a queue).
func (q *Queue) Store() *Store {
	if q == nil {
		return nil
	}
	return q.s
}

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
	JobCancelled JobState = "cancelled" // cancelled by Queue.Cancel; never runs again
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
	LastError      string            // the last attempt's error; "expired" or "cancelled" when it ended so
	Errors         []AttemptError    // the last MaxAttemptErrors attempts' errors, oldest first
	FinishedAt     *time.Time        // when it reached its final state
	Headers        map[string]string // as enqueued (EnqueueOpts.Headers); nil when none

	q     *Queue
	mu    *sync.Mutex // set by Claim: serializes the claim's statements (the worker's heartbeat runs beside the handler)
	token int64       // the claim that fences this job; 0 when not claimed

	// What the last settle did (under mu): the state it left the job in,
	// when it goes back to pending, when it runs again, and which settle
	// it was, as an Outcome (JobResult's State, RunAt and SettledAs).
	after JobState
	next  time.Time
	as    Outcome
	// The lifecycle's run of the job (under mu): inRun while it runs and
	// is not yet settled; result and then results are OnResult's
	// functions (the first in a field of its own: most runs have one).
	inRun   bool
	result  func(JobResult)
	results []func(JobResult)
	// wakeLatency: see WakeLatency; 0 when the claim was not a wake's.
	wakeLatency time.Duration
	// slot: a runningJob allocated with the job by its claim, for its
	// first run (runSlot); nil once taken.
	slot *runningJob
}

// runSlot is a fresh runningJob for a run of j: the one its claim
// allocated with it, the first time, and a new one after that. A run's
// context may outlive the run, so a slot is never used twice, not even by
// a copy of the Job.
func (j *Job) runSlot() *runningJob {
	if rj := j.slot; rj != nil && rj.taken.CompareAndSwap(false, true) {
		j.slot = nil
		return rj
	}
	return new(runningJob)
}

// WakeLatency is how long a job waited for a worker with a free slot to
// notice it. It is set, and ok is true, for a job that Work (WorkTx,
// Outbox.Run, a client) claimed on its first attempt in a claim that a
// wake started (an enqueue's NOTIFY on PostgreSQL, the change watcher on
// SQLite), when the job was enqueued runnable (no delay, no RunAt in the
// future) after the worker's claims had begun to find the queue drained
// (each returned fewer jobs than the worker had free slots for): such a
// job waited for nothing but its commit and its wake. The latency is from
// the job's enqueue (CreatedAt, read before its insert) to the return of
// that claim: the enqueue's commit, the wake's way to the worker, and the
// claim. For any other job (a backlog, a delayed or retried job, one that
// waited for a free slot, a claim the poll or a timer started, Claim by
// hand) ok is false. CreatedAt is the enqueuing store's clock: across
// machines their clocks' skew adds in.
func (j *Job) WakeLatency() (d time.Duration, ok bool) {
	if j == nil || j.wakeLatency <= 0 {
		return 0, false
	}
	return j.wakeLatency, true
}

// The bounds of EnqueueOpts.Priority and MaxAttempts (and of a
// ScheduleSpec's), which both engines store in 32-bit columns.
const (
	minPriority    = -(1 << 30)
	maxPriority    = 1 << 30
	maxMaxAttempts = 1 << 30
)

// EnqueueOpts are a job's options. The zero value runs the job now, at
// priority 0, with DefaultMaxAttempts, never expiring.
type EnqueueOpts struct {
	// Priority: higher runs first; equal priorities by RunAt, then id.
	// From -2^30 to 2^30 (-1073741824 to 1073741824), on both engines; a
	// value outside is refused at enqueue with ErrInvalidArgument.
	Priority int
	// RunAt is when it becomes claimable; zero: now (+ Delay). RunAt and
	// ExpiresAt lie in years 1 to 9999 (UTC), or are refused with
	// ErrInvalidArgument.
	RunAt time.Time
	Delay time.Duration // used when RunAt is zero
	// MaxAttempts: 0 is DefaultMaxAttempts; at most 2^30, as Priority.
	MaxAttempts int
	// ExpiresAt: zero never expires. From ExpiresAt on the job is never
	// handed out, whatever its state: a pending job is not claimed, and
	// ends expired at the next SweepExpired or janitor pass, or when a
	// Work finds it due with nothing to claim; a job whose claim lapsed is
	// not reclaimed, and ends expired at the next Claim, SweepExpired or
	// janitor pass. A claim taken before ExpiresAt still holds: its
	// worker may settle the job.
	ExpiresAt time.Time
	// Unique, with a Key, makes the job unique: enqueueing it while a job of
	// the queue holds the key adds nothing and returns the holder's id (see
	// UniqueOpts; EnqueueUnique also says whether it was a duplicate).
	Unique UniqueOpts
	// Headers ride with the job and come back on Claim, Job and Jobs
	// (Job.Headers): trace context, a tenant, a correlation id. At most
	// MaxHeadersSize bytes of keys and values; nil or empty stores none.
	Headers map[string]string
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
	// uniqueKey is the key's digest (nil: not unique) and uniqueStates the
	// states it holds in, as ",pending,running,".
	uniqueKey    []byte
	uniqueStates string
	headers      []byte // the stored form: a JSON object, nil for none
}

// alike reports whether two jobs differ at most in their payloads, so a
// batch of them goes in with EnqueueJobsAlike (the other columns bound
// once). Unique jobs never reach it.
func (j newJob) alike(k newJob) bool {
	return j.priority == k.priority && j.maxAttempts == k.maxAttempts && j.runAt.Equal(k.runAt) &&
		(j.expiresAt == nil) == (k.expiresAt == nil) && (j.expiresAt == nil || j.expiresAt.Equal(*k.expiresAt)) &&
		(j.headers == nil) == (k.headers == nil) && bytes.Equal(j.headers, k.headers)
}

// alikeRun returns how many jobs from the first on are alike to it, stopping
// before the payloads pass limit bytes (with a JSONB header of up to 9
// bytes each, on SQLite) unless it is the first job.
func alikeRun(jobs []newJob, limit int) int {
	size := len(jobs[0].payload) + 9
	n := 1
	for n < len(jobs) && jobs[n].alike(jobs[0]) {
		if size += len(jobs[n].payload) + 9; size > limit {
			break
		}
		n++
	}
	return n
}

// inTimeRange says whether t (zero: unset) is a time both engines store as
// given: SQLite keeps microseconds since 1970 in 64 bits, which wrap a few
// hundred thousand years out (a RunAt meant for the far future became the
// far past, and the job ran at once), and PostgreSQL refuses years past
// 294276. Years 1 to 9999 are what RFC 3339 and encoding/json can write.
func inTimeRange(t time.Time) bool {
	if t.IsZero() {
		return true
	}
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}

func resolveJob(queue string, now time.Time, payload []byte, o EnqueueOpts) (newJob, error) {
	j := newJob{payload: payload, maxAttempts: DefaultMaxAttempts, runAt: now.Add(o.Delay)}
	switch {
	case o.MaxAttempts < 0:
		return j, fmt.Errorf("%w: MaxAttempts %d < 0", ErrInvalidArgument, o.MaxAttempts)
	case o.Delay < 0:
		return j, fmt.Errorf("%w: negative Delay %s", ErrInvalidArgument, o.Delay)
	case !o.RunAt.IsZero() && o.Delay != 0:
		return j, fmt.Errorf("%w: set RunAt or Delay, not both", ErrInvalidArgument)
	case o.Priority > maxPriority || o.Priority < minPriority:
		return j, fmt.Errorf("%w: Priority %d out of range (%d to %d)", ErrInvalidArgument, o.Priority, minPriority, maxPriority)
	case o.MaxAttempts > maxMaxAttempts:
		return j, fmt.Errorf("%w: MaxAttempts %d out of range (at most %d)", ErrInvalidArgument, o.MaxAttempts, maxMaxAttempts)
	case !inTimeRange(o.RunAt):
		return j, fmt.Errorf("%w: RunAt %s out of range (years 1 to 9999)", ErrInvalidArgument, o.RunAt)
	case !inTimeRange(o.ExpiresAt):
		return j, fmt.Errorf("%w: ExpiresAt %s out of range (years 1 to 9999)", ErrInvalidArgument, o.ExpiresAt)
	}
	var err error
	if j.headers, err = checkHeaders(o.Headers); err != nil {
		return j, err
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
	if o.Unique.Key != "" || o.Unique.ByPeriod != 0 || o.Unique.ByState != nil {
		if j.uniqueKey, j.uniqueStates, err = uniqueColumns(queue, now, o.Unique); err != nil {
			return j, err
		}
	}
	return j, nil
}

// Enqueue adds a job and returns its id. A unique job (opts.Unique) whose
// key is held adds nothing and returns the holder's id. A job an
// application's trigger skipped fails with ErrNotStored (a unique one after
// its 8 tries, see ErrNotStored).
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts EnqueueOpts) (int64, error) {
	return q.enqueue(ctx, autoWrite(ctx), payload, opts)
}

// EnqueueTx adds a job inside tx: it exists only if tx commits.
func (q *Queue) EnqueueTx(ctx context.Context, tx Tx, payload []byte, opts EnqueueOpts) (int64, error) {
	return q.enqueue(ctx, tx.via(ctx), payload, opts)
}

func (q *Queue) enqueue(ctx context.Context, v via, payload []byte, opts EnqueueOpts) (int64, error) {
	if opts.Unique.Key != "" {
		r, err := q.enqueueMany(ctx, v, "enqueue", false, []NewJob{{Payload: payload, Opts: opts}})
		if err != nil {
			return 0, err
		}
		return r.results()[0].ID, nil
	}
	return run(q.handle, "enqueue", v, func(o target) (int64, error) {
		if q.s.insert == nil {
			return q.enqueueOne(ctx, o, payload, opts)
		}
		// The middleware's copy of opts: captured by the func it may keep,
		// opts itself would be moved to the heap on every call, with or
		// without middleware (an allocation an Enqueue).
		mine := opts
		in := &Insert{Kind: InsertEnqueue, Name: q.name, Tx: !o.auto,
			Messages: []InsertMessage{{Payload: payload, Headers: mine.Headers}}}
		err := q.s.intercept(ctx, in, func(ctx context.Context, in *Insert) error {
			m := &in.Messages[0]
			mine.Headers = m.Headers
			var err error
			m.ID, err = q.enqueueOne(ctx, o, m.Payload, mine)
			return err
		})
		return in.Messages[0].ID, err
	})
}

func (q *Queue) enqueueOne(ctx context.Context, o target, payload []byte, opts EnqueueOpts) (int64, error) {
	if err := q.s.checkPayload("payload", payload); err != nil {
		return 0, err
	}
	now := q.s.now()
	j, err := resolveJob(q.name, now, payload, opts)
	if err != nil {
		return 0, err
	}
	if err := q.register(ctx, o, now); err != nil {
		return 0, err
	}
	id, err := o.enqueue(ctx, q.name, q.topic, now, j)
	if err == nil {
		o.afterCommit(q.wakeFn)
	}
	return id, err
}

// EnqueueMany adds jobs in one statement on PostgreSQL (one transaction on
// SQLite) and returns their ids in order. All or none are stored: when an
// application's trigger skips a job (a BEFORE INSERT trigger returning NULL,
// SQLite's RAISE(IGNORE)), the call fails with ErrNotStored and stores
// none. A unique job
// whose key is held adds nothing and gets the holder's id (a batch with
// unique jobs may take a second statement to read the holders, in one
// transaction). An empty batch (nil or no jobs) stores nothing, does no
// I/O and returns an empty slice; insert middleware does not see it.
func (q *Queue) EnqueueMany(ctx context.Context, jobs []NewJob) ([]int64, error) {
	return enqueuedIDs(q.enqueueMany(ctx, autoWrite(ctx), "enqueue many", true, jobs))
}

// EnqueueManyTx is EnqueueMany inside tx, all or none there too: a batch
// that fails leaves none of its jobs in tx. Where a batch can fail half way
// (on SQLite every batch of more than one job, on PostgreSQL a batch with
// unique jobs: several statements) it runs after a savepoint and rolls back
// to it, and tx goes on. PostgreSQL's other batches are one statement, which
// fails whole and, like any failed statement, aborts tx: only Rollback is
// left. A batch whose ctx ends while one of its statements runs ends tx on
// both engines (SQLite rolls back the whole transaction of an interrupted
// write; pgx closes the connection); the error matches ctx's error and
// ErrTxDone. A ctx that ends before a statement is sent, or between two of
// a SQLite batch's statements, fails the batch without ending tx: nothing
// of the batch is in tx, and the error matches ctx's error, not
// ErrTxDone. Portable code rolls tx back after an error.
func (q *Queue) EnqueueManyTx(ctx context.Context, tx Tx, jobs []NewJob) ([]int64, error) {
	return enqueuedIDs(q.enqueueMany(ctx, tx.via(ctx), "enqueue many", true, jobs))
}

// enqueued is enqueueMany's result: ids when no job was unique, placed
// otherwise.
type enqueued struct {
	ids    []int64
	placed []Enqueued
}

func enqueuedIDs(r enqueued, err error) ([]int64, error) {
	if err != nil || r.placed == nil {
		return r.ids, err
	}
	ids := make([]int64, len(r.placed))
	for i, p := range r.placed {
		ids[i] = p.ID
	}
	return ids, nil
}

func (r enqueued) results() []Enqueued {
	if r.placed != nil {
		return r.placed
	}
	placed := make([]Enqueued, len(r.ids))
	for i, id := range r.ids {
		placed[i].ID = id
	}
	return placed
}

// enqueueMany adds jobs for the operation op; batch says the caller gave a
// batch, so errors name the job by its index.
func (q *Queue) enqueueMany(ctx context.Context, v via, op string, batch bool, jobs []NewJob) (enqueued, error) {
	return run(q.handle, op, v, func(o target) (enqueued, error) {
		if len(jobs) == 0 {
			return enqueued{ids: []int64{}}, nil // nothing to write, nothing to intercept
		}
		if q.s.insert == nil {
			return q.enqueueBatch(ctx, o, batch, jobs)
		}
		in := &Insert{Kind: InsertEnqueue, Name: q.name, Batch: batch, Tx: !o.auto,
			Messages: make([]InsertMessage, len(jobs)), jobs: jobs}
		for i, nj := range jobs {
			in.Messages[i] = InsertMessage{Payload: nj.Payload, Headers: nj.Opts.Headers}
		}
		var r enqueued
		err := q.s.intercept(ctx, in, func(ctx context.Context, in *Insert) error {
			mine := slices.Clone(jobs)
			for i, m := range in.Messages {
				mine[i].Payload, mine[i].Opts.Headers = m.Payload, m.Headers
			}
			var err error
			if r, err = q.enqueueBatch(ctx, o, batch, mine); err != nil {
				return err
			}
			for i, p := range r.results() {
				in.Messages[i].ID = p.ID
			}
			return nil
		})
		return r, err
	})
}

func (q *Queue) enqueueBatch(ctx context.Context, o target, batch bool, jobs []NewJob) (enqueued, error) {
	now := q.s.now()
	if batch && sameOpts(jobs) {
		return q.enqueueSameOpts(ctx, o, now, jobs)
	}
	resolved := make([]newJob, len(jobs))
	unique := false
	var size int64
	for i, nj := range jobs {
		var err error
		if batch {
			err = q.s.checkPayloadAt("job", i, nj.Payload)
		} else {
			err = q.s.checkPayload("payload", nj.Payload)
		}
		if err != nil {
			return enqueued{}, err
		}
		j, err := resolveJob(q.name, now, nj.Payload, nj.Opts)
		if err != nil {
			if !batch {
				return enqueued{}, err
			}
			return enqueued{}, fmt.Errorf("job %d: %w", i, err)
		}
		resolved[i] = j
		unique = unique || j.uniqueKey != nil
		size = batchSize(size, len(j.payload), len(j.uniqueKey)+len(j.uniqueStates), len(j.headers))
	}
	if err := checkBatchSize("jobs", len(jobs), size); err != nil {
		return enqueued{}, err
	}
	if err := q.register(ctx, o, now); err != nil {
		return enqueued{}, err
	}
	var r enqueued
	var err error
	if unique {
		r.placed, err = o.enqueueUnique(ctx, q.name, now, resolved)
	} else {
		r.ids, err = o.enqueueMany(ctx, q.name, now, resolved)
	}
	if err == nil {
		o.afterCommit(q.wakeFn)
	}
	return r, err
}

// sameOpts reports whether every job has job 0's options, none of them
// unique: EnqueueMany's usual batch. Such a batch resolves and checks its
// options once (enqueueSameOpts) instead of resolving each job into a
// newJob and comparing the results (about 800 of a 1,000-job PostgreSQL
// batch's 1,470 client instructions a job, issue 18). Options are the same
// when each field is: times by Equal (the instant, as the statements store
// it), headers by content (the same map, or equal maps: the same stored
// JSON); a unique job, or any Unique field set, takes the general path.
func sameOpts(jobs []NewJob) bool {
	o := &jobs[0].Opts
	if o.Unique.Key != "" || o.Unique.ByPeriod != 0 || o.Unique.ByState != nil {
		return false
	}
	for i := 1; i < len(jobs); i++ {
		p := &jobs[i].Opts
		// Identical times (the usual zero RunAt and ExpiresAt) and no
		// headers on either side are told without calling Equal or
		// sameHeaders (about 100 instructions a job of a 1,000-job batch).
		if p.Priority != o.Priority || p.MaxAttempts != o.MaxAttempts || p.Delay != o.Delay ||
			(p.RunAt != o.RunAt && !p.RunAt.Equal(o.RunAt)) ||
			(p.ExpiresAt != o.ExpiresAt && !p.ExpiresAt.Equal(o.ExpiresAt)) ||
			p.Unique.Key != "" || p.Unique.ByPeriod != 0 || p.Unique.ByState != nil ||
			(len(p.Headers)+len(o.Headers) != 0 && !sameHeaders(p.Headers, o.Headers)) {
			return false
		}
	}
	return true
}

// sameHeaders reports whether a and b hold the same headers (nil and empty
// are the same: none).
func sameHeaders(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return true
	}
	return maps.Equal(a, b)
}

// enqueueSameOpts is enqueueBatch for a batch whose jobs all have the same
// options (sameOpts): resolved once, the payloads passed as the caller's
// jobs (no newJob a job). It refuses what the general path refuses, in the
// same order: job 0's payload, job 0's options (every job's), then each
// other job's payload.
func (q *Queue) enqueueSameOpts(ctx context.Context, o target, now time.Time, jobs []NewJob) (enqueued, error) {
	if err := q.s.checkPayloadAt("job", 0, jobs[0].Payload); err != nil {
		return enqueued{}, err
	}
	j, err := resolveJob(q.name, now, nil, jobs[0].Opts)
	if err != nil {
		return enqueued{}, fmt.Errorf("job 0: %w", err)
	}
	// The options, headers among them, are sent once.
	size := int64(len(j.headers)) + int64(len(jobs))*BatchElementOverhead + int64(len(jobs[0].Payload))
	for i := 1; i < len(jobs); i++ {
		size += int64(len(jobs[i].Payload))
		if len(jobs[i].Payload) <= q.s.maxPayload {
			continue // checkPayloadAt's own test, without a call a job
		}
		if err := q.s.checkPayloadAt("job", i, jobs[i].Payload); err != nil {
			return enqueued{}, err
		}
	}
	if err := checkBatchSize("jobs", len(jobs), size); err != nil {
		return enqueued{}, err
	}
	if err := q.register(ctx, o, now); err != nil {
		return enqueued{}, err
	}
	ids, err := o.enqueueAlike(ctx, q.name, now, j, jobs)
	if err != nil {
		return enqueued{}, err
	}
	o.afterCommit(q.wakeFn)
	return enqueued{ids: ids}, nil
}

func (q *Queue) wake() { q.s.wake(q.topic)() }

// register gives the queue a settings row (the defaults) the first time
// this store claims from it or enqueues into it on its own (not in the
// caller's transaction), so that Store.Queues lists the queue once its
// jobs are gone. It costs one auto-commit statement per queue per Store.
// Inside the caller's transaction it does nothing: there the insert would
// hold the new row's lock until that transaction ends, and every other
// transaction's first enqueue into the queue would wait for it (or
// deadlock, two queues in opposite orders).
func (q *Queue) register(ctx context.Context, o target, now time.Time) error {
	if !o.auto {
		return nil
	}
	if _, ok := q.s.registered.Load(q.name); ok {
		return nil
	}
	if err := o.registerQueue(ctx, q.name, now); err != nil {
		return err
	}
	q.s.registered.Store(q.name, struct{}{})
	return nil
}

// Claim takes up to n claimable jobs for worker (none while the queue is
// paused): ready jobs in priority
// (highest first), run_at, id order, and jobs whose previous claim expired.
// n must be 1 to MaxClaim (2^20) and visibility positive, else the call
// fails with ErrInvalidArgument before any I/O (an empty answer always means
// nothing was claimable).
// Each claim increments Attempts and holds the job for visibility; after
// that the job is claimable again. A job whose claim expired on its last
// allowed attempt ends dead instead, and one past its ExpiresAt expired.
// Claim has no transactional form on purpose: a claim's lease must not
// depend on a business transaction.
func (q *Queue) Claim(ctx context.Context, worker string, n int, visibility time.Duration) ([]*Job, error) {
	return q.claim(ctx, worker, n, visibility, nil, nil, nil)
}

// claim is Claim; grow, when not nil, is called where the engine claims
// one statement at a time (SQLite) once the claim holds the writer, and
// returns how many more jobs it may take (see claimReq.grow); lent, when
// not nil, is the ack a worker lends the claim to run in its transaction
// (see claimReq.lent); recent, when not nil, is the SQLite worker's record
// of its claims (see claimReq.recent).
func (q *Queue) claim(ctx context.Context, worker string, n int, visibility time.Duration, grow func() int,
	lent *lentAck, recent *recentClaims) ([]*Job, error) {
	return run(q.handle, "claim", autoWrite(ctx), func(o target) ([]*Job, error) {
		if err := validateLocalName("worker", worker); err != nil {
			return nil, err
		}
		if visibility <= 0 {
			return nil, fmt.Errorf("%w: visibility must be positive", ErrInvalidArgument)
		}
		if n <= 0 {
			return nil, fmt.Errorf("%w: n is %d: a claim takes at least 1 job (up to n)", ErrInvalidArgument, n)
		}
		if n > MaxClaim {
			return nil, fmt.Errorf("%w: n is %d: a claim takes at most MaxClaim (%d) jobs", ErrInvalidArgument, n, MaxClaim)
		}
		now := q.s.now()
		if err := q.register(ctx, o, now); err != nil {
			return nil, err
		}
		token, err := newClaimToken()
		if err != nil {
			return nil, err
		}
		r := claimReq{queue: q.name, worker: worker, n: n, token: token, grow: grow, lent: lent,
			recent: recent, clock: q.s.now, visibility: visibility}
		r.stamp(now)
		jobs, err := o.claim(ctx, r)
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
			if j.mu == nil { // PostgreSQL's claim allocates it with the job
				j.mu = new(sync.Mutex)
			}
		}
		return jobs, nil
	})
}

// MaxClaim is the most jobs one Claim takes: a larger n is refused with
// ErrInvalidArgument (it was cut to this many, silently).
const MaxClaim = 1 << 20

type claimReq struct {
	queue, worker  string
	n              int
	now, expiresAt time.Time
	token          int64
	// grow, when not nil, returns how many jobs the claim may take beyond
	// n, counted from the claim's first call: SQLite calls it once the
	// claim's transaction holds the writer, so a worker's claim also takes
	// the handler slots freed while it waited behind the writer (its
	// acks), instead of leaving them to a claim of its own.
	grow func() int
	// lent, when not nil, is a SQLite worker's ack of finished jobs lent
	// to its claim (see worker.lend), which the claim runs in its own
	// transaction after its stamp (see lentAck).
	lent *lentAck
	// recent, when not nil, is a SQLite worker's record of its latest
	// claims, which the claim writes inside its transaction, once it
	// stamped its jobs: a transactional handler that takes the writer
	// as the claim commits extends them before the worker has handed
	// them to its handlers (see recentClaims).
	recent *recentClaims
	// clock and visibility stamp the claim again (stamp) where it may
	// have waited: SQLite's claim, once it holds the writer, which an
	// InTx, a WorkTx handler or another process may have held for longer
	// than the visibility. The lease and the jobs' expiry count from the
	// claim, not from the call.
	clock      func() time.Time
	visibility time.Duration
}

// lentAck is the ack of finished jobs that a SQLite worker's claim runs in
// its own write transaction, after stamping its jobs: one commit for both,
// and the pages both write (the rows' leaves, alk_jobs_running's) go to
// the WAL once. take is called once inside the transaction and returns
// the claims to settle (none: nothing was lent, and none will be). When
// the transaction commits with every one of them settled, acked is set
// and ids holds their ids. Otherwise (a claim of them was lost, a
// statement of the ack failed) the claim's transaction is rolled back and
// the claim runs again without them, and the worker acks them after, as
// an ack of its own (which says which claims were lost): neither the
// claim's jobs nor the lent ones are lost with the ack.
type lentAck struct {
	take  func() []claimRef
	acked bool
	ids   []int64
	// taken and batch: the worker's, set by take (see worker.takeLent).
	taken bool
	batch *[]*Job
}

// stamp sets the claim's time and the end of its lease.
func (r *claimReq) stamp(now time.Time) {
	r.now, r.expiresAt = now, now.Add(r.visibility).Truncate(time.Microsecond)
}

// newClaimToken draws the random token that fences one Claim's jobs.
func newClaimToken() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1), nil // positive
}

// Job returns a job of this queue, live or finished, or ErrNotFound.
func (q *Queue) Job(ctx context.Context, id int64) (*Job, error) {
	return q.getJob(ctx, autoRead, id)
}

// JobTx is Job inside tx; it sees jobs tx enqueued.
func (q *Queue) JobTx(ctx context.Context, tx Tx, id int64) (*Job, error) {
	return q.getJob(ctx, tx.via(ctx), id)
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

// Cancel ends a pending or running job in state JobCancelled, with its
// FinishedAt set and LastError "cancelled" (not an attempt's error: Errors
// is left as it was); it never runs again. A running job loses its claim: the
// worker running it, in this process or another, cancels its handler's
// context (context.Cause matches ErrClaimLost) and settles nothing, and any
// settle the handler still tries fails with ErrClaimLost. ErrNotFound when
// no such live job.
func (q *Queue) Cancel(ctx context.Context, id int64) error {
	return q.cancel(ctx, autoWrite(ctx), id)
}

// CancelTx is Cancel inside tx: the job ends cancelled only if tx commits,
// and its worker hears of it then. A transactional handler (WorkTx,
// RunJobTx) cancelling its own job through the Tx it was handed settles
// the job as Job.CancelTx does: its transaction then commits with the
// cancel and the handler's writes when the handler returns nil.
func (q *Queue) CancelTx(ctx context.Context, tx Tx, id int64) error {
	if j := tx.handlerJob(q, id); j != nil {
		// Without spending the claim, the worker then completed the job in
		// tx, whose fence found the claim this cancel had ended: the
		// transaction rolled back whole, the cancel and the handler's
		// writes with it, and the job ran again until it died (attack56a
		// F5).
		return q.cancelOwn(ctx, tx, j)
	}
	return q.cancel(ctx, tx.via(ctx), id)
}

// cancelOwn is CancelTx of j by the handler running it, in tx: Job.CancelTx
// with Queue.CancelTx's errors. A claim spent meanwhile (the handler
// settled j in a goroutine of its own) leaves it to a plain cancel.
func (q *Queue) cancelOwn(ctx context.Context, tx Tx, j *Job) error {
	_, err := j.settle(ctx, "cancel", &tx, true, func(o target, now time.Time) (bool, error) {
		ok, err := o.cancel(ctx, q.name, j.ID, now)
		if err == nil && !ok {
			return false, fmt.Errorf("live job %d: %w", j.ID, ErrNotFound)
		}
		if ok {
			j.after, j.next, j.as = JobCancelled, time.Time{}, OutcomeCancelled
			o.afterCommit(q.s.wake(claimTopic(q.name)))
		}
		return ok, err
	})
	if err != nil && errors.Is(err, ErrInvalidArgument) && j.settled() {
		return q.cancel(ctx, tx.via(ctx), j.ID)
	}
	return err
}

func (q *Queue) cancel(ctx context.Context, v via, id int64) error {
	return run0(q.handle, "cancel", v, func(o target) error {
		ok, err := o.cancel(ctx, q.name, id, q.s.now())
		if err == nil && !ok {
			err = fmt.Errorf("live job %d: %w", id, ErrNotFound)
		} else if ok {
			o.afterCommit(q.s.wake(claimTopic(q.name)))
		}
		return err
	})
}

// Pause stops every worker of the queue, in every process, from claiming
// its jobs (Claim returns none) until Resume; handlers already running
// finish as usual, and jobs may still be enqueued. The pause is stored, so
// it outlives restarts, and takes effect with the first claim after it
// commits.
func (q *Queue) Pause(ctx context.Context) error {
	return q.setPaused(ctx, autoWrite(ctx), "pause", true)
}

// PauseTx is Pause inside tx: the queue pauses only if tx commits.
func (q *Queue) PauseTx(ctx context.Context, tx Tx) error {
	return q.setPaused(ctx, tx.via(ctx), "pause", true)
}

// Resume lets the queue's workers claim again. They hear of it through the
// wake feed, so claiming restarts at once, not at their next safety poll.
// Resuming a queue that is not paused does nothing.
func (q *Queue) Resume(ctx context.Context) error {
	return q.setPaused(ctx, autoWrite(ctx), "resume", false)
}

// ResumeTx is Resume inside tx: the queue resumes only if tx commits.
func (q *Queue) ResumeTx(ctx context.Context, tx Tx) error {
	return q.setPaused(ctx, tx.via(ctx), "resume", false)
}

func (q *Queue) setPaused(ctx context.Context, v via, op string, paused bool) error {
	return run0(q.handle, op, v, func(o target) error {
		if err := o.setQueuePaused(ctx, q.name, paused, q.s.now()); err != nil {
			return err
		}
		o.afterCommit(q.wakeFn)
		return nil
	})
}

// Requeue moves a dead, cancelled or expired job back to pending, due now,
// with its attempts reset; its Errors stay. An ExpiresAt already past is
// dropped (the job would expire again at once). ErrNotFound when no such
// job in one of those states. A unique job whose key another job holds now
// stays where it is: ErrInvalidArgument, naming the key's digest (the
// stored form of the key) and the holder's id (ErrInvalidArgument too,
// with the driver's unique violation, when a job took the key while the
// move ran and its holder cannot be named); a job holding its own key (a
// ByState that lists its state) moves.
func (q *Queue) Requeue(ctx context.Context, id int64) error {
	return q.requeue(ctx, autoWrite(ctx), id)
}

// RequeueTx is Requeue inside tx: the job is pending again only if tx
// commits.
func (q *Queue) RequeueTx(ctx context.Context, tx Tx, id int64) error {
	return q.requeue(ctx, tx.via(ctx), id)
}

func (q *Queue) requeue(ctx context.Context, v via, id int64) error {
	return run0(q.handle, "requeue", v, func(o target) error {
		ok, err := o.requeue(ctx, q.name, id, q.s.now())
		if ok {
			o.afterCommit(q.wakeFn)
			return nil
		}
		if err != nil && !keyHeld(err) {
			return err
		}
		// Not moved, or (Postgres) a job took the key meanwhile: say why.
		h, herr := o.jobKeyHolder(ctx, q.name, id)
		switch {
		case herr == nil && h.holder != 0:
			return fmt.Errorf("job %d: its unique key (digest %x) is held by job %d: %w", id, h.key, h.holder, ErrInvalidArgument)
		case err != nil:
			// A job took the key while the update ran (Postgres: its enqueue
			// committed meanwhile), and its holder is gone by now, or could
			// not be read (a transaction the violation aborted): the same
			// sentinel as a held key, not the driver's bare unique
			// violation (still reachable). No "try again": in a Postgres
			// transaction the violation aborted it (RequeueTx).
			return fmt.Errorf("job %d: another job took its unique key while it moved: %w: %w", id, ErrInvalidArgument, err)
		case herr != nil && !errors.Is(noRows(herr), ErrNotFound):
			return herr
		}
		return fmt.Errorf("dead, cancelled or expired job %d: %w", id, ErrNotFound)
	})
}

// keyHolder is a job's unique key digest and the other job holding it
// (0: none).
type keyHolder struct {
	key    []byte
	holder int64
}

// QueueStats counts a queue's jobs by state. Each count is read from an
// index range that stops at StatsCountLimit rows: exact below it, capped at
// it. OldestReady is exact (the first entry of an index).
type QueueStats struct {
	Ready       int64         // pending and due
	Scheduled   int64         // pending, due later
	Running     int64         // claimed
	Dead        int64         // failed for good (state dead)
	Completed   int64         // acked and kept (only in a queue with QueueConfig.CompletedRetention)
	Cancelled   int64         // cancelled by Queue.Cancel, until deleted or requeued
	Expired     int64         // not run before their ExpiresAt, until deleted or requeued
	OldestReady time.Duration // how long the oldest ready job has waited; 0 when none
	Paused      bool          // Pause was called and Resume not since (Queue.Stats only)
}

// Stats counts the queue's jobs by state, reading indexes only (see
// QueueStats for which figures are exact), and says whether it is paused.
func (q *Queue) Stats(ctx context.Context) (QueueStats, error) {
	return run(q.handle, "stats", autoRead, func(o target) (QueueStats, error) {
		st, err := o.queueStats(ctx, q.name, q.s.now())
		if err != nil {
			return st, err
		}
		st.Paused, err = o.queuePaused(ctx, q.name)
		return st, err
	})
}

// jobClaim is a job's state and claim token as the database has them.
type jobClaim struct {
	id      int64
	state   JobState
	token   int64
	expires time.Time // its claim's lease; zero when it has none
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
