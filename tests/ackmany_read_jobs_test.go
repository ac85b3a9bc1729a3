package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// AckMany skips entries that hold no claim: a running job read by
// Queue.Job, Store.Job or Queue.Jobs (an operator's page of running jobs)
// is not a claim, as its own Ack says. Before, AckMany acked it with the
// token the read row carried, and the worker holding the claim lost it
// (its Ack: claim lost; a failure of its handler would have been lost).
func TestAckManySkipsRunningJobsReadNotClaimed(t *testing.T) {
	eachEngineEachForm(t, []string{"Queue.Job", "Store.Job", "Queue.Jobs"}, func(t *testing.T, e *engineEnv, form int) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("amr")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		held, err := q.Claim(c, "worker-1", 1, time.Hour)
		require.NoError(t, err)
		require.Len(t, held, 1)

		var read *store.Job
		switch form {
		case 0:
			read, err = q.Job(c, id)
		case 1:
			read, err = s.Job(c, id)
		case 2:
			var page []*store.Job
			page, err = q.Jobs(c, store.JobsOpts{State: store.JobRunning})
			require.Len(t, page, 1)
			read = page[0]
		}
		require.NoError(t, err)
		require.Equal(t, store.JobRunning, read.State)
		require.ErrorIs(t, read.Ack(c), store.ErrInvalidArgument, "a read job's own Ack")

		n, err := q.AckMany(c, []*store.Job{read})
		require.NoError(t, err)
		assert.Zero(t, n, "AckMany acked a job through a handle that holds no claim")
		got, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, got.State)
		assert.NoError(t, held[0].Ack(c), "the worker holding the claim")
	})
}
