package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// The worker's job lifecycle (issue 14): pause and resume, snooze,
// cancellation that reaches the handler, automatic heartbeats.

// noPoll is a safety poll no test waits for: what happens within a test
// happens through a wake.
const noPoll = time.Hour

// TestQueuePauseResume: a pause stops every claim (a direct Claim and a
// worker in another store alike), is visible in Stats and outlives the
// handle; a resume from another store restarts the worker through a wake,
// not its (hour-long) safety poll.
func TestQueuePauseResume(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		a, b := e.open(t), e.open(t)
		c := ctx(t)
		qa, qb := a.Queue("pausable"), b.Queue("pausable")
		handled := make(chan int64, 10)
		runWork(t, qa, store.WorkOpts{PollInterval: noPoll}, func(_ context.Context, j *store.Job) error {
			handled <- j.ID
			return nil
		})
		first, err := qa.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		assert.Equal(t, first, waitID(t, handled), "the worker runs before the pause")

		st, err := qa.Stats(c)
		require.NoError(t, err)
		assert.False(t, st.Paused)
		require.NoError(t, qb.Pause(c))
		require.NoError(t, qb.Pause(c), "pausing twice is fine")
		st, err = qa.Stats(c)
		require.NoError(t, err)
		assert.True(t, st.Paused, "the pause is stored, seen from the other store")

		second, err := qa.Enqueue(c, nil, store.EnqueueOpts{}) // wakes the worker
		require.NoError(t, err)
		jobs, err := qb.Claim(c, "direct", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, jobs, "a paused queue gives no claim")
		select {
		case id := <-handled:
			t.Fatalf("job %d ran while the queue was paused", id)
		case <-time.After(300 * time.Millisecond):
		}
		other, err := b.Queue("unpaused").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err = b.Queue("unpaused").Claim(c, "direct", 10, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []int64{other}, ids(jobs), "a pause is per queue")

		require.NoError(t, qb.Resume(c))
		assert.Equal(t, second, waitID(t, handled), "the resume's wake restarts claiming")
		st, err = qa.Stats(c)
		require.NoError(t, err)
		assert.False(t, st.Paused)
		require.NoError(t, qb.Resume(c), "resuming a running queue is fine")

		// The Tx forms follow their transaction.
		errRollback := errors.New("roll back")
		require.ErrorIs(t, b.InTx(c, func(c context.Context, tx store.Tx) error {
			if err := qb.PauseTx(c, tx); err != nil {
				return err
			}
			return errRollback
		}), errRollback)
		st, err = qb.Stats(c)
		require.NoError(t, err)
		assert.False(t, st.Paused, "a rolled-back PauseTx pauses nothing")
		require.NoError(t, b.InTx(c, func(c context.Context, tx store.Tx) error { return qb.PauseTx(c, tx) }))
		st, err = qb.Stats(c)
		require.NoError(t, err)
		assert.True(t, st.Paused)
		require.NoError(t, b.InTx(c, func(c context.Context, tx store.Tx) error { return qb.ResumeTx(c, tx) }))
		third, err := qb.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		assert.Equal(t, third, waitID(t, handled))
	})
}

func waitID(t *testing.T, c <-chan int64) int64 {
	t.Helper()
	select {
	case id := <-c:
		return id
	case <-time.After(20 * time.Second):
		t.Fatal("no job ran")
		return 0
	}
}

