package alktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

func TestWorkJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("work-job")
		// Other jobs in every place a claim would look first.
		ahead, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{Priority: 9, MaxAttempts: 1})
		require.NoError(t, err)
		lapsed, err := q.Enqueue(ctx, welcome{User: 2}, store.EnqueueOpts{Priority: 9})
		require.NoError(t, err)
		claimed, err := q.Queue().Claim(ctx, "elsewhere", 2, time.Millisecond)
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		time.Sleep(5 * time.Millisecond) // both claims lapse: claimable again
		_, err = s.JobQueue[welcome]("neighbour").Enqueue(ctx, welcome{User: 3}, store.EnqueueOpts{})
		require.NoError(t, err)

		// The code under test enqueues a job due in an hour.
		id, err := q.Enqueue(ctx, welcome{User: 42}, store.EnqueueOpts{Delay: time.Hour})
		require.NoError(t, err)
		var seen []int64
		res := alktest.WorkJob(ctx, t, q, id, func(_ context.Context, j *store.Job, v welcome) error {
			seen = append(seen, j.ID)
			assert.Equal(t, welcome{User: 42}, v)
			return errors.New("smtp down")
		})
		assert.Equal(t, []int64{id}, seen)
		assert.Equal(t, alktest.Retried, res.Outcome)
		require.NotNil(t, res.Job)
		assert.Equal(t, 1, res.Job.Attempts)
		assert.Equal(t, "smtp down", res.Job.LastError)
		for _, other := range []int64{ahead, lapsed} {
			j, err := q.Queue().Job(ctx, other)
			require.NoError(t, err)
			assert.Equal(t, store.JobRunning, j.State, "job %d: left as it was", other)
			assert.Equal(t, "elsewhere", j.Worker)
			assert.Equal(t, 1, j.Attempts)
		}

		// A lapsed claim with attempts left is worked too.
		res = alktest.WorkJob(ctx, t, q, lapsed, func(context.Context, *store.Job, welcome) error { return nil })
		assert.Equal(t, alktest.Acked, res.Outcome)
		assert.Nil(t, res.Job)
	})
}

func TestWorkJobUndecodablePayload(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("raw-work")
		id, err := q.Queue().Enqueue(ctx, []byte("not json"), store.EnqueueOpts{})
		require.NoError(t, err)
		ran := false
		res := alktest.WorkJob(ctx, t, q, id, func(context.Context, *store.Job, welcome) error { ran = true; return nil })
		assert.False(t, ran, "the handler never sees a payload that does not decode")
		assert.ErrorIs(t, res.Err, store.ErrCodec)
		assert.Equal(t, alktest.Failed, res.Outcome)
		require.NotNil(t, res.Job)
		assert.Equal(t, store.JobDead, res.Job.State)
	})
}

// WorkJob says why a job cannot be worked, and changes nothing.
func TestWorkJobUnclaimable(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("unclaimable")
		nop := func(context.Context, *store.Job, welcome) error { t.Error("the handler ran"); return nil }
		workJob := func(id int64) string {
			return failed(func(tb testing.TB) { alktest.WorkJob(ctx, tb, q, id, nop) })
		}

		assert.Contains(t, workJob(12345), `queue "unclaimable" has no job 12345`)
		other, err := s.JobQueue[welcome]("other").Enqueue(ctx, welcome{}, store.EnqueueOpts{})
		require.NoError(t, err)
		assert.Contains(t, workJob(other), "has no job", "a job of another queue")

		running, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Queue().Claim(ctx, "busy-worker", 1, time.Hour)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		assert.Contains(t, workJob(running), `is running: worker "busy-worker" holds its claim until`)
		require.NoError(t, jobs[0].Fail(ctx, "gave up"))
		assert.Contains(t, workJob(running), "is dead: a finished job is not worked again")

		last, err := q.Enqueue(ctx, welcome{User: 4}, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		jobs, err = q.Queue().Claim(ctx, "busy-worker", 1, time.Hour)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		assert.Contains(t, workJob(last), "on its last attempt (1 of 1): once that claim lapses the job ends dead")

		expired, err := q.Enqueue(ctx, welcome{User: 2}, store.EnqueueOpts{ExpiresAt: time.Now().Add(-time.Second)})
		require.NoError(t, err)
		assert.Contains(t, workJob(expired), "past its ExpiresAt")

		paused, err := q.Enqueue(ctx, welcome{User: 3}, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Queue().Pause(ctx))
		msg := workJob(paused)
		assert.Contains(t, msg, `queue "unclaimable" is paused`)
		j, err := q.Queue().Job(ctx, paused)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		assert.Zero(t, j.Attempts)
	})
}

