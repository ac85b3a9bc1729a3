package tests

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// runWork starts q.Work in the background and returns a stop function that
// cancels it and waits for it to return.
func runWork(t *testing.T, q *store.Queue, opts store.WorkOpts, h store.Handler) (stop func()) {
	t.Helper()
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- q.Work(c, opts, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, store.ErrClosed) { // the store may have closed first
				require.NoError(t, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestWorkDrainsThousandsOfJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("drain")
		c := ctx(t)
		total := 10000
		if e.name == "lite" {
			// The writer slot serializes claims and acks on SQLite, so there is
			// no claim race to provoke; a thousand jobs still take 20+ claim
			// and ack cycles through Work's batching, at a tenth of the cost
			// (SQLite is Go code, slowed ~40x by -race).
			total = 1000
		}
		batch := make([]store.NewJob, 1000)
		for i := 0; i < total; i += len(batch) {
			_, err := q.EnqueueMany(c, batch)
			require.NoError(t, err)
		}
		var handled atomic.Int64
		var mu sync.Mutex
		seen := map[int64]bool{}
		runWork(t, q, store.WorkOpts{Concurrency: 50}, func(ctx context.Context, j *store.Job) error {
			mu.Lock()
			seen[j.ID] = true
			mu.Unlock()
			handled.Add(1)
			return nil
		})
		require.Eventually(t, func() bool {
			st, err := q.Stats(c)
			require.NoError(t, err)
			return st == store.QueueStats{}
		}, 90*time.Second, 5*time.Millisecond, "every job acked and removed")
		mu.Lock()
		assert.Len(t, seen, total)
		mu.Unlock()
		assert.EqualValues(t, total, handled.Load(), "no job ran twice")
	})
}

func TestWorkRetriesWithGrowingDelaysThenAcks(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("flaky")
		c := ctx(t)
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		type attempt struct {
			n              int
			claimed, runAt time.Time
			errors         []store.AttemptError
		}
		var mu sync.Mutex
		var attempts []attempt
		backoff := func(n int) time.Duration { return time.Duration(n) * 100 * time.Millisecond }
		done := make(chan struct{})
		runWork(t, q, store.WorkOpts{Concurrency: 2, Backoff: backoff}, func(ctx context.Context, j *store.Job) error {
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, attempt{j.Attempts, *j.ClaimedAt, j.RunAt, j.Errors})
			if j.Attempts <= 2 {
				return errors.New("not yet")
			}
			close(done)
			return nil
		})
		select {
		case <-done:
		case <-c.Done():
			t.Fatal("the job never succeeded")
		}
		require.Eventually(t, func() bool { _, err := q.Job(c, id); return errors.Is(err, store.ErrNotFound) },
			30*time.Second, 5*time.Millisecond, "acked after the third attempt")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, attempts, 3)
		// Each retry's delay counts from the moment its attempt failed (the
		// error's time), not from the claim: a handler or an ack delayed by
		// a busy machine must not make the delays look as if they shrank.
		failed := attempts[2].errors // the third attempt carries both failures
		require.Len(t, failed, 2)
		var delays []time.Duration
		for i := 1; i < 3; i++ {
			assert.Equal(t, i+1, attempts[i].n)
			assert.Equal(t, i, failed[i-1].Attempt)
			assert.GreaterOrEqual(t, attempts[i].runAt.Sub(attempts[i-1].claimed), backoff(i), "retry %d waited its backoff after its claim", i)
			delay := attempts[i].runAt.Sub(failed[i-1].At)
			assert.GreaterOrEqual(t, delay, backoff(i), "retry %d waited its backoff after its failure", i)
			delays = append(delays, delay)
		}
		assert.Greater(t, delays[1], delays[0], "delays grow")
	})
}

func TestWorkSurvivesPanicsAndFailsPermanentErrors(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("hazards")
		c := ctx(t)
		panicky, err := q.Enqueue(c, []byte("panic"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		fatal, err := q.Enqueue(c, []byte("permanent"), store.EnqueueOpts{})
		require.NoError(t, err)
		fine, err := q.Enqueue(c, []byte("fine"), store.EnqueueOpts{})
		require.NoError(t, err)
		var fineRuns atomic.Int64
		runWork(t, q, store.WorkOpts{Concurrency: 1}, func(ctx context.Context, j *store.Job) error {
			switch string(j.Payload) {
			case "panic":
				panic("handler bug")
			case "permanent":
				return store.Permanent(errors.New("bad input"))
			}
			fineRuns.Add(1)
			return nil
		})
		require.Eventually(t, func() bool { return fineRuns.Load() == 1 }, 30*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool {
			a, errA := q.Job(c, panicky)
			b, errB := q.Job(c, fatal)
			return errA == nil && errB == nil && a.State == store.JobDead && b.State == store.JobDead
		}, 30*time.Second, 5*time.Millisecond)
		a, _ := q.Job(c, panicky)
		assert.Contains(t, a.LastError, "handler bug")
		b, _ := q.Job(c, fatal)
		assert.Contains(t, b.LastError, "bad input")
		assert.Equal(t, 1, b.Attempts, "a permanent error is not retried")
		require.Eventually(t, func() bool { _, err := q.Job(c, fine); return errors.Is(err, store.ErrNotFound) },
			30*time.Second, 5*time.Millisecond, "the fine job is acked (acks are batched)")

		// The loop is still alive after the panic.
		_, err = q.Enqueue(c, []byte("fine"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fineRuns.Load() == 2 }, 30*time.Second, 5*time.Millisecond)
	})
}

