package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A pending job past its ExpiresAt is due but never claimable. An idle
// Work beside it used to claim every millisecond for ever (nothing ended
// the job: a claim does not, and no janitor ran); now Work ends it expired
// and goes back to waiting. The safety poll is an hour, so only the
// worker's own handling can end it within the test.
func TestWorkEndsAnExpiredJobItFindsDue(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		var skew atomic.Int64
		s := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
		q := s.Queue("expired-due")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{ExpiresAt: time.Now().Add(time.Minute)})
		require.NoError(t, err)
		skew.Store(int64(time.Hour)) // due and past its ExpiresAt

		wc, stop := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wc, store.WorkOpts{PollInterval: time.Hour}, func(context.Context, *store.Job) error {
				t.Error("an expired job was handed out")
				return nil
			})
		}()
		require.Eventually(t, func() bool {
			j, err := q.Job(c, id)
			return err == nil && j.State == store.JobExpired
		}, 30*time.Second, 5*time.Millisecond, "the worker left the expired job pending")
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, "expired", j.LastError)
		assert.Zero(t, j.Attempts, "never claimed")
		stop()
		require.NoError(t, <-done)
	})
}
