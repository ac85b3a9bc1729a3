package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Operations a CLI or web console runs (issue 14, item 8): list a queue's
// jobs by state page by page, delete a job, requeue one or every dead job,
// list queues, rewind a stream consumer.

// allPages reads every page of a queue's jobs in state, limit per page.
func allPages(t *testing.T, q *store.Queue, state store.JobState, limit int) (ids []int64, pages int) {
	t.Helper()
	var after int64
	for {
		page, err := q.Jobs(ctx(t), store.JobsOpts{State: state, After: after, Limit: limit})
		require.NoError(t, err)
		pages++
		for _, j := range page {
			assert.Equal(t, state, j.State)
			assert.Equal(t, q.Name(), j.Queue)
			ids = append(ids, j.ID)
		}
		if len(page) < limit {
			return ids, pages
		}
		after = page[len(page)-1].ID
	}
}

// TestJobsListsAQueueByStateInPages: every job of the state appears once,
// in ID order, across keyset pages; other states and other queues' jobs do
// not; a job that changes state between pages does not shift the others.
func TestJobsListsAQueueByStateInPages(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("list")
		_, err := s.Queue("neighbour").EnqueueMany(c, []store.NewJob{{}, {}, {}})
		require.NoError(t, err)
		var all []store.NewJob
		for i := range 10 {
			all = append(all, store.NewJob{Opts: store.EnqueueOpts{Priority: i % 3, Delay: time.Duration(i%2) * time.Hour}})
		}
		enqueued, err := q.EnqueueMany(c, all)
		require.NoError(t, err)
		running, err := q.Claim(c, "w", 2, time.Minute) // two due ones
		require.NoError(t, err)
		require.Len(t, running, 2)
		deadJobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, deadJobs[0].Fail(c, "x"))

		isTaken := map[int64]bool{running[0].ID: true, running[1].ID: true, deadJobs[0].ID: true}
		var wantPending []int64
		for _, id := range enqueued {
			if !isTaken[id] {
				wantPending = append(wantPending, id)
			}
		}
		got, pages := allPages(t, q, store.JobPending, 3)
		assert.Equal(t, wantPending, got)
		assert.Equal(t, 3, pages, "7 jobs in pages of 3")
		got, _ = allPages(t, q, store.JobRunning, 1)
		assert.ElementsMatch(t, []int64{running[0].ID, running[1].ID}, got)
		assert.Less(t, got[0], got[1])
		got, _ = allPages(t, q, store.JobDead, 10)
		assert.Equal(t, []int64{deadJobs[0].ID}, got)
		got, _ = allPages(t, q, store.JobCompleted, 10)
		assert.Empty(t, got)

		// Keyset: the first page's last job leaving the state moves nothing.
		first, err := q.Jobs(c, store.JobsOpts{State: store.JobPending, Limit: 3})
		require.NoError(t, err)
		require.NoError(t, q.Delete(c, first[2].ID))
		second, err := q.Jobs(c, store.JobsOpts{State: store.JobPending, After: first[2].ID, Limit: 3})
		require.NoError(t, err)
		assert.Equal(t, wantPending[3:6], ids(second))

		page, err := q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		assert.Len(t, page, 6, "the default limit takes them all")
		_, err = q.Jobs(c, store.JobsOpts{State: "lost"})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.Jobs(c, store.JobsOpts{})
		require.ErrorIs(t, err, store.ErrInvalidArgument, "State is required")
		_, err = q.Jobs(c, store.JobsOpts{State: store.JobPending, Limit: -1})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.Jobs(c, store.JobsOpts{State: store.JobPending, Limit: store.MaxJobsLimit + 1})
		require.ErrorIs(t, err, store.ErrInvalidArgument, "a Limit over MaxJobsLimit is refused, not clamped")
		page, err = q.Jobs(c, store.JobsOpts{State: store.JobPending, Limit: store.MaxJobsLimit})
		require.NoError(t, err)
		assert.Len(t, page, 6)
	})
}

