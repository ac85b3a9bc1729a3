package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A Work handler's context is one context a job, ended at its Timeout by
// the worker's shared timer rather than by a timer of its own (issue 18).
// These tests hold it to what context.WithTimeout gave.

type ctxKey struct{}

// contextAtTimeout is what a handler saw of its context (and contexts
// derived from it) once its Timeout ended it.
type contextAtTimeout struct {
	id                   int64
	started, ended       time.Time
	claimedAt            time.Time // the claim came before the handler's start
	deadline             time.Time
	hasDeadline          bool
	err, cause           error
	childErr, childCause error // context.WithTimeout(ctx, an hour)
	deepErr, deepCause   error // WithCancel of a WithValue of ctx
	afterFuncRan         bool
	value, deepValue     any // the Work context's value, through ctx and the deep child
	outcome              store.Outcome
}

// waitForTimeout is a handler that waits for its context to end, records
// what it saw, and returns ctx.Err(); quick jobs (by id) return at once.
func waitForTimeout(seen chan<- contextAtTimeout, quick map[int64]bool) store.Handler {
	return func(ctx context.Context, j *store.Job) error {
		if quick[j.ID] {
			return nil
		}
		s := contextAtTimeout{id: j.ID, started: time.Now(), claimedAt: *j.ClaimedAt}
		s.deadline, s.hasDeadline = ctx.Deadline()
		child, cancelChild := context.WithTimeout(ctx, time.Hour)
		defer cancelChild()
		deep, cancelDeep := context.WithCancel(context.WithValue(ctx, struct{ deep bool }{}, 1))
		defer cancelDeep()
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		<-ctx.Done()
		s.ended = time.Now()
		s.err, s.cause = ctx.Err(), context.Cause(ctx)
		<-child.Done()
		s.childErr, s.childCause = child.Err(), context.Cause(child)
		<-deep.Done()
		s.deepErr, s.deepCause = deep.Err(), context.Cause(deep)
		<-ran
		s.afterFuncRan = true
		s.value, s.deepValue = ctx.Value(ctxKey{}), deep.Value(ctxKey{})
		s.outcome = store.HandlerOutcome(ctx, j, ctx.Err())
		seen <- s
		return ctx.Err()
	}
}

func checkTimedOut(t *testing.T, s contextAtTimeout, timeout time.Duration) {
	t.Helper()
	require.True(t, s.hasDeadline, "job %d: the context has a deadline", s.id)
	assert.False(t, s.deadline.After(s.started.Add(timeout)), "job %d: the deadline is its start plus Timeout at most", s.id)
	// The worker rounds deadlines down by a thousandth of the Timeout at
	// most, so that handlers starting together share a timer.
	assert.False(t, s.deadline.Before(s.claimedAt.Add(timeout-timeout/1000)),
		"job %d: the deadline is its claim plus Timeout, less a thousandth of it, at least", s.id)
	assert.False(t, s.ended.Before(s.deadline), "job %d: the context ended at its deadline, not before", s.id)
	assert.Equal(t, context.DeadlineExceeded, s.err, "job %d: Err", s.id)
	assert.Equal(t, context.DeadlineExceeded, s.cause, "job %d: Cause", s.id)
	assert.Equal(t, context.DeadlineExceeded, s.childErr, "job %d: a WithTimeout child's Err", s.id)
	assert.Equal(t, context.DeadlineExceeded, s.childCause, "job %d: a WithTimeout child's Cause", s.id)
	assert.Equal(t, context.DeadlineExceeded, s.deepErr, "job %d: a WithCancel of a WithValue child's Err", s.id)
	assert.Equal(t, context.DeadlineExceeded, s.deepCause, "job %d: a WithCancel of a WithValue child's Cause", s.id)
	assert.True(t, s.afterFuncRan, "job %d: context.AfterFunc ran", s.id)
	assert.Equal(t, "work's value", s.value, "job %d: the Work context's values reach the handler", s.id)
	assert.Equal(t, "work's value", s.deepValue, "job %d: and contexts derived from its context", s.id)
	assert.Equal(t, store.OutcomeRetried, s.outcome, "job %d: HandlerOutcome reads a timeout as a failure", s.id)
}

// TestHandlerContextEndsAtItsTimeout: every handler's context ends at its
// own deadline (never before), with DeadlineExceeded as its Err and Cause
// and those of the contexts derived from it, and carries the Work
// context's values: handlers one after another (the timer set again after
// it fired, and after it was set for a quick job that ended first) and
// side by side (several ended by one firing), and the job is retried.
func TestHandlerContextEndsAtItsTimeout(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		const timeout = 200 * time.Millisecond
		never := func(int) time.Duration { return time.Hour }
		wctx := context.WithValue(c, ctxKey{}, "work's value")
		for _, concurrency := range []int{1, 3} {
			q := s.Queue(fmt.Sprintf("timeouts-%d", concurrency))
			quick, err := q.Enqueue(c, nil, store.EnqueueOpts{Priority: 1}) // runs first
			require.NoError(t, err)
			var slow []int64
			for range 3 {
				id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
				require.NoError(t, err)
				slow = append(slow, id)
			}
			seen := make(chan contextAtTimeout, len(slow))
			wc, stop := context.WithCancel(wctx)
			done := make(chan error, 1)
			go func() {
				done <- q.Work(wc, store.WorkOpts{Concurrency: concurrency, Timeout: timeout, Backoff: never, PollInterval: noPoll},
					waitForTimeout(seen, map[int64]bool{quick: true}))
			}()
			for range slow {
				select {
				case got := <-seen:
					checkTimedOut(t, got, timeout)
				case <-c.Done():
					t.Fatal("a handler's context did not end at its Timeout")
				}
			}
			stop()
			require.NoError(t, <-done)
			for _, id := range slow {
				j, err := q.Job(c, id)
				require.NoError(t, err)
				assert.Equal(t, store.JobPending, j.State, "job %d was retried", id)
				assert.Equal(t, 1, j.Attempts, "job %d spent its attempt", id)
				assert.Contains(t, j.LastError, context.DeadlineExceeded.Error())
			}
		}
	})
}

