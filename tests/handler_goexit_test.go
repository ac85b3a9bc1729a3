package tests

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAHandlerExitingItsGoroutineFailed: a handler that calls
// runtime.Goexit (what t.FailNow does when a test calls it from a handler)
// failed, as one that panics: Work and WorkTx settle its job as a failed
// handler's (retried after its backoff, the error naming the Goexit),
// Consume and ConsumeTx deliver its event again after RetryDelay, and the
// loop goes on with the next job or event. Before, the job stayed running
// (the event in flight) until the loop's stop, whose wait for the handler
// then ran out its 5 s; a group member's loop had ended with the goroutine.
//
// Each job's or event's first run exits its goroutine, its second returns
// nil. What a user relies on: the first job completes on its second
// attempt, its first attempt's error names the Goexit; the second job runs
// and completes too (the loop went on); each event comes twice, the
// failure is logged, the group ends with no lag and a second event comes
// through; the stop returns within 5 s (its wait for a lost handler is 5 s,
// the Grace 30 s: before, the stop took one of those).
func TestAHandlerExitingItsGoroutineFailed(t *testing.T) {
	forms := []string{"Work", "WorkTx", "Consume", "ConsumeTx"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		s := e.open(t)
		if form < 2 {
			goexitJobs(t, s, form == 1, runtime.Goexit)
		} else {
			goexitEvents(t, s, form == 3, runtime.Goexit)
		}
	})
}

// TestAHandlerExitingThenPanickingInADeferFailed: as
// TestAHandlerExitingItsGoroutineFailed, for a handler that exits its
// goroutine and one of whose own deferred calls then panics (a cleanup
// closing a closed channel, say): the recover of the store's handler call
// takes the panic, and Go goes on with the Goexit. That handler failed
// too. Before (review60a F1, F2), nothing was settled: the job stayed
// running, and with Concurrency 1 the worker never ran the next job (its
// slot was lost for good); WorkTx's transaction stayed open, on SQLite
// holding the writer; the event was never delivered again; the stop
// waited out its Grace.
func TestAHandlerExitingThenPanickingInADeferFailed(t *testing.T) {
	forms := []string{"Work", "WorkTx", "Consume", "ConsumeTx"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		s := e.open(t)
		if form < 2 {
			goexitJobs(t, s, form == 1, exitThenPanic)
		} else {
			goexitEvents(t, s, form == 3, exitThenPanic)
		}
	})
}

// exitThenPanic exits its goroutine, and a deferred call of its own then
// panics.
func exitThenPanic() {
	defer func() { panic("a cleanup panicked while the handler exited") }()
	runtime.Goexit()
}

// stopBound is how long a stop may take once nothing is in flight: far
// above what it needs, below the 5 s it waited for a handler that exited.
const stopBound = 5 * time.Second

// goexitJobs: each job's first run calls exit (it exits the goroutine).
func goexitJobs(t *testing.T, s *store.Store, inTx bool, exit func()) {
	c := ctx(t)
	q := s.Queue("goexit")
	require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
	var runs atomic.Int64
	runsOf := map[int64]int{} // one handler runs at a time (Concurrency 1)
	handle := func(j *store.Job) error {
		runs.Add(1)
		runsOf[j.ID]++
		if runsOf[j.ID] == 1 {
			exit()
		}
		return nil
	}
	opts := store.WorkOpts{Concurrency: 1, Grace: 30 * time.Second, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}
	var w *store.Worker
	var err error
	if inTx {
		w, err = q.NewWorkerTx(opts, func(_ context.Context, _ store.Tx, j *store.Job) error { return handle(j) })
	} else {
		w, err = q.NewWorker(opts, func(_ context.Context, j *store.Job) error { return handle(j) })
	}
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(c) }()

	completed := func(id int64) *store.Job {
		var j *store.Job
		require.Eventually(t, func() bool {
			var err error
			j, err = q.Job(c, id)
			require.NoError(t, err)
			return j.State == store.JobCompleted
		}, 30*time.Second, 10*time.Millisecond, "job %d completes on its second attempt", id)
		return j
	}
	for range 2 {
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		j := completed(id)
		assert.Equal(t, 2, j.Attempts, "job %d: its first run failed, its second completed it", id)
		if assert.Len(t, j.Errors, 1, "job %d: one failed attempt", id) {
			assert.Equal(t, 1, j.Errors[0].Attempt)
			assert.Contains(t, j.Errors[0].Error, "runtime.Goexit", "job %d: the first attempt's error names the Goexit", id)
		}
	}
	assert.EqualValues(t, 4, runs.Load(), "each job ran twice")

	began := time.Now()
	require.NoError(t, w.Stop(c), "nothing was left behind")
	assert.Less(t, time.Since(began), stopBound, "the stop waited for no handler")
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run has not returned 30 s after its Stop returned")
	}
}

