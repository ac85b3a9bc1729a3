package alktest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

// fill enqueues n jobs of payload v on q, in batches.
func fill(t *testing.T, q *store.JobQueue[welcome], n int, v welcome) {
	t.Helper()
	ctx := context.Background()
	for n > 0 {
		batch := make([]store.NewJob, min(n, 2000))
		for i := range batch {
			batch[i].Payload = []byte(`{"user":` + itoa(v.User) + `,"lang":"` + v.Lang + `"}`)
		}
		_, err := q.Queue().EnqueueMany(ctx, batch)
		require.NoError(t, err)
		n -= len(batch)
	}
}

func itoa(i int) string { return time.Duration(i).String()[:len(time.Duration(i).String())-2] }

// Issue 25 item 4: the assertions read every job of the queue, not the
// first 10,000 of each state.
func TestRequireEnqueuedBeyondTenThousandJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("big")
		fill(t, q, store.MaxJobsLimit, welcome{User: 1})
		id, err := q.Enqueue(ctx, welcome{User: 2}, store.EnqueueOpts{})
		require.NoError(t, err)
		want := alktest.Payload(welcome{User: 2})

		assert.Equal(t, id, alktest.RequireEnqueued(ctx, t, q, want).ID)
		msg := failed(func(tb testing.TB) { alktest.RequireNotEnqueued(ctx, tb, q, want) })
		assert.Contains(t, msg, "matches, want none")
		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		assert.Equal(t, id, alktest.RequireEnqueuedTx(ctx, t, tx, q, want).ID)
	})
}

// Issue 25 item 5: a job moving between states while the assertion reads
// is still seen. A worker keeps claiming and snoozing the job (running,
// pending, running, ...) while RequireEnqueued runs many times.
func TestRequireEnqueuedSeesJobMovingBetweenStates(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("flip")
		_, err := q.Enqueue(ctx, welcome{User: 5}, store.EnqueueOpts{})
		require.NoError(t, err)
		stop := make(chan struct{})
		var flips atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				jobs, err := q.Queue().Claim(ctx, "flipper", 1, time.Minute)
				if !assert.NoError(t, err) {
					return
				}
				for _, j := range jobs {
					assert.NoError(t, j.Snooze(ctx, 0))
					flips.Add(1)
				}
			}
		}()
		missed := 0
		for range 300 {
			msg := failed(func(tb testing.TB) { alktest.RequireEnqueued(ctx, tb, q, alktest.Payload(welcome{User: 5})) })
			if msg != "" {
				missed++
			}
		}
		close(stop)
		wg.Wait()
		assert.Zero(t, missed, "RequireEnqueued missed the job %d of 300 times", missed)
		assert.Positive(t, flips.Load())
	})
}

// Issue 25 item 7: a nil Match matches every job, those whose payload does
// not decode included.
func TestNilMatchMatchesUndecodablePayload(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("raw")
		id, err := q.Queue().Enqueue(ctx, []byte("not json"), store.EnqueueOpts{})
		require.NoError(t, err)
		assert.Equal(t, id, alktest.RequireEnqueued(ctx, t, q, nil).ID)
		msg := failed(func(tb testing.TB) { alktest.RequireNotEnqueued(ctx, tb, q, nil) })
		assert.Contains(t, msg, "want none")
	})
}

// Issue 25 item 8: Work runs the job it enqueued, whatever else the queue
// holds, and leaves the other jobs as they were.
func TestWorkLeavesOtherJobsAlone(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("busy")
		other, err := q.Enqueue(ctx, welcome{User: 99}, store.EnqueueOpts{Priority: 5, MaxAttempts: 1})
		require.NoError(t, err)
		var ran []welcome
		res := alktest.Work(ctx, t, q, welcome{User: 7}, store.EnqueueOpts{},
			func(_ context.Context, _ *store.Job, v welcome) error { ran = append(ran, v); return nil })
		assert.Equal(t, []welcome{{User: 7}}, ran)
		assert.Equal(t, alktest.Acked, res.Outcome)
		j, err := q.Queue().Job(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State, "the job in the way was not claimed")
		assert.Zero(t, j.Attempts, "nor did it spend an attempt")
	})
}

// Issue 25 item 8: on a paused queue Work says the queue is paused, and
// leaves nothing behind.
func TestWorkOnPausedQueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("paused")
		require.NoError(t, q.Queue().Pause(ctx))
		ran := false
		msg := failed(func(tb testing.TB) {
			alktest.Work(ctx, tb, q, welcome{User: 7}, store.EnqueueOpts{},
				func(context.Context, *store.Job, welcome) error { ran = true; return nil })
		})
		assert.Contains(t, msg, "paused")
		assert.NotContains(t, msg, "delay")
		assert.False(t, ran)
		jobs, err := q.Queue().Jobs(ctx, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		assert.Empty(t, jobs, "the job Work enqueued is gone again")
	})
}

// The store forms read without the writer slot: they work while a
// transaction of the test is open on the same goroutine (on SQLite they
// used to wait for that transaction, which never ended), and see only what
// was committed.
func TestRequireEnqueuedBesideOpenTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		q := s.JobQueue[welcome]("beside")
		_, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
		require.NoError(t, err)
		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		_, err = q.EnqueueTx(ctx, tx, welcome{User: 2}, store.EnqueueOpts{})
		require.NoError(t, err)
		alktest.RequireEnqueued(ctx, t, q, alktest.Payload(welcome{User: 1}))
		alktest.RequireNotEnqueued(ctx, t, q, alktest.Payload(welcome{User: 2}))
		alktest.RequireEnqueuedTx(ctx, t, tx, q, alktest.Payload(welcome{User: 2}))
	})
}