// TestWorkWakesOnEnqueue: an idle worker with an hour-long safety poll picks
// up a job as soon as an enqueue commits, in this store or another, so it
// waits on wakes, not on polling.
func TestWorkWakesOnEnqueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("wakeful")
		c := ctx(t)
		got := make(chan int64, 2)
		runWork(t, q, store.WorkOpts{PollInterval: time.Hour}, func(ctx context.Context, j *store.Job) error {
			got <- j.ID
			return nil
		})
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.Equal(t, id, <-got)

		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			id, err = q.EnqueueTx(c, tx, nil, store.EnqueueOpts{})
			return err
		}))
		require.Equal(t, id, <-got, "a committed EnqueueTx wakes the worker too")

		other := e.open(t) // another store: its enqueue reaches us only through the feed
		id, err = other.Queue("wakeful").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.Equal(t, id, <-got, "an enqueue elsewhere wakes the worker through the feed")
	})
}

// TestWorkFinishesInFlightOnCancel: cancelling Work stops claiming but lets
// a running handler finish and settle. With one slot, the held handler keeps
// Work from claiming until its slot frees, so no claim is in flight when the
// test cancels: the enqueue after the cancel must stay unclaimed.
func TestWorkFinishesInFlightOnCancel(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("graceful")
		c := ctx(t)
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		started, release := make(chan struct{}), make(chan struct{})
		var sawCancel atomic.Bool
		wctx, cancel := context.WithCancel(c)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: 1, Grace: time.Minute}, func(ctx context.Context, j *store.Job) error {
				close(started)
				<-release
				sawCancel.Store(ctx.Err() != nil)
				return nil
			})
		}()
		<-started
		cancel()
		_, err = q.Enqueue(c, nil, store.EnqueueOpts{}) // must not be claimed any more
		require.NoError(t, err)
		close(release)
		require.NoError(t, <-done)
		assert.False(t, sawCancel.Load(), "the handler's context lives through the grace period")
		_, err = q.Job(c, id)
		require.ErrorIs(t, err, store.ErrNotFound, "the in-flight job was acked before Work returned")
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, st.Ready, "nothing was claimed after cancel")
	})
}

type order struct {
	ID   int    `json:"id"`
	Item string `json:"item"`
}

func TestTypedJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		jobs := s.JobQueue[order]("orders")
		c := ctx(t)
		_, err := jobs.Enqueue(c, order{ID: 7, Item: "teapot"}, store.EnqueueOpts{})
		require.NoError(t, err)
		bad, err := jobs.Queue().Enqueue(c, []byte("{not json"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			_, err := jobs.EnqueueTx(c, tx, order{ID: 8, Item: "kettle"}, store.EnqueueOpts{})
			return err
		}))

		got := make(chan order, 2)
		c2, cancel := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- jobs.Work(c2, store.WorkOpts{Concurrency: 1}, func(ctx context.Context, j *store.Job, o order) error {
				got <- o
				return nil
			})
		}()
		assert.ElementsMatch(t, []order{{7, "teapot"}, {8, "kettle"}}, []order{<-got, <-got})
		require.Eventually(t, func() bool {
			j, err := jobs.Queue().Job(c, bad)
			return err == nil && j.State == store.JobDead
		}, 30*time.Second, 5*time.Millisecond, "an undecodable payload fails its job; the worker goes on")
		j, err := jobs.Queue().Job(c, bad)
		require.NoError(t, err)
		assert.Contains(t, j.LastError, store.ErrCodec.Error())
		assert.Equal(t, 1, j.Attempts)
		cancel()
		require.NoError(t, <-done)

		_, err = s.JobQueue[chan int]("orders").Enqueue(c, make(chan int), store.EnqueueOpts{})
		require.ErrorIs(t, err, store.ErrCodec, "an unencodable value is a codec error")
	})
}
