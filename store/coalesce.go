package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Enqueue coalescing (PostgreSQL, issue 18). A single-row INSERT into
// alkstore.jobs costs the server about three raw INSERTs, nearly all of it
// per statement, not per row: PostgreSQL opens every index of the table,
// prepares every partial index's predicate and parses and plans every CHECK
// constraint again for each statement it executes (callgrind, PostgreSQL
// 15: 344k instructions a one-row statement, 108k a raw INSERT; the four
// CHECKs alone 113k). So auto-commit Enqueues of one queue that arrive while
// an earlier one's statement is in flight wait, and go together in one
// EnqueueJobs statement once one returns: with one or two producers nothing
// changes (each call runs its own statement, as before); with eight the
// server parses those constraints once for several jobs.
//
// Each caller still gets its own job's id, after the statement that
// inserted it committed, and its own error. A batch the server rejects
// (nothing committed: a PgError) is retried one job at a time, so one job
// an application's trigger refuses does not fail the others. A caller whose
// context ends while it waits returns the context's error; its job is
// dropped if its batch has not been sent yet, and may be added otherwise
// (as when a statement is cancelled in flight).

// coalesceMax caps the jobs of one coalesced statement.
const coalesceMax = 128

// coalesceInflight is how many statements of one queue may be in flight
// before calls wait to share the next one. One saves the most server CPU
// (8 producers: 37 µs a job against 79) but makes every waiting call wait
// for a whole statement; two keeps most of the saving (41 µs).
const coalesceInflight = 2

// coalescer batches auto-commit enqueues, one lane per queue.
type coalescer struct {
	mu    sync.Mutex
	lanes map[string]*lane
}

// lane is one queue's: how many statements are in flight, and the calls
// waiting for the next one.
type lane struct {
	inflight int
	waiting  []*coalescedJob
}

type coalescedJob struct {
	ctx  context.Context
	now  time.Time
	job  newJob
	done chan coalescedResult // buffered: the sender never blocks
}

type coalescedResult struct {
	id  int64
	err error
}

// enqueue inserts j (resolved at now) into queue through o, the store's
// auto-commit ops, alone when fewer than coalesceInflight statements of the
// queue are in flight, and otherwise in the next statement with the calls
// that arrived meanwhile.
func (c *coalescer) enqueue(ctx context.Context, o ops, queue string, now time.Time, j newJob) (int64, error) {
	c.mu.Lock()
	if c.lanes == nil {
		c.lanes = map[string]*lane{}
	}
	l := c.lanes[queue]
	if l == nil {
		l = &lane{}
		c.lanes[queue] = l
	}
	if l.inflight < coalesceInflight {
		l.inflight++
		c.mu.Unlock()
		id, err := o.enqueue(ctx, queue, now, j)
		c.release(o, queue, l)
		return id, err
	}
	w := &coalescedJob{ctx: ctx, now: now, job: j, done: make(chan coalescedResult, 1)}
	l.waiting = append(l.waiting, w)
	c.mu.Unlock()
	select {
	case r := <-w.done:
		return r.id, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// release ends a lane's statement: the lane is free again, or the calls
// that waited meanwhile go out in a goroutine that keeps sending batches
// until none waits (never on a caller's goroutine: a caller returns once
// its own job is in).
func (c *coalescer) release(o ops, queue string, l *lane) {
	c.mu.Lock()
	if len(l.waiting) == 0 {
		l.inflight--
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.drain(o, queue, l)
}

func (c *coalescer) drain(o ops, queue string, l *lane) {
	for {
		c.mu.Lock()
		batch := l.waiting
		if len(batch) > coalesceMax {
			batch = batch[:coalesceMax:coalesceMax]
			l.waiting = l.waiting[coalesceMax:]
		} else {
			l.waiting = nil
		}
		if len(batch) == 0 {
			l.inflight--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		sendBatch(o, queue, batch)
	}
}

// sendBatch inserts the jobs of the calls still waiting in one statement
// and hands each its id, or its error.
func sendBatch(o ops, queue string, batch []*coalescedJob) {
	live := batch[:0:0]
	for _, w := range batch {
		if w.ctx.Err() == nil { // its caller has returned: drop the job
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return
	}
	// No caller's context: the statement carries other callers' jobs.
	ctx, cancel := context.WithTimeout(context.Background(), coalescedTimeout)
	defer cancel()
	if len(live) == 1 {
		id, err := o.enqueue(ctx, queue, live[0].now, live[0].job)
		live[0].done <- coalescedResult{id, err}
		return
	}
	now := live[0].now // the latest call's clock: created_at within every call
	jobs := make([]newJob, len(live))
	for i, w := range live {
		jobs[i] = w.job
		if w.now.After(now) {
			now = w.now
		}
	}
	ids, err := o.enqueueMany(ctx, queue, now, jobs)
	if err == nil {
		for i, w := range live {
			w.done <- coalescedResult{id: ids[i]}
		}
		return
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) { // maybe committed: each caller hears of it
		for _, w := range live {
			w.done <- coalescedResult{err: err}
		}
		return
	}
	// The server refused the batch, so nothing of it is stored: one at a
	// time, each job gets its own outcome.
	for _, w := range live {
		if w.ctx.Err() != nil {
			continue
		}
		id, err := o.enqueue(ctx, queue, w.now, w.job)
		w.done <- coalescedResult{id, err}
	}
}

// coalescedTimeout bounds a coalesced statement, which no caller's context
// can cancel (its callers stop waiting when theirs end).
const coalescedTimeout = time.Minute