// goexitEvents: each event's first run calls exit (it exits the goroutine).
func goexitEvents(t *testing.T, s *store.Store, inTx bool, exit func()) {
	c := ctx(t)
	st := s.Stream("goexit")
	g := st.Group("g")
	var runs atomic.Int64
	runsOf := map[int64]int{} // one handler runs at a time
	delivered := make(chan int64, 8)
	handle := func(ev store.Event) error {
		runs.Add(1)
		runsOf[ev.Offset]++
		delivered <- ev.Offset
		if runsOf[ev.Offset] == 1 {
			exit()
		}
		return nil
	}
	logs := &capturedLogs{}
	opts := store.GroupOpts{Partitions: 1, RetryDelay: 10 * time.Millisecond, Grace: 30 * time.Second, Logger: slog.New(logs)}
	wc, stop := context.WithCancel(c)
	defer stop()
	ran := make(chan error, 1)
	go func() {
		if inTx {
			ran <- g.ConsumeTx(wc, opts, func(_ context.Context, _ store.Tx, ev store.Event) error { return handle(ev) })
		} else {
			ran <- g.Consume(wc, opts, func(_ context.Context, ev store.Event) error { return handle(ev) })
		}
	}()

	for i := range 2 {
		off, err := st.Publish(c, []byte("ev"))
		require.NoError(t, err)
		for n := range 2 {
			select {
			case got := <-delivered:
				require.Equal(t, off, got, "event %d, delivery %d", i, n+1)
			case <-time.After(30 * time.Second):
				t.Fatalf("event %d: delivery %d of 2 never came (its first handler exited its goroutine)", i, n+1)
			}
		}
		require.Eventually(t, func() bool {
			gs, err := g.Stats(c)
			return err == nil && gs.Lag == 0
		}, 30*time.Second, 10*time.Millisecond, "event %d committed after its second delivery", i)
	}
	failed := logs.matching("group handler failed")
	if assert.Len(t, failed, 2, "each Goexit logged once as the handler's failure") {
		for _, r := range failed {
			assert.Contains(t, r["error"], "runtime.Goexit")
		}
	}

	began := time.Now()
	stop()
	select {
	case err := <-ran:
		require.NoError(t, err, "the loop returns nil once its context is cancelled")
		assert.Less(t, time.Since(began), stopBound, "the stop waited for no handler")
	case <-time.After(30 * time.Second):
		t.Fatal("the loop has not returned 30 s after its context was cancelled")
	}
	assert.EqualValues(t, 4, runs.Load(), "each event was handled twice")
}

// TestRunJobExitingThenPanickingInADeferFailed: RunJob and RunJobTx, on
// the caller's goroutine, with a handler that exits its goroutine and one
// of whose deferred calls then panics: the job is settled as a failed
// handler's before the Goexit goes on up the caller's goroutine, its
// heartbeat and its transaction end, and the store closes at once with
// nil. Before (review60a F2), nothing was settled: RunJob's heartbeat
// outlived the call and kept the job claimed; RunJobTx's transaction was
// never ended (on SQLite it held the writer: every write of the process
// waited), and Close took 60 s and failed ("transactions still open").
func TestRunJobExitingThenPanickingInADeferFailed(t *testing.T) {
	eachEngineEachForm(t, []string{"RunJob", "RunJobTx"}, func(t *testing.T, e *engineEnv, form int) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("rj-exit")
		other := s.Queue("other")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "me", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		opts := store.WorkOpts{Visibility: time.Minute, Backoff: func(int) time.Duration { return time.Hour }}
		returned := false
		done := make(chan struct{})
		go func() {
			defer close(done)
			if form == 1 {
				_, _ = store.RunJobTx(c, jobs[0], opts, func(ctx context.Context, tx store.Tx, _ *store.Job) error {
					_, err := other.EnqueueTx(ctx, tx, []byte("rolled back"), store.EnqueueOpts{})
					if err == nil {
						exitThenPanic()
					}
					return err
				})
			} else {
				_, _ = store.RunJob(c, jobs[0], opts, func(context.Context, *store.Job) error { exitThenPanic(); return nil })
			}
			returned = true
		}()
		<-done
		assert.False(t, returned, "the Goexit goes on up the caller's goroutine")

		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State, "settled as a failed handler's: retried")
		if assert.Len(t, j.Errors, 1) {
			assert.Contains(t, j.Errors[0].Error, "runtime.Goexit")
		}
		wctx, cancel := context.WithTimeout(c, 10*time.Second)
		defer cancel()
		_, err = other.Enqueue(wctx, []byte("after"), store.EnqueueOpts{})
		require.NoError(t, err, "the writer is free")
		st, err := other.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, st.Ready, "the handler's write rolled back")

		began := time.Now()
		require.NoError(t, s.Close(), "nothing was left open")
		assert.Less(t, time.Since(began), stopBound)
	})
}

