package tests

import (
	"context"
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
			goexitJobs(t, s, form == 1)
		} else {
			goexitEvents(t, s, form == 3)
		}
	})
}

// stopBound is how long a stop may take once nothing is in flight: far
// above what it needs, below the 5 s it waited for a handler that exited.
const stopBound = 5 * time.Second

func goexitJobs(t *testing.T, s *store.Store, inTx bool) {
	c := ctx(t)
	q := s.Queue("goexit")
	require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
	var runs atomic.Int64
	runsOf := map[int64]int{} // one handler runs at a time (Concurrency 1)
	handle := func(j *store.Job) error {
		runs.Add(1)
		runsOf[j.ID]++
		if runsOf[j.ID] == 1 {
			runtime.Goexit()
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

func goexitEvents(t *testing.T, s *store.Store, inTx bool) {
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
			runtime.Goexit()
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
