package store

import (
	"context"
	"reflect"
	"time"
)

// A worker's handler contexts and their timeouts, at two allocations a job:
// a handler's context is a context.WithCancelCause (the cause: a lost claim,
// a stop, the run's end) whose parent is the context of a timeoutBucket, a
// context.WithDeadline that the handlers starting within one tick
// (timeoutTick) share: its deadline is their start plus Timeout, rounded
// down to the tick. A handler's context registers with that parent as a
// child (an entry in its map), and the parent's timer ends them all at the
// deadline.
//
// Stop 32 had a parent of each job's own (a jobTimeout, which a worker's
// single timer ended): the context package attaches a child to such a
// parent through its AfterFunc, at two allocations more a job (the
// function and the stopCtx it boxes), four in all, a third of a burn-down's
// (and it used to be two contexts and a timer a job, ten; issue 18). A
// bucket costs about ten allocations (its timer, its map), shared by the
// handlers of a tick: a burn-down of 50,000 jobs a second starts about
// fifty a tick.
//
// The handler's context is the standard cancelCtx, so contexts derived
// from it (context.WithTimeout, context.AfterFunc, pgx's query watch)
// attach to it as to any other, without a goroutine of their own. At the
// Timeout it ends as WithTimeout's did: Err and context.Cause report
// context.DeadlineExceeded, for it and the contexts derived from it, and
// Deadline reports its deadline: at most a tick (a thousandth of the
// Timeout, at most a millisecond) before the start plus Timeout.

// timeoutBucket is the shared parent of the contexts of the handlers whose
// deadline (start plus Timeout, rounded down to the tick) is its deadline.
// n counts those still running (under the worker's mu): a bucket that is
// no longer the newest is cancelled (its timer stopped) once they all
// returned.
type timeoutBucket struct {
	ctx    context.Context
	cancel context.CancelFunc
	tick   int64 // its deadline's, in ticks since the Unix epoch
	n      int
}

// timeoutTick is how far a handler's deadline is rounded down so that the
// handlers starting close together share a bucket: a thousandth of the
// Timeout, at most a millisecond.
func timeoutTick(timeout time.Duration) time.Duration {
	return max(min(timeout/1000, time.Millisecond), 1)
}

// handlerValues is the parent of every bucket: it holds the values of the
// worker's context and never ends (Done is nil: the context package then
// attaches nothing to it), so the worker's stop, which cancels that
// context before handlers that outlive it time out, does not reach the
// handlers (cancelHandlers ends them when the stop says so).
type handlerValues struct {
	values context.Context
	// site: for a WorkTx worker, what the transactions the store begins
	// for its handlers are named by (see txSite).
	site *txSite
}

func (*handlerValues) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*handlerValues) Done() <-chan struct{}       { return nil }
func (*handlerValues) Err() error                  { return nil }

// Value is the worker context's value for key, except that the context
// package's own cancel contexts are hidden, as context.WithoutCancel hides
// them (it is not used because its Value allocates): Cause must find a
// handler's own context or its bucket's, never the worker's.
func (v *handlerValues) Value(key any) any {
	if _, ok := key.(txSiteKey); ok && v.site != nil {
		return v.site
	}
	x := v.values.Value(key)
	if x != nil && reflect.TypeOf(x) == cancelCtxType {
		return nil
	}
	return x
}

// cancelCtxType is the type of the context package's cancel contexts
// (what WithCancel returns, and what its contexts give for their key).
var cancelCtxType = func() reflect.Type {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return reflect.TypeOf(ctx)
}()

// startJob gives a handler its context, in the bucket of its deadline,
// and adds it to the running ones, oldest first.
func (w *worker) startJob(rj *runningJob) {
	if rj.untimed {
		w.startUntimed(rj)
		return
	}
	// The tick is counted on the wall clock: two deadlines of one tick
	// compare equal there, not on the monotonic clock that time.Now also
	// reads (a few nanoseconds apart: each handler had a bucket of its own).
	deadline := rj.since.Add(w.opts.Timeout)
	tick := deadline.UnixNano() / int64(w.tick)
	deadline = deadline.Add(-time.Duration(deadline.UnixNano() % int64(w.tick)))
	w.mu.Lock()
	b := w.bucket
	if b == nil || b.tick != tick {
		if b != nil && b.n == 0 {
			b.cancel()
		}
		b = &timeoutBucket{tick: tick}
		b.ctx, b.cancel = context.WithDeadline(w.handlerValues, deadline)
		w.bucket = b
	}
	b.n++
	rj.bucket = b
	rj.ctx, rj.cancel = context.WithCancelCause(b.ctx)
	w.enlist(rj)
}

// startUntimed gives a handler whose Timeout starts later (a transactional
// one: see runningJob.untimed) a context of its own, in no bucket.
func (w *worker) startUntimed(rj *runningJob) {
	w.mu.Lock()
	rj.bucket = nil
	rj.ctx, rj.cancel = context.WithCancelCause(w.handlerValues)
	w.enlist(rj)
}

// enlist adds rj to the running handlers, oldest first, and unlocks the
// worker's mu, which the caller holds.
func (w *worker) enlist(rj *runningJob) {
	rj.prev = w.last
	if w.last == nil {
		w.first = rj
	} else {
		w.last.next = rj
	}
	w.last = rj
	w.n++
	cancelled := w.cancelled
	if w.abandoned { // started after the stop gave up on the handlers: it does not run
		rj.skip = true
	}
	w.mu.Unlock()
	if cancelled { // started after the stop cancelled the handlers
		rj.cancel(context.Canceled)
	}
}

// stopJob forgets a handler that returned, and ends its bucket when it
// was the last of an older one.
func (w *worker) stopJob(rj *runningJob) {
	w.mu.Lock()
	if rj.prev == nil {
		w.first = rj.next
	} else {
		rj.prev.next = rj.next
	}
	if rj.next == nil {
		w.last = rj.prev
	} else {
		rj.next.prev = rj.prev
	}
	w.n--
	if rj.ownSettle && w.settling != nil {
		w.settling[rj] = struct{}{} // until settledJob
	}
	if b := rj.bucket; b != nil {
		b.n--
		if b.n == 0 && b != w.bucket {
			b.cancel() // the run is over: its context ends anyway (Canceled)
		}
	}
	w.mu.Unlock()
}

// settledJob forgets a job the runner settled itself once its settle
// returned (see worker.settling).
func (w *worker) settledJob(rj *runningJob) {
	w.mu.Lock()
	delete(w.settling, rj)
	w.mu.Unlock()
}

// endBuckets stops the newest bucket's timer once every handler returned.
func (w *worker) endBuckets() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bucket != nil {
		w.bucket.cancel()
		w.bucket = nil
	}
}

// cancelHandlers is the stop's: it cancels every running handler, and
// every handler that starts from now on.
func (w *worker) cancelHandlers() {
	w.mu.Lock()
	w.cancelled = true
	var all []*runningJob
	for rj := w.first; rj != nil; rj = rj.next {
		all = append(all, rj)
	}
	w.mu.Unlock()
	for _, rj := range all {
		rj.cancel(context.Canceled)
	}
}
