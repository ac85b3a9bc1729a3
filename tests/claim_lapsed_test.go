package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestClaimSettlesLapsedClaimsBesideReadyJobs: a claim of a queue where
// claims lapsed, beside ready jobs, ends the exhausted ones (dead after
// their last attempt, expired past their ExpiresAt) and takes the others
// in their place in claim order, in the same claim. SQLite's claim reads
// only the ready jobs and whether a claim lapsed (ClaimableReadyJobs), and
// only then buries and reads the lapsed claims: a claim that missed the
// lapse would hand out the ready jobs and leave the lapsed ones running.
func TestClaimSettlesLapsedClaimsBesideReadyJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("lapses")
		c := ctx(t)
		claimOne := func(opts store.EnqueueOpts) int64 {
			t.Helper()
			id, err := q.Enqueue(c, []byte("x"), opts)
			require.NoError(t, err)
			jobs, err := q.Claim(c, "crashy", 1, time.Minute)
			require.NoError(t, err)
			require.Equal(t, []int64{id}, ids(jobs))
			return id
		}
		exhausted := claimOne(store.EnqueueOpts{Priority: 5, MaxAttempts: 1})
		expiring := claimOne(store.EnqueueOpts{Priority: 5, MaxAttempts: 3, ExpiresAt: clk.Now().Add(90 * time.Second)})
		lapsed := claimOne(store.EnqueueOpts{Priority: 4, MaxAttempts: 3})
		var ready []int64
		for range 3 {
			id, err := q.Enqueue(c, []byte("r"), store.EnqueueOpts{})
			require.NoError(t, err)
			ready = append(ready, id)
		}
		clk.Advance(2 * time.Minute) // the worker died: its three claims lapsed, and one job expired

		jobs, err := q.Claim(c, "w", 2, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []int64{lapsed, ready[0]}, ids(jobs), "the lapsed claim first (its priority), then the first ready job")
		if len(jobs) > 0 {
			assert.Equal(t, 2, jobs[0].Attempts)
		}
		j, err := q.Job(c, exhausted)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State)
		assert.Equal(t, "attempts exhausted: the last claim expired", j.LastError)
		j, err = q.Job(c, expiring)
		require.NoError(t, err)
		assert.Equal(t, store.JobExpired, j.State)

		// The rest, as a queue without lapsed claims gives them.
		jobs, err = q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ready[1:], ids(jobs))
	})
}

// TestClaimOfAPausedQueueEndsItsExhaustedClaims: a paused queue hands out
// nothing, but a claim still ends the claims that lapsed on their last
// attempt (as it always did: they will not run again, paused or not), on
// SQLite even when no lapsed claim is left to take, which ClaimableJobs
// never reads.
func TestClaimOfAPausedQueueEndsItsExhaustedClaims(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("paused-lapses")
		c := ctx(t)
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "crashy", 1, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []int64{id}, ids(jobs))
		waiting, err := q.Enqueue(c, []byte("y"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Pause(c))
		clk.Advance(2 * time.Minute)

		jobs, err = q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, jobs, "a paused queue hands out nothing")
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State, "the exhausted claim ended")
		j, err = q.Job(c, waiting)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
	})
}
