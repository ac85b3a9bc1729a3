package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Queue settings and the operations a console or CLI runs on a queue's
// jobs: listing them by state, deleting one, requeueing dead ones.

// QueueConfig is a queue's stored settings: how long its finished jobs are
// kept. The janitor deletes them once older than that, in bounded batches.
type QueueConfig struct {
	// CompletedRetention keeps acked jobs as completed for this long; 0
	// (the default) deletes a job when it is acked. Keeping them costs an
	// UPDATE instead of a DELETE per ack and the janitor's delete later:
	// turn it on for the queues whose history you want to see.
	CompletedRetention time.Duration
	// DeadRetention keeps dead, cancelled and expired jobs for this long;
	// 0 (the default) keeps them until they are requeued or deleted. They
	// are the failures someone should look at: nothing deletes them unless
	// asked, and claims never read them.
	DeadRetention time.Duration
}

// Configure stores the queue's settings (replacing earlier ones; a paused
// queue stays paused). A retention that is negative, or positive but under
// 1µs, is refused with ErrInvalidArgument, as Stream.Configure refuses its
// durations: they are stored in whole microseconds (a remainder below 1µs
// is dropped), and under 1µs a CompletedRetention was stored as 0, keeping
// nothing, and a DeadRetention failed on the table's CHECK.
func (q *Queue) Configure(ctx context.Context, c QueueConfig) error {
	return run0(q.handle, "configure", autoWrite(ctx), func(o target) error {
		if err := checkMicros("QueueConfig.CompletedRetention", c.CompletedRetention); err != nil {
			return err
		}
		if err := checkMicros("QueueConfig.DeadRetention", c.DeadRetention); err != nil {
			return err
		}
		return o.configureQueue(ctx, q.name, c, q.s.now())
	})
}

// JobsOpts select a page of a queue's jobs.
type JobsOpts struct {
	State JobState // required
	// After is the last ID of the previous page: the page holds the jobs
	// with a higher ID. 0 starts at the first.
	After int64
	Limit int // jobs per page; 0: DefaultJobsLimit; over MaxJobsLimit is refused (ErrInvalidArgument)
}

// Page sizes for Queue.Jobs.
const (
	DefaultJobsLimit = 100
	MaxJobsLimit     = 10000
)

// Jobs returns a page of the queue's jobs in one state, in ID order (keyset
// pagination: pass the last ID as the next page's After). A page of
// finished jobs is one index range, whatever the table's other rows; a page
// of pending or running jobs reads and sorts the queue's jobs in that state
// (from the indexes claims use: enqueues pay for no index of their own), so
// its cost follows the queue's backlog. A page shorter than its Limit is
// the last one for now.
func (q *Queue) Jobs(ctx context.Context, opts JobsOpts) ([]*Job, error) {
	return q.jobs(ctx, autoRead, opts)
}

// JobsTx is Jobs inside tx: it sees tx's own uncommitted jobs (what a test
// asserting "this transaction enqueued that job" reads).
func (q *Queue) JobsTx(ctx context.Context, tx Tx, opts JobsOpts) ([]*Job, error) {
	return q.jobs(ctx, tx.via(ctx), opts)
}

func (q *Queue) jobs(ctx context.Context, v via, opts JobsOpts) ([]*Job, error) {
	return run(q.handle, "jobs", v, func(o target) ([]*Job, error) {
		if opts.State != JobPending && opts.State != JobRunning && !opts.State.final() {
			return nil, fmt.Errorf("%w: unknown job state %q", ErrInvalidArgument, opts.State)
		}
		if opts.After < 0 || opts.Limit < 0 {
			return nil, fmt.Errorf("%w: After and Limit must not be negative", ErrInvalidArgument)
		}
		if opts.Limit > MaxJobsLimit {
			// Refused, not clamped: a page cut to the bound looked like the
			// last one to a caller comparing it with its Limit (the CLI
			// printed no next page for --limit 20000, attack56b F5).
			return nil, fmt.Errorf("%w: Limit %d over MaxJobsLimit (%d)", ErrInvalidArgument, opts.Limit, MaxJobsLimit)
		}
		limit := cmp.Or(opts.Limit, DefaultJobsLimit)
		return o.listJobs(ctx, listJobsReq{queue: q.name, state: opts.State, after: opts.After, limit: limit})
	})
}

// Delete deletes a job that is not running (cancel a running one first).
// ErrNotFound when the queue has no such job; ErrInvalidArgument when it is
// running.
func (q *Queue) Delete(ctx context.Context, id int64) error {
	return q.deleteJob(ctx, autoWrite(ctx), id)
}

// DeleteTx is Delete inside tx: the job is gone only if tx commits.
func (q *Queue) DeleteTx(ctx context.Context, tx Tx, id int64) error {
	return q.deleteJob(ctx, tx.via(ctx), id)
}

func (q *Queue) deleteJob(ctx context.Context, v via, id int64) error {
	return run0(q.handle, "delete", v, func(o target) error {
		ok, err := o.deleteJob(ctx, q.name, id)
		if err != nil || ok {
			return err
		}
		j, err := o.getJob(ctx, q.name, id)
		switch {
		case err == nil && j.State == JobRunning:
			return fmt.Errorf("%w: job %d is running (Cancel it first)", ErrInvalidArgument, id)
		case err == nil: // it changed state in between; still there
			return fmt.Errorf("job %d changed state while being deleted; try again: %w", id, ErrNotFound)
		}
		return fmt.Errorf("job %d: %w", id, ErrNotFound)
	})
}

// requeueBatch is how many dead jobs one statement of RequeueDead moves:
// on SQLite the writer slot is held for one batch at a time.
const requeueBatch = 1000