// TestAWorkerGoesOnAfterAGoexitInItsSettle: a Goexit in code of the
// user's that a worker runs on the handler's goroutine after the handler
// returned (its WorkOpts.Backoff, a result function of Job.OnResult) or
// on its ack loop (a result function of an acked job): the worker goes on
// running jobs, with Concurrency 1, and its stop returns at once with
// nil. A result function's Goexit is contained (it runs on a goroutine of
// its own) and logged. Before (review60a F1, F3, F4): the worker never
// ran the next job (its one slot was lost), or, on the ack loop, the jobs
// after it were never acked and the stop hung, blaming a lock.
func TestAWorkerGoesOnAfterAGoexitInItsSettle(t *testing.T) {
	forms := []string{"Backoff", "WorkTx Backoff", "OnResult failed", "OnResult acked"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		logs := &capturedLogs{}
		s := e.open(t, store.WithLogger(slog.New(logs)))
		c := ctx(t)
		q := s.Queue("settle-exit")
		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
		var exited atomic.Bool
		exitOnce := func() {
			if exited.CompareAndSwap(false, true) {
				runtime.Goexit()
			}
		}
		opts := store.WorkOpts{Concurrency: 1, Grace: 30 * time.Second, Backoff: func(int) time.Duration { return time.Millisecond }}
		if form < 2 {
			opts.Backoff = func(int) time.Duration { exitOnce(); return time.Millisecond }
		}
		var first atomic.Bool
		handle := func(j *store.Job) error {
			if form >= 2 {
				j.OnResult(func(store.JobResult) { exitOnce() })
			}
			if form != 3 && first.CompareAndSwap(false, true) {
				return errors.New("the first run fails")
			}
			return nil
		}
		var w *store.Worker
		var err error
		if form == 1 {
			w, err = q.NewWorkerTx(opts, func(_ context.Context, _ store.Tx, j *store.Job) error { return handle(j) })
		} else {
			w, err = q.NewWorker(opts, func(_ context.Context, j *store.Job) error { return handle(j) })
		}
		require.NoError(t, err)
		ran := make(chan error, 1)
		go func() { ran <- w.Run(c) }()

		// The first job's run exits in its settle (or its report); the
		// next ones run and complete.
		_, err = q.Enqueue(c, []byte("first"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.Eventually(t, exited.Load, 30*time.Second, time.Millisecond, "the Goexit came")
		var ids []int64
		for range 3 {
			id, err := q.Enqueue(c, []byte("next"), store.EnqueueOpts{})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		for _, id := range ids {
			require.Eventually(t, func() bool {
				j, err := q.Job(c, id)
				require.NoError(t, err)
				return j.State == store.JobCompleted
			}, 30*time.Second, 10*time.Millisecond, "job %d runs and completes after the Goexit", id)
		}
		if form >= 2 {
			assert.Len(t, logs.matching("result function exited its goroutine"), 1, "the result function's Goexit is logged")
		}

		began := time.Now()
		sc, cancel := context.WithTimeout(c, 30*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sc), "nothing was left behind")
		assert.Less(t, time.Since(began), stopBound, "the stop waited for no handler")
		require.NoError(t, <-ran)
	})
}