// TestSnooze: a handler returning Snooze runs again after the delay with
// its attempt given back and no error recorded; Job.Snooze does the same
// from inside a handler or after Claim, and is fenced like every settle.
func TestSnooze(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("snooze")
		type run struct {
			attempts int
			err      string
			at       time.Time
		}
		runs := make(chan run, 10)
		runWork(t, q, store.WorkOpts{PollInterval: noPoll}, func(_ context.Context, j *store.Job) error {
			runs <- run{j.Attempts, j.LastError, time.Now()}
			switch string(j.Payload) {
			case "result":
				if j.RunAt.Equal(j.CreatedAt) {
					return fmt.Errorf("wrapped: %w", store.Snooze(300*time.Millisecond))
				}
			case "method":
				if j.RunAt.Equal(j.CreatedAt) {
					assert.NoError(t, j.Snooze(context.Background(), 300*time.Millisecond))
					return errors.New("ignored: the handler settled its job")
				}
			}
			return nil
		})
		for _, how := range []string{"result", "method"} {
			id, err := q.Enqueue(c, []byte(how), store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			first := <-runs
			second := <-runs
			assert.Equal(t, 1, first.attempts, how)
			assert.Equal(t, 1, second.attempts, "%s: the snooze gave the attempt back (MaxAttempts 1 still runs)", how)
			assert.Empty(t, second.err, "%s: a snooze is not an error", how)
			assert.GreaterOrEqual(t, second.at.Sub(first.at), 250*time.Millisecond, how)
			require.Eventually(t, func() bool {
				_, err := q.Job(c, id)
				return errors.Is(err, store.ErrNotFound)
			}, 10*time.Second, 10*time.Millisecond, "%s: acked after the second run", how)
		}
	})

	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("snooze-claim")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Snooze(c, 10*time.Second))
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		assert.Zero(t, j.Attempts)
		assert.True(t, j.RunAt.Equal(clk.Now().Add(10*time.Second)))
		require.ErrorIs(t, jobs[0].Snooze(c, time.Second), store.ErrInvalidArgument, "the claim was spent")
		none, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, none, "not before the snooze ends")

		clk.Advance(10 * time.Second)
		old, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, old, 1)
		clk.Advance(2 * time.Minute) // the claim expires; another worker takes the job
		taken, err := q.Claim(c, "w2", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, taken, 1)
		require.ErrorIs(t, old[0].Snooze(c, time.Second), store.ErrClaimLost, "fenced like every settle")
		j, err = q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, j.State)
		assert.Equal(t, "w2", j.Worker)
	})
}

// TestCancelReachesHandler: Queue.Cancel of a running job, from the
// worker's store or from another (another process's worth), cancels the
// handler's context with a cause matching ErrClaimLost; the job ends
// cancelled, is not retried, and the handler's late Ack is refused.
func TestCancelReachesHandler(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		a, b := e.open(t), e.open(t)
		for _, from := range []struct {
			name string
			s    *store.Store
		}{{"same store", a}, {"other store", b}} {
			t.Run(from.name, func(t *testing.T) {
				c := ctx(t)
				name := "cancel-" + map[bool]string{true: "same", false: "other"}[from.s == a]
				q := a.Queue(name)
				started := make(chan int64, 1)
				type end struct {
					cause, lateAck error
				}
				ended := make(chan end, 1)
				var runs atomic.Int32
				stop := runWork(t, q, store.WorkOpts{PollInterval: noPoll, Timeout: time.Minute}, func(ctx context.Context, j *store.Job) error {
					runs.Add(1)
					started <- j.ID
					<-ctx.Done()
					ended <- end{context.Cause(ctx), j.Ack(context.Background())}
					return ctx.Err()
				})
				id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
				require.NoError(t, err)
				require.Equal(t, id, waitID(t, started))

				require.NoError(t, from.s.Queue(name).Cancel(c, id))
				var got end
				select {
				case got = <-ended:
				case <-time.After(20 * time.Second):
					t.Fatal("the cancel did not reach the handler")
				}
				require.ErrorIs(t, got.cause, store.ErrClaimLost)
				assert.Contains(t, got.cause.Error(), "cancelled")
				require.ErrorIs(t, got.lateAck, store.ErrClaimLost, "the fence refuses a settle after the cancel")
				stop()
				j, err := q.Job(c, id)
				require.NoError(t, err)
				assert.Equal(t, store.JobCancelled, j.State)
				require.NotNil(t, j.FinishedAt)
				assert.Equal(t, int32(1), runs.Load())
				st, err := q.Stats(c)
				require.NoError(t, err)
				assert.Zero(t, st.Ready+st.Scheduled+st.Running, "not retried")
				require.ErrorIs(t, from.s.Queue(name).Cancel(c, id), store.ErrNotFound, "a cancelled job is not live")
			})
		}
	})
}

// TestHeartbeatKeepsLongHandler: a handler that runs three times its
// visibility (ignoring its context) runs once, although a second worker
// in another store polls the queue all along: the worker's heartbeats keep
// the claim. The stores' clock moves the three visibilities half a
// visibility at a time, each step only once a heartbeat renewed the claim
// after the last, so however late a heartbeat runs (a loaded machine) the
// claim keeps half its lease; a worker without heartbeats fails the wait
// for the first renewal. (Before, the handler slept three real
// visibilities, and a heartbeat held up for a second let the other worker
// run the job again: forced by holding the first HeartbeatJob statement
// 2 s, SQLite's half ran it twice.)
func TestHeartbeatKeepsLongHandler(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		a, b := e.open(t, store.WithClock(clk.Now)), e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		const visibility = time.Second
		var runs atomic.Int32
		started, release := make(chan struct{}, 2), make(chan struct{})
		h := func(hctx context.Context, _ *store.Job) error {
			runs.Add(1)
			select {
			case started <- struct{}{}:
			default: // a third run: the assertion below fails it
			}
			select {
			case <-release:
				return nil
			case <-hctx.Done(): // the worker stops after a failure: do not hang its cleanup
				return hctx.Err()
			}
		}
		// Timeout an hour: a handler past its Timeout keeps no claim, and
		// the real time the steps take depends on the machine.
		opts := store.WorkOpts{Visibility: visibility, Timeout: time.Hour, PollInterval: 50 * time.Millisecond}
		runWork(t, a.Queue("long"), opts, h)
		runWork(t, b.Queue("long"), opts, h)
		q := a.Queue("long")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		<-started
		heartbeatThrough(t, clk, q, id, visibility)
		close(release)
		require.Eventually(t, jobGone(t, q, id), 30*time.Second, 5*time.Millisecond, "acked")
		assert.Equal(t, int32(1), runs.Load(), "ran once, not once per visibility")
	})
}

