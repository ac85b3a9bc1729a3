package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestEnqueueManyIDsFollowTheJobs: EnqueueMany returns each job's id in
// batch order, whichever statement stored it: runs of jobs that differ
// only in their payloads (one statement a run, whose ids SQLite does not
// return but derives from the last one) and jobs with options of their own
// (each one's row carries them), in one batch, after the queue's newest job
// was deleted (AUTOINCREMENT never hands its id out again), alone and
// inside the caller's transaction.
func TestEnqueueManyIDsFollowTheJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.Queue("ids")
		gone, err := q.EnqueueMany(c, make([]store.NewJob, 3))
		require.NoError(t, err)
		require.NoError(t, q.Delete(c, gone[2]))

		var batch []store.NewJob
		add := func(n int, opts store.EnqueueOpts) {
			for range n {
				batch = append(batch, store.NewJob{Payload: fmt.Appendf(nil, "job %d", len(batch)), Opts: opts})
			}
		}
		add(20, store.EnqueueOpts{})                                                    // a run of alike jobs
		add(1, store.EnqueueOpts{Priority: 5})                                          // one of its own
		add(3, store.EnqueueOpts{Delay: time.Hour})                                     // a run too short for a statement
		add(17, store.EnqueueOpts{Headers: map[string]string{"tenant": "a"}})           // a run again
		add(2, store.EnqueueOpts{MaxAttempts: 3, ExpiresAt: time.Now().Add(time.Hour)}) // the batch's last
		batch[30].Payload = nil                                                         // nil stays nil
		batch[31].Payload = []byte{}                                                    // empty stays empty

		check := func(ids []int64) {
			require.Len(t, ids, len(batch))
			for i, id := range ids {
				if i > 0 {
					assert.Greater(t, id, ids[i-1])
				}
				assert.Greater(t, id, gone[2], "a deleted job's id is never reused")
				j, err := q.Job(c, id)
				require.NoError(t, err)
				assert.Equal(t, batch[i].Payload, j.Payload, "job %d", i)
				assert.Equal(t, batch[i].Opts.Priority, j.Priority, "job %d", i)
				assert.Equal(t, batch[i].Opts.Headers, j.Headers, "job %d", i)
				assert.Equal(t, batch[i].Opts.ExpiresAt.IsZero(), j.ExpiresAt == nil, "job %d", i)
				if batch[i].Opts.MaxAttempts != 0 {
					assert.Equal(t, batch[i].Opts.MaxAttempts, j.MaxAttempts, "job %d", i)
				}
			}
		}
		ids, err := q.EnqueueMany(c, batch)
		require.NoError(t, err)
		check(ids)
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			ids, err = q.EnqueueManyTx(ctx, tx, batch)
			return err
		}))
		check(ids)
	})
}
