package tests

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAStopLeavingAHungConsumeTxHandlerBehindKeepsTheJobsWaitingForIt: on
// SQLite a group member's ConsumeTx handler holds the only writer for its
// whole run, and a Work job running beside it waits for that writer to
// be settled. The group's loop called its handler on its own goroutine
// and waited for it, so a stop never left a handler that ignores its
// context behind, as Work does a WorkTx handler's: the member's
// transaction kept the writer until the store closed, the Work job's
// release, cut by the close, never landed, and the job stayed running
// with its attempt spent (review57 F2: hard Shutdown 3 of 3; a graceful
// Shutdown with a 60 s deadline 1 of 1, which took 67 s).
//
// A plain Work handler (MaxAttempts 1, a Visibility of 2 s) runs until the
// stop cancels it; then a ConsumeTx member's handler writes an effect and
// hangs, ignoring its context, until the test ends. The stop comes once
// the job's claim as claimed has run out (on SQLite nothing can extend it
// while the member's transaction holds the writer; on PostgreSQL
// heartbeats do). Forms: HardShutdown is Shutdown with a done context;
// Shutdown is a graceful one with a 30 s deadline (both loops' Grace
// 100 ms). What a user relies on: the stop returns within its bounds (the
// graceful one before its deadline, without turning hard; the hard one
// within the store's wait for its loops, 5 + 2 s), the member's loop
// returns, the Work job is back in its queue with its attempt (a deploy
// never kills a job) and a new store runs it once, and the hung handler's
// event is neither lost nor committed: its effect was rolled back, and a
// new member handles it once.
func TestAStopLeavingAHungConsumeTxHandlerBehindKeepsTheJobsWaitingForIt(t *testing.T) {
	const vis = 2 * time.Second
	const grace = 100 * time.Millisecond
	eachEngineEachForm(t, []string{"HardShutdown", "Shutdown"}, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		s := e.open(t)
		createEffects(t, s)
		q, st := s.Queue("hung-member"), s.Stream("hung-member")
		hangRel := make(chan struct{})
		defer close(hangRel) // the hung handler returns at the very end
		within := func(done <-chan error, what string) (error, bool) {
			select {
			case err := <-done:
				return err, true
			case <-time.After(30 * time.Second):
				t.Errorf("%s has not returned 30 s after the stop", what)
				return nil, false
			}
		}

		var runs atomic.Int32
		claimedTo := make(chan time.Time, 1)
		workDone := make(chan error, 1)
		go func() {
			workDone <- q.Work(c, store.WorkOpts{Visibility: vis, Timeout: time.Minute, Grace: grace, Concurrency: 1, Batch: 1},
				func(ctx context.Context, j *store.Job) error {
					if runs.Add(1) == 1 {
						claimedTo <- *j.ClaimExpiresAt
					}
					<-ctx.Done() // the stop cancels it
					return ctx.Err()
				})
		}()
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		var lease time.Time
		select {
		case lease = <-claimedTo:
		case <-c.Done():
			t.Fatal("the Work handler never ran")
		}

		hung := make(chan int64, 1)
		consumeDone := make(chan error, 1)
		go func() {
			consumeDone <- st.Group("g").ConsumeTx(c, store.GroupOpts{Partitions: 1, Grace: grace},
				func(ctx context.Context, tx store.Tx, ev store.Event) error {
					if err := writeEffect(ctx, tx, ev.Offset); err != nil {
						return err
					}
					select {
					case hung <- ev.Offset:
					default:
					}
					<-hangRel // ignores its context
					return nil
				})
		}()
		off, err := st.Publish(c, []byte("ev"))
		require.NoError(t, err)
		select {
		case got := <-hung:
			require.Equal(t, off, got)
		case <-c.Done():
			t.Fatal("the member's handler never ran")
		}
		select { // the job's claim as claimed runs out under the member's transaction
		case <-time.After(time.Until(lease.Add(vis / 4))):
		case <-c.Done():
			t.Fatal(c.Err())
		}

		sc, cancel := context.WithTimeout(c, 30*time.Second)
		if form == 0 {
			cancel()
		}
		stopped := time.Now()
		err = s.Shutdown(sc)
		cancel()
		took := time.Since(stopped)
		t.Logf("Shutdown returned %v after %v", err, took.Round(time.Millisecond))
		if form == 0 {
			assert.Less(t, took, 12*time.Second, "a hard Shutdown returns once the loops left their hung handlers behind (5 s, and 2 s for the settles)")
		} else {
			assert.NoError(t, err, "a graceful Shutdown leaves the hung handler behind before its deadline")
			assert.Less(t, took, 30*time.Second, "a graceful Shutdown returns before its deadline")
		}
		if err, ok := within(consumeDone, "ConsumeTx"); ok {
			assert.ErrorIs(t, err, store.ErrClosed)
		}
		if err, ok := within(workDone, "Work"); ok {
			assert.ErrorIs(t, err, store.ErrClosed)
		}
		assert.Equal(t, int32(1), runs.Load(), "the Work job ran once before the stop")

		s2 := e.open(t)
		q2 := s2.Queue(q.Name())
		j, err := q2.Job(c, id)
		require.NoError(t, err)
		released := assert.Equal(t, store.JobPending, j.State, "the Work job the stop cancelled is back in its queue (%q)", j.LastError)
		released = assert.Equal(t, 0, j.Attempts, "released with its attempt given back") && released
		assert.NotContains(t, effects(t, s2), off, "the hung handler's effect was rolled back")

		// A new store runs the job once, and a new member handles the event once.
		wc, wcancel := context.WithCancel(c)
		defer wcancel()
		var runs2 atomic.Int32
		go func() {
			_ = q2.Work(wc, store.WorkOpts{Visibility: vis, PollInterval: 50 * time.Millisecond}, func(context.Context, *store.Job) error {
				runs2.Add(1)
				return nil
			})
		}()
		handled := make(chan int64, 8)
		go func() {
			_ = s2.Stream(st.Name()).Group("g").ConsumeTx(wc, store.GroupOpts{Partitions: 1}, func(ctx context.Context, tx store.Tx, ev store.Event) error {
				handled <- ev.Offset
				return writeEffect(ctx, tx, ev.Offset)
			})
		}()
		if released {
			require.Eventually(t, func() bool {
				_, err := q2.Job(c, id)
				return errors.Is(err, store.ErrNotFound)
			}, 30*time.Second, 20*time.Millisecond, "the job was run and acked by a new store")
			assert.Equal(t, int32(1), runs2.Load(), "the job ran once on the new store")
		}
		select {
		case got := <-handled:
			assert.Equal(t, off, got, "a new member gets the hung handler's event")
		case <-time.After(30 * time.Second):
			t.Fatal("a new member never got the hung handler's event")
		}
		require.Eventually(t, func() bool {
			gs, err := s2.Stream(st.Name()).Group("g").Stats(c)
			return err == nil && gs.Lag == 0
		}, 30*time.Second, 20*time.Millisecond, "the new member committed the event")
		assert.Equal(t, 1, effects(t, s2)[off], "the event's effect committed once")
	})
}