// RequeueDead moves every dead job of the queue back to pending like
// Requeue, in batches of its own transactions, and returns how many it
// moved. Jobs that die while it runs stay dead: it moves those that died
// at or before its start by this store's clock (WithClock, or the host's).
// A job's death is stamped by the clock of the process that ended it, so a
// job that died on a host whose clock runs ahead of this one stays dead
// until a RequeueDead whose clock has passed that time (Requeue moves it by
// id at once; the job's FinishedAt says when it died). Rows another
// transaction holds are skipped, and so are unique jobs that could not hold their key
// once pending: those whose key another job holds now, and of dead jobs
// sharing a key all but the one that died first. They stay dead (Requeue
// says who holds a job's key); a dead job holding its own key (a ByState
// that lists dead) moves. On PostgreSQL a job enqueued while a batch runs
// may take the key of one of its jobs, failing the batch, which is then
// tried again; a batch failed that way 9 times in a row fails the call
// with ErrInvalidArgument, as Requeue into a held key does (the driver's
// unique violation stays reachable with errors.As). On an error it still
// returns the jobs of the batches that committed before it.
func (q *Queue) RequeueDead(ctx context.Context) (int64, error) {
	// Counted outside run, which returns the zero value with an error: the
	// batches before the one that failed have committed.
	var moved int64
	_, err := run(q.handle, "requeue dead", autoWrite(ctx), func(o target) (int64, error) {
		before := q.s.now()
		for raced := 0; ; {
			n, err := o.requeueDead(ctx, requeueDeadReq{queue: q.name, now: q.s.now(), before: before, batch: requeueBatch})
			if keyHeld(err) {
				if raced < uniqueRetries {
					// A job took a key of the batch meanwhile (Postgres: an
					// enqueue committed after the statement's snapshot). The
					// batch moved nothing; again, it skips that job.
					raced++
					continue
				}
				// Not the driver's bare unique violation: the same sentinel
				// as Requeue into a held key.
				return moved, fmt.Errorf("a job took the unique key of a dead job of the batch %d times in a row (jobs enqueued meanwhile): %w: %w",
					raced+1, ErrInvalidArgument, err)
			}
			if err != nil {
				return moved, err
			}
			raced = 0 // the bound is a batch's: each batch commits on its own
			moved += n
			if n > 0 {
				o.afterCommit(q.wakeFn)
			}
			// Skipped jobs make a batch short: only an empty one ends.
			if n == 0 {
				return moved, nil
			}
		}
	})
	return moved, err
}

// Job finds a job by id alone, whatever its queue (Job.Queue says which;
// an outbox's job names its backing queue); ErrNotFound when there is none.
func (s *Store) Job(ctx context.Context, id int64) (*Job, error) {
	return run(handle{s: s}, "job", autoRead, func(o target) (*Job, error) {
		j, err := o.findJob(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", id, noRows(err))
		}
		return j, nil
	})
}

// QueueInfo describes one queue for Store.Queues: its settings, whether it
// is paused, and its counts.
type QueueInfo struct {
	Name   string
	Outbox string // the outbox's name when this queue backs an outbox (Name is then reserved); "" otherwise
	Paused bool   // workers claim nothing from it
	Config QueueConfig
	Stats  QueueStats
}

// Queues lists every queue that has jobs or stored settings, by name, with
// its settings, paused flag and counts (as Stats reports them). A queue is
// listed while it holds no job once it has a settings row: it was paused
// or configured, a worker claimed from it, or Enqueue (not EnqueueTx) added
// to it; the row is written once per queue per Store. An outbox's backing queue is listed under its
// reserved name, with the outbox's own name in Outbox.
func (s *Store) Queues(ctx context.Context) ([]QueueInfo, error) {
	return run(handle{s: s}, "queues", autoRead, func(o target) ([]QueueInfo, error) {
		settings, err := o.queueSettings(ctx)
		if err != nil {
			return nil, err
		}
		names, err := o.jobQueues(ctx)
		if err != nil {
			return nil, err
		}
		byName := make(map[string]*QueueInfo, len(settings)+len(names))
		for i := range settings {
			byName[settings[i].Name] = &settings[i]
		}
		for _, name := range names {
			if byName[name] == nil {
				byName[name] = &QueueInfo{Name: name}
			}
		}
		now := s.now()
		for _, qi := range byName {
			qi.Outbox, _ = strings.CutPrefix(qi.Name, OutboxQueuePrefix)
			if qi.Outbox == qi.Name {
				qi.Outbox = ""
			}
			if qi.Stats, err = o.queueStats(ctx, qi.Name, now); err != nil {
				return nil, err
			}
			qi.Stats.Paused = qi.Paused
		}
		out := make([]QueueInfo, 0, len(byName))
		for _, qi := range byName {
			out = append(out, *qi)
		}
		slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
		return out, nil
	})
}

// retentionUs stores a retention as microseconds; nil for 0 (keep).
func retentionUs(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	us := d.Microseconds()
	return &us
}

func fromRetentionUs(us *int64) time.Duration {
	if us == nil {
		return 0
	}
	return time.Duration(*us) * time.Microsecond
}

// attemptErrors decodes the errors column: a JSON array of
// {"attempt", "at_us", "error"} objects, the same on both engines.
func attemptErrors(js []byte) []AttemptError {
	if len(js) <= 2 { // "[]"
		return nil
	}
	var raw []struct {
		Attempt int    `json:"attempt"`
		AtUs    int64  `json:"at_us"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(js, &raw) != nil {
		return nil // written only by alkstore's statements; never malformed
	}
	out := make([]AttemptError, len(raw))
	for i, r := range raw {
		out[i] = AttemptError{Attempt: r.Attempt, At: time.UnixMicro(r.AtUs), Error: r.Error}
	}
	return out
}