// TestDeleteJob: a pending or finished job is deleted; a running one is
// refused (cancel it first); a missing one, or another queue's, is not
// found.
func TestDeleteJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("del")
		pending, err := q.Enqueue(c, nil, store.EnqueueOpts{Priority: -1})
		require.NoError(t, err)
		runningID, err := q.Enqueue(c, nil, store.EnqueueOpts{Priority: 2})
		require.NoError(t, err)
		deadID, err := q.Enqueue(c, nil, store.EnqueueOpts{Priority: 1})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 2, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []int64{runningID, deadID}, ids(jobs))
		require.NoError(t, jobs[1].Fail(c, "x"))

		require.ErrorIs(t, s.Queue("elsewhere").Delete(c, pending), store.ErrNotFound)
		require.NoError(t, q.Delete(c, pending))
		_, err = q.Job(c, pending)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, q.Delete(c, pending), store.ErrNotFound)
		require.NoError(t, q.Delete(c, deadID))
		_, err = q.Job(c, deadID)
		require.ErrorIs(t, err, store.ErrNotFound)

		err = q.Delete(c, runningID)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), `alkstore: delete "del"`)
		require.NoError(t, jobs[0].Ack(c), "the running job's claim still holds")
	})
}

// TestRequeueCancelledAndExpiredJobs: Requeue takes a cancelled or expired
// job as it takes a dead one; an expired job loses its past ExpiresAt so
// it can run.
func TestRequeueCancelledAndExpiredJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("again")
		cancelled, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Cancel(c, cancelled))
		expired, err := q.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Second)})
		require.NoError(t, err)
		clk.Advance(time.Minute)
		_, err = q.SweepExpired(c)
		require.NoError(t, err)
		require.Equal(t, store.JobExpired, jobState(t, q, expired))

		for _, id := range []int64{cancelled, expired} {
			require.NoError(t, q.Requeue(c, id))
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobPending, j.State)
			assert.Nil(t, j.ExpiresAt)
			assert.Nil(t, j.FinishedAt)
		}
		jobs, err := q.Claim(c, "w", 5, time.Minute)
		require.NoError(t, err)
		assert.ElementsMatch(t, []int64{cancelled, expired}, ids(jobs))
		require.ErrorIs(t, q.Requeue(c, cancelled), store.ErrNotFound, "a running job is not requeued")
	})
}

// TestRequeueDeadTakesEveryDeadJob: more dead jobs than one batch all go
// back to pending; the dead jobs of another queue stay.
func TestRequeueDeadTakesEveryDeadJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		kill := func(q *store.Queue, n int) {
			jobs := make([]store.NewJob, n)
			for i := range jobs {
				jobs[i].Opts.MaxAttempts = 1
			}
			_, err := q.EnqueueMany(c, jobs)
			require.NoError(t, err)
			claimed, err := q.Claim(c, "w", n, time.Minute)
			require.NoError(t, err)
			require.Len(t, claimed, n)
		}
		q, other := s.Queue("graveyard"), s.Queue("other")
		const n = 2345 // more than a batch (1,000)
		kill(q, n)
		kill(other, 3)
		clk.Advance(2 * time.Minute)
		for _, qq := range []*store.Queue{q, other} { // their last claims lapse: dead
			none, err := qq.Claim(c, "w", 1, time.Minute)
			require.NoError(t, err)
			require.Empty(t, none)
		}
		st, err := q.Stats(c)
		require.NoError(t, err)
		require.EqualValues(t, n, st.Dead)

		moved, err := q.RequeueDead(c)
		require.NoError(t, err)
		assert.EqualValues(t, n, moved)
		st, err = q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Dead)
		assert.EqualValues(t, n, st.Ready)
		j, err := q.Jobs(c, store.JobsOpts{State: store.JobPending, Limit: 1})
		require.NoError(t, err)
		assert.Zero(t, j[0].Attempts)
		st, err = other.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 3, st.Dead)

		moved, err = q.RequeueDead(c)
		require.NoError(t, err)
		assert.Zero(t, moved)
	})
}