// TestAStopLeavingAHungConsumeTxHandlerBehindKeepsEveryJobWaitingForIt:
// the test above with a worker of many claims. On SQLite, once a stopped
// Work handler returned, its job's release waits for the writer the
// member's hung transaction holds, its job's lock held, and its job is
// no longer among the worker's running ones: the revival at that
// transaction's rollback found such a job only among its worker's 4
// latest claims. A worker of Concurrency 8 that claimed its 8 jobs one
// claim each (Batch 1) kept the 4 latest: the other 4 jobs' releases,
// their claims lapsed, were refused, and the jobs stayed running with
// their attempts spent. What a user relies on: after the stop every job
// the stop cancelled is back in its queue with its attempt.
func TestAStopLeavingAHungConsumeTxHandlerBehindKeepsEveryJobWaitingForIt(t *testing.T) {
	const vis = 2 * time.Second
	const grace = 100 * time.Millisecond
	const jobs = 8
	eachEngineEachForm(t, []string{"HardShutdown", "Shutdown"}, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		s := e.open(t)
		createEffects(t, s)
		q, st := s.Queue("hung-member-many"), s.Stream("hung-member-many")
		hangRel := make(chan struct{})
		defer close(hangRel) // the hung handler returns at the very end

		claimedTo := make(chan time.Time, jobs)
		workDone := make(chan error, 1)
		go func() {
			workDone <- q.Work(c, store.WorkOpts{Visibility: vis, Timeout: time.Minute, Grace: grace, Concurrency: jobs, Batch: 1},
				func(ctx context.Context, j *store.Job) error {
					claimedTo <- *j.ClaimExpiresAt
					<-ctx.Done() // the stop cancels it
					return ctx.Err()
				})
		}()
		ids := make([]int64, jobs)
		for i := range ids {
			id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			ids[i] = id
		}
		var lease time.Time // the latest of the claims
		for range jobs {
			select {
			case l := <-claimedTo:
				lease = maxTime(lease, l)
			case <-c.Done():
				t.Fatal("the Work handlers never all ran")
			}
		}

		hung := make(chan int64, 1)
		consumeDone := make(chan error, 1)
		go func() {
			consumeDone <- st.Group("g").ConsumeTx(c, store.GroupOpts{Partitions: 1, Grace: grace},
				func(ctx context.Context, tx store.Tx, ev store.Event) error {
					if err := writeEffect(ctx, tx, ev.Offset); err != nil {
						return err
					}
					select {
					case hung <- ev.Offset:
					default:
					}
					<-hangRel // ignores its context
					return nil
				})
		}()
		off, err := st.Publish(c, []byte("ev"))
		require.NoError(t, err)
		select {
		case got := <-hung:
			require.Equal(t, off, got)
		case <-c.Done():
			t.Fatal("the member's handler never ran")
		}
		select { // every job's claim as claimed runs out under the member's transaction
		case <-time.After(time.Until(lease.Add(vis / 4))):
		case <-c.Done():
			t.Fatal(c.Err())
		}

		sc, cancel := context.WithTimeout(c, 30*time.Second)
		if form == 0 {
			cancel()
		}
		err = s.Shutdown(sc)
		cancel()
		if form == 1 {
			assert.NoError(t, err, "a graceful Shutdown leaves the hung handler behind before its deadline")
		}
		for _, done := range []chan error{consumeDone, workDone} {
			select {
			case err := <-done:
				assert.ErrorIs(t, err, store.ErrClosed)
			case <-time.After(30 * time.Second):
				t.Fatal("a loop has not returned 30 s after the stop")
			}
		}

		s2 := e.open(t)
		q2 := s2.Queue(q.Name())
		for i, id := range ids {
			j, err := q2.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobPending, j.State, "job %d (enqueued %d of %d) is back in its queue (%q)", id, i+1, jobs, j.LastError)
			assert.Equal(t, 0, j.Attempts, "job %d (enqueued %d of %d) released with its attempt given back", id, i+1, jobs)
		}
		assert.NotContains(t, effects(t, s2), off, "the hung handler's effect was rolled back")
	})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
