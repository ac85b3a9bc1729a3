package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestOnResultCallsEveryFunctionOnce: every function a run registered
// with Job.OnResult (the first is kept apart from the others) is called
// once, in the order registered, with the same result, for a job Work
// acked in a batch and for one it snoozed; a job's next run starts with
// none of the last run's.
func TestOnResultCallsEveryFunctionOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("onresult")
		var mu sync.Mutex
		runs := map[string]int{}       // by payload
		calls := map[string][]string{} // by payload and run: the functions called, in order
		results := map[string][]store.Outcome{}
		var settled atomic.Int64
		h := func(_ context.Context, j *store.Job) error {
			mu.Lock()
			runs[string(j.Payload)]++
			n := runs[string(j.Payload)]
			mu.Unlock()
			run := fmt.Sprintf("%s/%d", j.Payload, n)
			for _, name := range []string{"a", "b", "c"} {
				require.True(t, j.OnResult(func(res store.JobResult) {
					mu.Lock()
					calls[run] = append(calls[run], name)
					results[run] = append(results[run], res.Outcome)
					mu.Unlock()
					if name == "c" {
						settled.Add(1)
					}
				}))
			}
			if string(j.Payload) == "retry" && n == 1 {
				return store.Snooze(0)
			}
			return nil
		}
		for _, p := range []string{"ack", "retry"} {
			_, err := q.Enqueue(c, []byte(p), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		wctx, cancel := context.WithCancel(c)
		done := make(chan error, 1)
		go func() { done <- q.Work(wctx, store.WorkOpts{Concurrency: 4}, h) }()
		require.Eventually(t, func() bool { return settled.Load() == 3 }, 30*time.Second, 5*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		abc := []string{"a", "b", "c"}
		assert.Equal(t, map[string][]string{"ack/1": abc, "retry/1": abc, "retry/2": abc}, calls)
		acked := []store.Outcome{store.OutcomeAcked, store.OutcomeAcked, store.OutcomeAcked}
		assert.Equal(t, map[string][]store.Outcome{"ack/1": acked, "retry/2": acked,
			"retry/1": {store.OutcomeSnoozed, store.OutcomeSnoozed, store.OutcomeSnoozed}}, results)
	})
}
