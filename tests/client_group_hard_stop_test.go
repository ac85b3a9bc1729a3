package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// TestClientHardStopLeavesAHungGroupHandlerBehind: a client's hard Stop
// (StopAndCancel) ends a group's Grace at once, as the store's hard
// shutdown does, so a HandleGroupTx handler that ignores its context is
// left behind 5 s later, its transaction rolled back, and the client
// stops: on SQLite a queue job whose release waited for that handler's
// writer is back in its queue, its attempt given back. Before (review58b
// F2) the client cancelled only the handler's own context: the group's
// loop left it behind only after its Grace (30 s by default) and 5 s, the
// client stopped that late, and meanwhile the job stayed running with its
// attempt spent.
func TestClientHardStopLeavesAHungGroupHandlerBehind(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		createEffects(t, s)
		q, st := s.Queue("client-hard"), s.Stream("client-hard")
		hangRel := make(chan struct{})
		defer close(hangRel)
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		jobRunning := make(chan struct{}, 1)
		require.NoError(t, cl.Handle(q, store.WorkOpts{Visibility: 2 * time.Second, Timeout: time.Minute, Concurrency: 1},
			func(ctx context.Context, j *store.Job) error {
				jobRunning <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}))
		hung := make(chan struct{}, 1)
		require.NoError(t, cl.HandleGroupTx(st.Group("g"), store.GroupOpts{Partitions: 1}, // default Grace: 30 s
			func(ctx context.Context, tx store.Tx, ev store.Event) error {
				if err := writeEffect(ctx, tx, ev.Offset); err != nil {
					return err
				}
				hung <- struct{}{}
				<-hangRel // ignores its context
				return nil
			}))
		require.NoError(t, cl.Start(c))
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		<-jobRunning
		off, err := st.Publish(c, []byte("ev"))
		require.NoError(t, err)
		<-hung

		begun := time.Now()
		_ = cl.StopAndCancel(c)
		select {
		case <-cl.Stopped():
		case <-time.After(20 * time.Second): // 5 s and a loaded machine's margin; the Grace is 30 s
			t.Fatalf("the client had not stopped %v after its hard Stop began: the group's Grace ran on", time.Since(begun))
		}
		j, err := q.Job(c, id)
		require.NoError(t, err)
		require.Equal(t, store.JobPending, j.State, "the job is back in its queue (%q)", j.LastError)
		require.Equal(t, 0, j.Attempts, "its attempt given back")
		require.NoError(t, s.Close())
		require.NotContains(t, effects(t, e.open(t)), off, "the hung handler's transaction committed")
	})
}
