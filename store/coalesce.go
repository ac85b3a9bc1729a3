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
//
// Publishes are not coalesced: tried the same way (unkeyed Publishes of one
// stream sharing PublishEvents statements), the server's CPU an event fell
// from 46-52 to 33 us with 8 publishers, but the wall-clock rate fell to
// 0.61-0.92 of main's in bench-compare (a one-event statement costs the
// server less than a job's, so waiting for a statement costs more than
// sharing it saves).

// coalesceMax caps the items of one coalesced statement.
const coalesceMax = 128

// coalesceInflight is how many statements of one queue may be in flight
// before calls wait to share the next one. One saves the most server
// CPU (8 producers: 37 us a job against 79) but makes every waiting call
// wait for a whole statement; two keeps most of the saving (41 us).
const coalesceInflight = 2

// coalescedTimeout bounds a coalesced statement, which no caller's context
// can cancel (its callers stop waiting when theirs end).
const coalescedTimeout = time.Minute

// coalescer batches auto-commit inserts of items T, one lane per name (a
// queue's): one sends a single item (the statement the call would run
// alone), many several in one statement, returning their ids in order.
type coalescer[T any] struct {
	one  func(ctx context.Context, o ops, name string, it T) (int64, error)
	many func(ctx context.Context, o ops, name string, its []T) ([]int64, error)

	mu    sync.Mutex
	lanes map[string]*lane[T]
}

// lane is one name's: how many statements are in flight, and the calls
// waiting for the next one.
type lane[T any] struct {
	inflight int
	waiting  []*coalesced[T]
}

type coalesced[T any] struct {
	ctx  context.Context
	item T
	done chan coalescedResult // buffered: the sender never blocks
}

type coalescedResult struct {
	id  int64
	err error
}

// enqueuedJob is a job for the enqueue coalescer: resolved at now, its
// call's clock reading.
type enqueuedJob struct {
	now time.Time
	job newJob
}

// newEnqueueCoalescer sends one job with EnqueueJob and several with
// EnqueueJobs, created at the latest clock reading of their calls (so
// within every call).
func newEnqueueCoalescer() *coalescer[enqueuedJob] {
	return &coalescer[enqueuedJob]{
		one: func(ctx context.Context, o ops, queue string, j enqueuedJob) (int64, error) {
			return o.enqueue(ctx, queue, j.now, j.job)
		},
		many: func(ctx context.Context, o ops, queue string, js []enqueuedJob) ([]int64, error) {
			now := js[0].now
			jobs := make([]newJob, len(js))
			for i, j := range js {
				jobs[i] = j.job
				if j.now.After(now) {
					now = j.now
				}
			}
			return o.enqueueMany(ctx, queue, now, jobs)
		},
	}
}

// insert sends it through o, the store's auto-commit ops: alone when fewer
// than coalesceInflight statements of name are in flight, and otherwise in
// the next statement with the calls that arrived meanwhile.
func (c *coalescer[T]) insert(ctx context.Context, o ops, name string, it T) (int64, error) {
	c.mu.Lock()
	if c.lanes == nil {
		c.lanes = map[string]*lane[T]{}
	}
	l := c.lanes[name]
	if l == nil {
		l = &lane[T]{}
		c.lanes[name] = l
	}
	if l.inflight < coalesceInflight {
		l.inflight++
		c.mu.Unlock()
		id, err := c.one(ctx, o, name, it)
		c.release(o, name, l)
		return id, err
	}
	w := &coalesced[T]{ctx: ctx, item: it, done: make(chan coalescedResult, 1)}
	l.waiting = append(l.waiting, w)
	c.mu.Unlock()
	select {
	case r := <-w.done:
		return r.id, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// release ends a lane's statement: the lane has a free slot again, or the
// calls that waited meanwhile go out in a goroutine that keeps sending
// batches until none waits (never on a caller's goroutine: a caller
// returns once its own item is in).
func (c *coalescer[T]) release(o ops, name string, l *lane[T]) {
	c.mu.Lock()
	if len(l.waiting) == 0 {
		c.idle(name, l)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.drain(o, name, l)
}

// idle ends one of l's statements, with c.mu held: a lane with none in
// flight is dropped (no waiting call can hold it), so names that come and
// go leave nothing behind.
func (c *coalescer[T]) idle(name string, l *lane[T]) {
	if l.inflight--; l.inflight == 0 {
		delete(c.lanes, name)
	}
}

func (c *coalescer[T]) drain(o ops, name string, l *lane[T]) {
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
			c.idle(name, l)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.send(o, name, batch)
	}
}

// send inserts the items of the calls still waiting in one statement and
// hands each its id, or its error.
func (c *coalescer[T]) send(o ops, name string, batch []*coalesced[T]) {
	live := batch[:0:0]
	for _, w := range batch {
		if w.ctx.Err() == nil { // its caller has returned: drop the item
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return
	}
	// No caller's context: the statement carries other callers' items.
	ctx, cancel := context.WithTimeout(context.Background(), coalescedTimeout)
	defer cancel()
	if len(live) == 1 {
		id, err := c.one(ctx, o, name, live[0].item)
		live[0].done <- coalescedResult{id, err}
		return
	}
	items := make([]T, len(live))
	for i, w := range live {
		items[i] = w.item
	}
	ids, err := c.many(ctx, o, name, items)
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
	// time, each item gets its own outcome.
	for _, w := range live {
		if w.ctx.Err() != nil {
			continue
		}
		id, err := c.one(ctx, o, name, w.item)
		w.done <- coalescedResult{id, err}
	}
}
