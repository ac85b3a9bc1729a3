package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// An expired job is never handed out, whatever its state: a job whose claim
// lapsed after its ExpiresAt is not reclaimed but goes to dead ("expired"),
// through Claim, SweepExpired and the janitor alike.
func TestExpiredJobIsNeverReclaimed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("expiring")

		enqueueAndLapse := func() int64 {
			id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(400 * time.Millisecond)})
			require.NoError(t, err)
			jobs, err := q.Claim(c, "w1", 10, 200*time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, []int64{id}, ids(jobs))
			clk.Advance(700 * time.Millisecond) // the claim lapsed, then the job expired
			return id
		}
		dead := func(id int64) {
			t.Helper()
			j, err := q.GetJob(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobDead, j.State)
			assert.Equal(t, "expired", j.LastError)
			assert.NotNil(t, j.DiedAt)
			assert.Nil(t, j.ClaimExpiresAt)
		}

		// Claim buries it instead of handing it out again.
		id := enqueueAndLapse()
		jobs, err := q.Claim(c, "w2", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, jobs, "an expired job whose claim lapsed must not be reclaimed")
		dead(id)

		// SweepExpired covers it.
		id = enqueueAndLapse()
		n, err := q.SweepExpired(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		dead(id)

		// So does the janitor.
		id = enqueueAndLapse()
		rep, err := janitor.New(s, janitor.Config{}).RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, rep.JobsExpired)
		dead(id)

		// A live claim past ExpiresAt still settles its job: the job was handed
		// out before it expired, and sweeping it would only make it run twice.
		id, err = q.Enqueue(c, []byte("x"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Second)})
		require.NoError(t, err)
		jobs, err = q.Claim(c, "w3", 10, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []int64{id}, ids(jobs))
		clk.Advance(2 * time.Second)
		n, err = q.SweepExpired(c)
		require.NoError(t, err)
		assert.Zero(t, n)
		require.NoError(t, jobs[0].Ack(c))
	})
}
