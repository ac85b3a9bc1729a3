package store

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"
)

// A worker's handler contexts and their timeouts, at the cost of one
// context a job: a handler's context is a context.WithCancelCause (the
// cause: a lost claim, a stop, the run's end) whose parent is the job's
// jobTimeout, which a worker's single timer ends at the job's Timeout.
// It used to be two contexts and a timer a job (WithCancelCause for the
// claim, WithTimeout on it): ten allocations, a runtime timer added and
// stopped, and a child registered with a parent every 100 handlers shared
// (issue 18).
//
// The handler's context is still the standard cancelCtx, so contexts
// derived from it (context.WithTimeout, context.AfterFunc, pgx's query
// watch) attach to it as to any other, without a goroutine of their own.
// At the Timeout it ends as WithTimeout's did: Err and context.Cause
// report context.DeadlineExceeded, for it and the contexts derived from
// it, and Deadline reports the job's deadline.

// jobTimeout is the parent of a worker's handler context: it holds the
// values of the worker's context, reports the job's deadline, and, as an
// afterFuncer, receives the one function that cancels its child (the
// handler's context) with DeadlineExceeded, which expire calls. Only
// context.WithCancelCause ever sees it, once, while the handler context
// is made; so Done, never closed, is there only to tell the context
// package that it can end.
type jobTimeout struct {
	values   context.Context // the worker's context, for its values (see Value)
	deadline time.Time
	expired  atomic.Bool
	end      func() // ends the handler's context (set while it is made, before the job is tracked)
}

// neverDone is the Done of every jobTimeout.
var neverDone = make(chan struct{})

func (t *jobTimeout) Deadline() (time.Time, bool) { return t.deadline, true }
func (t *jobTimeout) Done() <-chan struct{}       { return neverDone }

// Value is the worker context's value for key, except that the context
// package's own cancel contexts are hidden, as context.WithoutCancel hides
// them (it is not used because its Value allocates): the context package
// looks its parent's cancelCtx up this way, and Cause(t) must not find the
// worker's, which its stop cancels before handlers that outlive it time
// out, but report t's own DeadlineExceeded.
func (t *jobTimeout) Value(key any) any {
	v := t.values.Value(key)
	if v != nil && reflect.TypeOf(v) == cancelCtxType {
		return nil
	}
	return v
}

// cancelCtxType is the type of the context package's cancel contexts
// (what WithCancel returns, and what its contexts give for their key).
var cancelCtxType = func() reflect.Type {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return reflect.TypeOf(ctx)
}()

func (t *jobTimeout) Err() error {
	if t.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// AfterFunc is how the handler's context attaches to its parent: f cancels
// it with this context's Err and cause (DeadlineExceeded: Cause finds no
// cancelCtx above: see Value). The stop it
// returns stops nothing: a child that ended first is not cancelled again.
func (t *jobTimeout) AfterFunc(f func()) func() bool {
	if t.expired.Load() {
		go f()
		return keepAfterFunc
	}
	t.end = f
	return keepAfterFunc
}

func keepAfterFunc() bool { return false }

// expire ends the handler's context at its deadline.
func (t *jobTimeout) expire() {
	if t.expired.CompareAndSwap(false, true) && t.end != nil {
		t.end()
	}
}

// startJob gives a handler its context and adds it to the running ones,
// oldest first, arming the timeout timer when it is idle.
func (w *worker) startJob(rj *runningJob) {
	rj.timeout.values = w.values
	rj.timeout.deadline = rj.since.Add(w.opts.Timeout)
	rj.ctx, rj.cancel = context.WithCancelCause(&rj.timeout)
	w.mu.Lock()
	rj.prev = w.last
	if w.last == nil {
		w.first = rj
	} else {
		w.last.next = rj
	}
	w.last = rj
	w.n++
	if w.timing == nil {
		w.timing = rj
	}
	if !w.armed {
		w.armed = true
		w.timeouts.Reset(time.Until(rj.timeout.deadline))
	}
	cancelled := w.cancelled
	w.mu.Unlock()
	if cancelled { // started after the stop cancelled the handlers
		rj.cancel(context.Canceled)
	}
}

// stopJob forgets a handler that returned.
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
	if w.timing == rj {
		w.timing = rj.next
	}
	w.n--
	w.mu.Unlock()
}

// expireJobs is the timeout timer: it ends the contexts of the handlers
// past their Timeout and arms itself for the next. Every handler has the
// same Timeout, so the running list, oldest first, is also in deadline
// order (to within the moments between a handler's start and its place
// in the list): timing is the first whose deadline has not yet come. The
// timer may fire early, for a job that has ended since; it then only
// arms itself again.
func (w *worker) expireJobs() {
	now := time.Now()
	var due []*runningJob
	w.mu.Lock()
	for w.timing != nil && !w.timing.timeout.deadline.After(now) {
		due = append(due, w.timing)
		w.timing = w.timing.next
	}
	w.armed = w.timing != nil
	if w.armed {
		w.timeouts.Reset(w.timing.timeout.deadline.Sub(now))
	}
	w.mu.Unlock()
	for _, rj := range due {
		rj.timeout.expire()
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