// TestHandlerTimeoutAfterTheStopSaysDeadline: a handler that outlives its
// worker's stop (within Grace) and then reaches its Timeout sees
// DeadlineExceeded as its context's Err and Cause, not the stop's
// cancellation of the Work context (that would read as a release), and
// its job is retried with its attempt spent. The handler cancels the Work
// context itself, so the stop comes before the timeout; a run where the
// timeout came first anyway (a machine stalled for the whole Timeout) is
// tried again.
func TestHandlerTimeoutAfterTheStopSaysDeadline(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("timeout-after-stop")
		const timeout = time.Second
		never := func(int) time.Duration { return time.Hour }
		for try := 0; ; try++ {
			require.Less(t, try, 5, "the stop never came before the timeout")
			id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
			require.NoError(t, err)
			wc, stop := context.WithCancel(context.WithValue(c, ctxKey{}, "work's value"))
			defer stop()
			seen := make(chan contextAtTimeout, 1)
			inOrder := true
			handler := waitForTimeout(seen, nil)
			err = q.Work(wc, store.WorkOpts{Concurrency: 1, Timeout: timeout, Grace: time.Minute, Backoff: never, PollInterval: noPoll},
				func(ctx context.Context, j *store.Job) error {
					stop() // the worker stops claiming; this handler has Grace to finish
					inOrder = ctx.Err() == nil
					return handler(ctx, j)
				})
			require.NoError(t, err)
			got := <-seen
			if !inOrder {
				continue
			}
			checkTimedOut(t, got, timeout)
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobPending, j.State)
			assert.Equal(t, 1, j.Attempts, "retried with its attempt spent, not released")
			assert.Contains(t, j.LastError, context.DeadlineExceeded.Error())
			return
		}
	})
}

// TestHandlerContextEndsWithItsRun: a handler's context ends when its run
// does (a goroutine it left behind sees it cancelled), with Canceled, not
// a timeout or a lost claim.
func TestHandlerContextEndsWithItsRun(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("run-ends")
		kept := make(chan context.Context, 1)
		runWork(t, q, store.WorkOpts{PollInterval: noPoll}, func(ctx context.Context, _ *store.Job) error {
			assert.NoError(t, ctx.Err())
			kept <- ctx
			return nil
		})
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		hctx := <-kept
		select {
		case <-hctx.Done():
		case <-c.Done():
			t.Fatal("the handler's context outlived its run")
		}
		assert.Equal(t, context.Canceled, hctx.Err())
		assert.Equal(t, context.Canceled, context.Cause(hctx))
	})
}

// TestEveryClaimedJobStartsBesideBlockedHandlers: the handler goroutines
// take a claim's jobs from a queue, each calling the next goroutine before
// it runs its own job; no job waits behind a handler that blocks. Every
// handler here blocks until all of them run at once, which they can only
// do if each job got a goroutine of its own; and no more than Concurrency
// run at once. Rounds of them, so that the goroutines of a round are
// called again (from their wait) for the next.
func TestEveryClaimedJobStartsBesideBlockedHandlers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("all-at-once")
		const concurrency, rounds = 8, 3
		var mu sync.Mutex
		running, most, started := 0, 0, 0
		var round chan struct{}
		roundDone := make(chan struct{}, rounds)
		stop := runWork(t, q, store.WorkOpts{Concurrency: concurrency, PollInterval: noPoll}, func(ctx context.Context, _ *store.Job) error {
			mu.Lock()
			running++
			most = max(most, running)
			started++
			if started%concurrency == 0 {
				close(round)
			}
			r := round
			mu.Unlock()
			select {
			case <-r: // every handler of the round runs
			case <-ctx.Done():
			}
			mu.Lock()
			running--
			if running == 0 {
				roundDone <- struct{}{}
			}
			mu.Unlock()
			return ctx.Err()
		})
		for range rounds {
			mu.Lock()
			round = make(chan struct{})
			mu.Unlock()
			_, err := q.EnqueueMany(c, make([]store.NewJob, concurrency))
			require.NoError(t, err)
			select {
			case <-roundDone:
			case <-c.Done():
				t.Fatal("a claimed job waited behind blocked handlers")
			}
		}
		stop() // and the last acks are sent
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, concurrency*rounds, started)
		assert.Equal(t, concurrency, most, "never more than Concurrency at once")
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Ready+st.Running+st.Dead, "every job acked")
	})
}
