package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Enqueue coalescing (PostgreSQL, not Citus; issue 18). A one-row INSERT
// into alkstore.jobs costs the server about three raw INSERTs, nearly all
// of it per statement, not per row: PostgreSQL opens every index of the
// table, prepares every partial index's predicate and parses and plans
// every CHECK constraint again for each statement it executes (callgrind,
// PostgreSQL 15: 344k instructions a one-row statement, 108k a raw INSERT;
// the four CHECKs alone 113k). So auto-commit Enqueues of one queue that
// arrive while two of its statements are in flight wait, and go out
// together once one returns: with one or two producers nothing changes
// (each call runs its own statement, as before).
//
// Each caller gets exactly what its Enqueue alone would have:
//
//   - A shared batch is all or none: one statement (EnqueueSharedJobs) that
//     fails itself when an application's trigger skipped one of its rows,
//     so that its implicit transaction rolls back. When the server refuses
//     it in any way (a constraint, a trigger's error or skipped row, a lock
//     timeout, ...) nothing of it is stored, and every caller runs its own
//     one-job statement, on its own goroutine and context, as if it had
//     come alone: one refused job fails its own call only, and nothing is
//     stored twice. Only when the statement's outcome is unknown (the
//     connection lost) does every caller get that error, as a lone Enqueue
//     would.
//   - Only jobs alike but for their payloads share a statement (the usual
//     case: calls with the same options); the others run alone.
//   - A shared batch has no deadline of its own: it is cancelled once every
//     caller in it has returned (their contexts ended), never before. A
//     caller whose context ends while it waits returns ctx.Err() at once;
//     its job may then have been stored, as when a lone Enqueue's context
//     ends while its statement is in flight.
//   - Unique jobs, Tx forms, SQLite and Citus never coalesce.

// coalesceMax caps the jobs of one shared batch.
const coalesceMax = 128

// coalesceInflight is how many statements of one queue may be in flight
// before calls wait to share the next one. One saves the most server CPU
// but makes every waiting call wait for a whole statement; two keeps most
// of the saving.
const coalesceInflight = 2

// coalescer batches auto-commit enqueues, one lane per queue.
type coalescer struct {
	// one is the call's own statement; many inserts several alike jobs
	// all or none, reporting with notStored that nothing of them can be
	// stored when it fails.
	one  func(ctx context.Context, o ops, queue string, now time.Time, j newJob) (int64, error)
	many func(ctx context.Context, o ops, queue string, now time.Time, jobs []newJob) (ids []int64, notStored bool, err error)

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

// coalescedResult is a waiting call's outcome: its id, an error, or alone
// (its batch stored nothing: run the job's own statement).
type coalescedResult struct {
	id    int64
	err   error
	alone bool
}

func newEnqueueCoalescer(many func(ctx context.Context, o ops, queue string, now time.Time, jobs []newJob) ([]int64, bool, error)) *coalescer {
	return &coalescer{
		one: func(ctx context.Context, o ops, queue string, now time.Time, j newJob) (int64, error) {
			return o.enqueue(ctx, queue, now, j)
		},
		many: many,
	}
}

// enqueue inserts j (resolved at now) into queue through o, the store's
// auto-commit ops: alone when fewer than coalesceInflight statements of
// the queue are in flight, and otherwise in a batch with the calls that
// arrived meanwhile.
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
		id, err := c.one(ctx, o, queue, now, j)
		c.release(o, queue, l)
		return id, err
	}
	w := &coalescedJob{ctx: ctx, now: now, job: j, done: make(chan coalescedResult, 1)}
	l.waiting = append(l.waiting, w)
	c.mu.Unlock()
	var r coalescedResult
	select {
	case r = <-w.done:
	case <-ctx.Done():
		select {
		case r = <-w.done: // it ended as the outcome came: take the outcome
		default:
			return 0, ctx.Err() // its job may be in a batch in flight
		}
	}
	if r.alone {
		return c.one(ctx, o, queue, now, j)
	}
	return r.id, r.err
}

// release ends a lane's statement: the lane has a free slot again, or the
// calls that waited meanwhile go out in a goroutine that keeps sending
// batches until none waits (never on a caller's goroutine: a caller
// returns once its own job is in).
func (c *coalescer) release(o ops, queue string, l *lane) {
	c.mu.Lock()
	if len(l.waiting) == 0 {
		c.idle(queue, l)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.drain(o, queue, l)
}

// idle ends one of l's statements, with c.mu held: a lane with none in
// flight is dropped (no waiting call can hold it), so queues that come and
// go leave nothing behind.
func (c *coalescer) idle(queue string, l *lane) {
	if l.inflight--; l.inflight == 0 {
		delete(c.lanes, queue)
	}
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
			c.idle(queue, l)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.send(o, queue, batch)
	}
}

// send inserts the jobs of the calls still waiting, all or none in each
// statement, and hands each call its id, its error, or its own statement
// to run. The calls' jobs go in groups alike but for their payloads (one
// EnqueueSharedJobs each); a job alike to no other runs alone.
func (c *coalescer) send(o ops, queue string, batch []*coalescedJob) {
	live := batch[:0:0]
	for _, w := range batch {
		if w.ctx.Err() == nil { // its caller has returned: drop the job
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return
	}
	// The latest call's clock: created_at within every call. A job that
	// runs at once runs at it too, so that calls with the same options are
	// alike.
	now := live[0].now
	for _, w := range live {
		if w.now.After(now) {
			now = w.now
		}
	}
	jobs := make([]newJob, len(live))
	for i, w := range live {
		jobs[i] = w.job
		if jobs[i].runAt.Equal(w.now) {
			jobs[i].runAt = now
		}
	}
	for len(live) > 0 {
		group, groupJobs := live[:1:1], jobs[:1:1]
		var rest []*coalescedJob
		var restJobs []newJob
		for i := 1; i < len(live); i++ {
			if jobs[i].alike(jobs[0]) {
				group, groupJobs = append(group, live[i]), append(groupJobs, jobs[i])
			} else {
				rest, restJobs = append(rest, live[i]), append(restJobs, jobs[i])
			}
		}
		c.sendAlike(o, queue, now, group, groupJobs)
		live, jobs = rest, restJobs
	}
}

// sendAlike sends one group of alike jobs.
func (c *coalescer) sendAlike(o ops, queue string, now time.Time, group []*coalescedJob, jobs []newJob) {
	if len(group) == 1 { // its own statement, on its own context
		group[0].done <- coalescedResult{alone: true}
		return
	}
	ctx, stop := callersContext(group)
	defer stop()
	ids, notStored, err := c.many(ctx, o, queue, now, jobs)
	for i, w := range group {
		switch {
		case err == nil:
			w.done <- coalescedResult{id: ids[i]}
		case notStored:
			w.done <- coalescedResult{alone: true}
		default: // the statement's outcome is unknown: each caller hears of it
			w.done <- coalescedResult{err: err}
		}
	}
}

// callersContext is a shared batch's context: it carries no caller's
// deadline or values, and is cancelled once every caller's context is done
// (then no one waits for the batch any more). stop releases it.
func callersContext(live []*coalescedJob) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(live)))
	stops := make([]func() bool, len(live))
	for i, w := range live {
		stops[i] = context.AfterFunc(w.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}
