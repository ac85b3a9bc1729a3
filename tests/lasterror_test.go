package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestCancelledJobSaysSoInLastError: a cancelled job's LastError says it
// was cancelled, as an expired one's says "expired" (README: "An expiry or
// a cancellation is not an attempt's error (LastError says it)"); the
// attempts' errors stay as they were. Before: a fresh job kept "" and a
// retried one its last attempt's error.
func TestCancelledJobSaysSoInLastError(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		q := e.open(t).Queue("cancels")
		fresh, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Cancel(c, fresh))

		retried, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		ok, err := jobs[0].Retry(c, time.Hour, "smtp timeout")
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, q.Cancel(c, retried))

		running, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, running, jobs[0].ID)
		require.NoError(t, q.Cancel(c, running))

		for _, id := range []int64{fresh, retried, running} {
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobCancelled, j.State)
			assert.Equal(t, "cancelled", j.LastError, "job %d", id)
		}
		j, err := q.Job(c, retried)
		require.NoError(t, err)
		require.Len(t, j.Errors, 1, "the cancellation is not an attempt's error")
		assert.Equal(t, "smtp timeout", j.Errors[0].Error)
	})
}