// TestQueuesListsSettingsAndCounts: Store.Queues lists queues with jobs
// and queues with only settings, by name, with their counts.
func TestQueuesListsSettingsAndCounts(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := s.Queue("b-busy").EnqueueMany(c, []store.NewJob{{}, {}, {Opts: store.EnqueueOpts{Delay: time.Hour}}})
		require.NoError(t, err)
		require.NoError(t, s.Queue("a-idle").Configure(c, store.QueueConfig{DeadRetention: time.Hour}))
		require.NoError(t, s.Queue("c-both").Configure(c, store.QueueConfig{CompletedRetention: time.Minute}))
		_, err = s.Queue("c-both").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)

		qs, err := s.Queues(c)
		require.NoError(t, err)
		require.Len(t, qs, 3)
		assert.Equal(t, "a-idle", qs[0].Name)
		assert.Equal(t, time.Hour, qs[0].Config.DeadRetention)
		assert.Zero(t, qs[0].Stats)
		assert.Equal(t, "b-busy", qs[1].Name)
		assert.Zero(t, qs[1].Config)
		assert.EqualValues(t, 2, qs[1].Stats.Ready)
		assert.EqualValues(t, 1, qs[1].Stats.Scheduled)
		assert.Equal(t, "c-both", qs[2].Name)
		assert.Equal(t, time.Minute, qs[2].Config.CompletedRetention)
		assert.EqualValues(t, 1, qs[2].Stats.Ready)
		for _, qi := range qs {
			assert.False(t, qi.Paused)
		}
	})
}

// TestResetOffsetRewindsAConsumer: ResetOffset moves a consumer back (and
// forward) where SaveOffset only moves forward; the consumer then reads
// from there, and its lag follows.
func TestResetOffsetRewindsAConsumer(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("replay")
		var offs []int64
		for range 5 {
			off, err := st.Publish(c, []byte("e"))
			require.NoError(t, err)
			offs = append(offs, off)
		}
		require.NoError(t, st.SaveOffset(c, "cons", offs[4]))
		require.NoError(t, st.SaveOffset(c, "cons", offs[1]))
		off, err := st.Offset(c, "cons")
		require.NoError(t, err)
		require.Equal(t, offs[4], off, "SaveOffset stays monotone")

		require.NoError(t, st.ResetOffset(c, "cons", offs[1]))
		off, err = st.Offset(c, "cons")
		require.NoError(t, err)
		assert.Equal(t, offs[1], off)
		evs, err := st.ReadFromConsumer(c, "cons", 10)
		require.NoError(t, err)
		assert.Equal(t, offs[2:], offsets(evs), "the consumer replays from the reset offset")
		stats, err := s.Stats(c)
		require.NoError(t, err)
		require.Len(t, stats.Streams, 1)
		require.Len(t, stats.Streams[0].Consumers, 1)
		assert.EqualValues(t, 3, stats.Streams[0].Consumers[0].Lag)

		require.NoError(t, st.ResetOffset(c, "cons", 0))
		evs, err = st.ReadFromConsumer(c, "cons", 10)
		require.NoError(t, err)
		assert.Equal(t, offs, offsets(evs), "0 replays everything")
		require.NoError(t, st.ResetOffset(c, "fresh", offs[3]), "an unknown consumer starts where it is set")
		off, err = st.Offset(c, "fresh")
		require.NoError(t, err)
		assert.Equal(t, offs[3], off)
		require.ErrorIs(t, st.ResetOffset(c, "cons", -1), store.ErrInvalidArgument)
		require.ErrorIs(t, st.ResetOffset(c, "", 1), store.ErrInvalidName)
	})
}

// TestJobsTxSeesItsOwnJobs: JobsTx lists the jobs its transaction enqueued
// before they commit; Jobs (outside it) does not see them until then.
func TestJobsTxSeesItsOwnJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("jobs-tx")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c) }()
		id, err := q.EnqueueTx(c, tx, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		inside, err := q.JobsTx(c, tx, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		require.Len(t, inside, 1)
		assert.Equal(t, id, inside[0].ID)
		outside, err := q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		assert.Empty(t, outside, "not committed yet")

		require.NoError(t, tx.Commit(c))
		outside, err = q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		assert.Len(t, outside, 1)
	})
}
