package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/claimhook"
	"github.com/alkstore/alkstore/store"
)

// A SQLite claim chooses and stamps its jobs on the writer slot, commits,
// and only then reads their columns on a reader connection (issue 18: the
// writer's other work waited while the claim read eleven columns a job).
// These tests stop a claim between its commit and that read (claimhook) to
// force what may happen there. They are SQLite's alone: a PostgreSQL claim
// is one statement that returns its rows, with nothing in between.

// TestClaimLeavesOutJobsEndedBeforeItsRead: a job cancelled or deleted
// between the claim's commit and its read is not returned (it must not
// run); the others are, as the claim stamped them.
func TestClaimLeavesOutJobsEndedBeforeItsRead(t *testing.T) {
	e := newEnv(t, "lite")
	s := e.open(t)
	c := ctx(t)
	q := s.Queue("claimread")
	var ids []int64
	for range 4 {
		id, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	var hookErr error
	calls := 0
	defer claimhook.Install("claimread", func() {
		calls++
		if calls == 1 {
			hookErr = q.Cancel(c, ids[1])
			if hookErr == nil { // a running job is cancelled before it is deleted
				hookErr = q.Cancel(c, ids[2])
			}
			if hookErr == nil {
				hookErr = q.Delete(c, ids[2])
			}
		}
	})()
	jobs, err := q.Claim(c, "w", 10, time.Minute)
	require.NoError(t, err)
	require.NoError(t, hookErr)
	require.Equal(t, 1, calls, "the claim did not stop between its commit and its read")
	var got []int64
	for _, j := range jobs {
		got = append(got, j.ID)
		assert.Equal(t, 1, j.Attempts)
		assert.Equal(t, store.JobRunning, j.State)
	}
	assert.Equal(t, []int64{ids[0], ids[3]}, got)
	cancelled, err := q.Job(c, ids[1])
	require.NoError(t, err)
	assert.Equal(t, store.JobCancelled, cancelled.State)
	_, err = q.Job(c, ids[2])
	assert.ErrorIs(t, err, store.ErrNotFound)
	for _, j := range jobs {
		require.NoError(t, j.Ack(c), "a returned job holds its claim")
	}
}

// TestClaimThatCommittedReturnsItsJobsAfterItsContextEnds: the read after
// the commit does not follow the claim's context, so a claim whose context
// ends once it committed still returns every job it took (a job returned
// by no claim would stay running, unseen, until its visibility ran out).
func TestClaimThatCommittedReturnsItsJobsAfterItsContextEnds(t *testing.T) {
	e := newEnv(t, "lite")
	s := e.open(t)
	c := ctx(t)
	q := s.Queue("claimread-ctx")
	for range 3 {
		_, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{})
		require.NoError(t, err)
	}
	cctx, cancel := context.WithCancel(c)
	defer cancel()
	defer claimhook.Install("claimread-ctx", cancel)()
	jobs, err := q.Claim(cctx, "w", 10, time.Minute)
	require.NoError(t, err, "a claim that committed returns its jobs")
	require.Len(t, jobs, 3)
	require.Error(t, cctx.Err(), "the hook ended the claim's context")
	st, err := q.Stats(c)
	require.NoError(t, err)
	assert.EqualValues(t, 3, st.Running)
	for _, j := range jobs {
		require.NoError(t, j.Ack(c))
	}
}
