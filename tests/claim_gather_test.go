package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkFillsAFreedSlotBesideABlockedHandler: after a full claim, while
// handlers run, Work's next claim waits for a whole batch of free slots on
// PostgreSQL (issue 18: a claim at the first freed slot took a fraction
// of a batch), but only for about one claim's round trip: a slot freed
// beside a handler that never returns is filled all the same. The first
// claim takes the blocking job and a quick one; the third job must run
// while the first still blocks.
func TestWorkFillsAFreedSlotBesideABlockedHandler(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("gather")
		for _, p := range []string{"block", "quick", "third"} {
			_, err := q.Enqueue(ctx(t), []byte(p), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		unblock := make(chan struct{})
		third := make(chan struct{})
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: 2, Batch: 2, Grace: time.Second}, func(c context.Context, j *store.Job) error {
				switch string(j.Payload) {
				case "block":
					select {
					case <-unblock:
					case <-c.Done():
					}
				case "third":
					close(third)
				}
				return nil
			})
		}()
		select {
		case <-third:
		case <-time.After(20 * time.Second):
			t.Fatal("the slot the quick job freed was not filled while the other handler ran")
		}
		close(unblock)
		stop()
		require.NoError(t, <-done)
		st, err := q.Stats(ctx(t))
		require.NoError(t, err)
		require.Zero(t, st.Ready+st.Running, "every job handled and acked")
	})
}
