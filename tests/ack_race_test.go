package tests

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAckHoldsWhileRetentionChanges: Ack and AckMany of claims still held
// succeed, and the jobs end acked (deleted, or completed when the queue
// keeps them), even when another store changes the queue's
// CompletedRetention in the middle of the ack. The change is forced right
// after the ack's first statement, each round, flipping the retention both
// ways (right before SQLite's AckMany, a single write transaction); a
// settle that decided in two steps (delete when not kept, else
// complete) matched nothing in either step and failed with ErrClaimLost.
func TestAckHoldsWhileRetentionChanges(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const queue = "acks"
		other := e.open(t).Queue(queue) // the store that reconfigures the queue
		var armed, kept atomic.Bool
		var hookErr error
		flip := func() {
			kept.Store(!kept.Load())
			cfg := store.QueueConfig{}
			if kept.Load() {
				cfg.CompletedRetention = time.Hour
			}
			hookErr = errors.Join(hookErr, other.Configure(c, cfg))
		}
		s := e.openHooked(t, func(name string) {
			if (name == "AckJob" || name == "AckJobs") && armed.CompareAndSwap(true, false) {
				flip()
			}
		})
		q := s.Queue(queue)
		requireAcked := func(id int64) {
			t.Helper()
			j, err := q.Job(c, id) // deleted, or completed: either retention may have decided
			if !errors.Is(err, store.ErrNotFound) {
				require.NoError(t, err)
				assert.Equal(t, store.JobCompleted, j.State, "job %d", id)
			}
		}
		const rounds = 60
		for round := range rounds {
			for range 3 {
				_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
				require.NoError(t, err)
			}
			jobs, err := q.Claim(c, "w", 3, time.Minute)
			require.NoError(t, err)
			require.Len(t, jobs, 3)

			armed.Store(true)
			require.NoError(t, jobs[0].Ack(c), "round %d: Ack of a held claim (kept before: %v)", round, !kept.Load())
			require.False(t, armed.Load(), "the retention changed during the ack")
			requireAcked(jobs[0].ID)

			if e.name == "lite" {
				// SQLite's AckMany is one write transaction from its first
				// statement to its commit (the worker's ack): no other
				// store's write lands in its middle, so the flip comes
				// right before it.
				flip()
			} else {
				armed.Store(true)
			}
			n, err := q.AckMany(c, jobs[1:])
			require.NoError(t, err)
			require.EqualValues(t, 2, n, "round %d: AckMany of held claims (kept before: %v)", round, !kept.Load())
			require.False(t, armed.Load(), "the retention changed during the batch")
			requireAcked(jobs[1].ID)
			requireAcked(jobs[2].ID)
		}
		require.NoError(t, hookErr)
		again, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, again, "no acked job runs again")
	})
}