// heartbeatThrough moves clk three visibilities on while job id's handler
// runs, half a visibility at a time, each step only once a heartbeat
// renewed the job's claim after the last: the claim always keeps half its
// lease, however late the heartbeats run. It fails when no heartbeat
// renews the claim, or when the job was claimed again.
func heartbeatThrough(t *testing.T, clk *fakeClock, q *store.Queue, id int64, visibility time.Duration) {
	t.Helper()
	expiry := func() time.Time {
		j, err := q.Job(ctx(t), id)
		require.NoError(t, err)
		require.Equal(t, store.JobRunning, j.State)
		require.Equal(t, 1, j.Attempts, "the claim lapsed and the job was claimed again")
		require.NotNil(t, j.ClaimExpiresAt)
		return *j.ClaimExpiresAt
	}
	last := expiry()
	for step := range 6 {
		clk.Advance(visibility / 2) // half the claim's lease is left
		require.Eventually(t, func() bool {
			next := expiry()
			renewed := next.After(last)
			last = next
			return renewed
		}, 30*time.Second, time.Millisecond, "step %d: no heartbeat renewed the claim", step)
	}
}

// TestHeartbeatCancelsHandlerOnLostClaim: when a heartbeat finds the claim
// gone (here: the store's clock jumped past the claim's deadline, which
// no wake announces), the handler's context is cancelled with ErrClaimLost.
func TestHeartbeatCancelsHandlerOnLostClaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("lost")
		started := make(chan struct{}, 1)
		causes := make(chan error, 1)
		var runs atomic.Int32
		// Concurrency 1: the worker cannot reclaim the job while its handler runs.
		runWork(t, q, store.WorkOpts{Concurrency: 1, Visibility: 500 * time.Millisecond, Timeout: time.Minute, PollInterval: noPoll},
			func(ctx context.Context, j *store.Job) error {
				if runs.Add(1) > 1 {
					// The job's claim was lost, so the worker may claim it again
					// before the test ends; blocking here held the test's stop
					// for the whole shutdown Grace (30 s).
					return nil
				}
				started <- struct{}{}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil
			})
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		<-started
		clk.Advance(time.Hour)
		select {
		case cause := <-causes:
			require.ErrorIs(t, cause, store.ErrClaimLost)
			assert.Contains(t, cause.Error(), "heartbeat")
		case <-time.After(20 * time.Second):
			t.Fatal("the lost claim did not reach the handler")
		}
	})
}

// TestHeartbeatsEndWithTheHandlersTimeout: a handler that ignores its
// context past its Timeout keeps no claim: heartbeats stop with its
// context, so its job comes back to another worker a Visibility later
// instead of staying pinned to a hung handler for the process's life.
func TestHeartbeatsEndWithTheHandlersTimeout(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		a, b := e.open(t), e.open(t)
		c := ctx(t)
		release := make(chan struct{})
		defer close(release)
		started := make(chan struct{}, 1)
		const visibility = 600 * time.Millisecond
		runWork(t, a.Queue("hung"), store.WorkOpts{Concurrency: 1, Visibility: visibility, Timeout: 200 * time.Millisecond, PollInterval: noPoll},
			func(context.Context, *store.Job) error {
				started <- struct{}{}
				<-release // ignores its context
				return nil
			})
		id, err := a.Queue("hung").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		<-started
		// Before the fix the claim was extended every Visibility/3 forever:
		// no other worker could ever take the job.
		require.Eventually(t, func() bool {
			jobs, err := b.Queue("hung").Claim(c, "other", 1, time.Minute)
			require.NoError(t, err)
			return len(jobs) == 1 && jobs[0].ID == id
		}, 20*time.Second, 50*time.Millisecond, "the hung handler's job comes back to another worker")
	})
}
