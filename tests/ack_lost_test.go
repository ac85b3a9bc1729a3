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

// TestWorkAckReportsEachJobOfABatchWithALostClaim: when Work's batched ack
// finds one claim of the batch taken by another worker, the other jobs
// are acked and reported acked, and that one is reported lost, found held
// by the other worker (SQLite's worker acks count the rows they settle,
// and acks again returning the ids when the count falls short). The
// handlers all finish together after the theft, so their jobs are acked
// in one batch or a few; the outcome is the same whichever.
func TestWorkAckReportsEachJobOfABatchWithALostClaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		// A second process whose clock runs two hours ahead: the first's
		// claims (an hour of visibility) have lapsed for it.
		later := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		const n = 6
		q := s.Queue("mixed")
		for i := range n {
			_, err := q.Enqueue(c, []byte(fmt.Sprint(i)), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		var mu sync.Mutex
		results := map[int64]store.JobResult{}
		var stolen int64
		started, stole := make(chan int64, n), make(chan struct{})
		wctx, stop := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: n, Visibility: time.Hour}, func(ctx context.Context, j *store.Job) error {
				j.OnResult(func(r store.JobResult) {
					mu.Lock()
					results[j.ID] = r
					mu.Unlock()
				})
				started <- j.ID
				<-stole
				return nil
			})
		}()
		for range n {
			select {
			case <-started:
			case <-c.Done():
				t.Fatal("handlers did not start")
			}
		}
		// Every job runs: the thief takes the first in claim order.
		jobs, err := later.Queue("mixed").Claim(c, "thief", 1, time.Hour)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		stolen = jobs[0].ID
		close(stole)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(results) == n
		}, 30*time.Second, time.Millisecond)
		stop()
		require.NoError(t, <-done)

		mu.Lock()
		defer mu.Unlock()
		for id, r := range results {
			if id == stolen {
				assert.Equal(t, store.OutcomeClaimLost, r.Outcome, "job %d", id)
				assert.Equal(t, store.JobRunning, r.State, "job %d: found held by the thief", id)
				continue
			}
			assert.Equal(t, store.OutcomeAcked, r.Outcome, "job %d", id)
			assert.Equal(t, store.JobCompleted, r.State, "job %d", id)
			assert.NoError(t, r.SettleErr, "job %d", id)
			_, err := q.Job(c, id)
			assert.ErrorIs(t, err, store.ErrNotFound, "job %d acked", id)
		}
		j, err := q.Job(c, stolen)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, j.State)
		assert.Equal(t, "thief", j.Worker)
	})
}