// Bad arguments fail before anything is enqueued or claimed.
func TestWorkBadArguments(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("bad-args")
		id, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
		require.NoError(t, err)
		assert.Contains(t, failed(func(tb testing.TB) { alktest.WorkJob(ctx, tb, q, id, nil) }), "nil handler")
		assert.Contains(t, failed(func(tb testing.TB) { alktest.Work(ctx, tb, q, welcome{User: 2}, store.EnqueueOpts{}, nil) }), "nil handler")
		assert.Contains(t, failed(func(tb testing.TB) {
			alktest.WorkJob(ctx, tb, nil, id, func(context.Context, *store.Job, welcome) error { return nil })
		}), "queue has no store")
		assert.Contains(t, failed(func(tb testing.TB) { alktest.RequireEnqueued[welcome](ctx, tb, nil, nil) }), "queue has no store")
		j := alktest.RequireEnqueued(ctx, t, q, nil)
		assert.Equal(t, id, j.ID)
		assert.Equal(t, store.JobPending, j.State)
		assert.Zero(t, j.Attempts)
		alktest.RequireNotEnqueued(ctx, t, q, alktest.Payload(welcome{User: 2}))
	})
}

// A handler whose job is cancelled while it runs: nothing is settled, and
// the result says the claim was lost. A transactional handler that cancels
// its own job in the transaction it was handed settles it, as
// Job.CancelTx would (attack56a F5: the cancel was rolled back with the
// handler's writes).
func TestWorkJobCancelledMeanwhile(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("cancelled")
		id, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
		require.NoError(t, err)
		res := alktest.WorkJob(ctx, t, q, id, func(ctx context.Context, j *store.Job, _ welcome) error {
			return q.Queue().Cancel(ctx, j.ID)
		})
		assert.NoError(t, res.Err)
		assert.Equal(t, alktest.ClaimLost, res.Outcome)
		require.NotNil(t, res.Job)
		assert.Equal(t, store.JobCancelled, res.Job.State)

		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		res = alktest.WorkTx(ctx, t, tx, q, welcome{User: 2}, store.EnqueueOpts{}, func(ctx context.Context, tx store.Tx, j *store.Job, _ welcome) error {
			return q.Queue().CancelTx(ctx, tx, j.ID)
		})
		assert.Equal(t, alktest.SettledByHandler, res.Outcome)
		require.NotNil(t, res.Job)
		assert.Equal(t, store.JobCancelled, res.Job.State)
	})
}

// Tests working their own jobs on one queue at once: each works exactly
// its job, never another's.
func TestWorkJobConcurrently(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("shared")
		const workers, rounds = 8, 15
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					want := welcome{User: w*1000 + r}
					msg := failed(func(tb testing.TB) {
						id, err := q.Enqueue(ctx, want, store.EnqueueOpts{Priority: r % 3})
						if !assert.NoError(t, err) {
							return
						}
						alktest.RequireEnqueued(ctx, tb, q, alktest.Payload(want))
						res := alktest.WorkJob(ctx, tb, q, id, func(_ context.Context, j *store.Job, v welcome) error {
							assert.Equal(t, id, j.ID)
							assert.Equal(t, want, v)
							return nil
						})
						assert.Equal(t, alktest.Acked, res.Outcome)
					})
					assert.Empty(t, msg)
				}
			}()
		}
		wg.Wait()
		alktest.RequireNotEnqueued(ctx, t, q, nil)
	})
}
