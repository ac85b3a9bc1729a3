package alktest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

// A job worked inside the test's transaction, with what its handler wrote,
// is gone when the test rolls back: the test needs no cleanup.
func TestWorkTxRollsBackWithTheTest(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("signup")
		followups := s.JobQueue[welcome]("followups")
		// A transactional handler: its write (a follow-up job) is in tx.
		handler := func(ctx context.Context, tx store.Tx, _ *store.Job, v welcome) error {
			_, err := followups.EnqueueTx(ctx, tx, welcome{User: v.User, Lang: "follow-up"}, store.EnqueueOpts{})
			return err
		}

		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		res := alktest.WorkTx(ctx, t, tx, q, welcome{User: 1}, store.EnqueueOpts{}, handler)
		assert.NoError(t, res.Err)
		assert.Equal(t, alktest.Acked, res.Outcome)
		assert.Nil(t, res.Job, "acked in tx")
		alktest.RequireEnqueuedTx(ctx, t, tx, followups, alktest.Payload(welcome{User: 1, Lang: "follow-up"}))
		alktest.RequireNotEnqueuedTx(ctx, t, tx, q, nil)

		boom := errors.New("boom")
		res = alktest.WorkTx(ctx, t, tx, q, welcome{User: 2}, store.EnqueueOpts{},
			func(context.Context, store.Tx, *store.Job, welcome) error { return boom })
		assert.ErrorIs(t, res.Err, boom)
		assert.Equal(t, alktest.Retried, res.Outcome)
		require.NotNil(t, res.Job)
		assert.Equal(t, store.JobPending, res.Job.State)
		assert.Equal(t, "boom", res.Job.LastError)
		require.NoError(t, tx.Rollback(ctx))

		alktest.RequireNotEnqueued(ctx, t, q, nil)
		alktest.RequireNotEnqueued(ctx, t, followups, nil)
	})
}

// A job the code under test committed, worked in the test's transaction:
// after the rollback it is back as it was, attempt and all.
func TestWorkJobTxLeavesCommittedJobAsItWas(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("committed")
		_, err := q.Enqueue(ctx, welcome{User: 9}, store.EnqueueOpts{Priority: 9}) // in the way of a claim
		require.NoError(t, err)
		id, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
		require.NoError(t, err)

		// A plain handler, wrapped: it runs in the test's transaction too.
		var sent []welcome
		send := func(_ context.Context, _ *store.Job, v welcome) error { sent = append(sent, v); return nil }
		require.ErrorContains(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			res := alktest.WorkJobTx(ctx, t, tx, q, id, func(ctx context.Context, _ store.Tx, j *store.Job, v welcome) error {
				return send(ctx, j, v)
			})
			assert.Equal(t, alktest.Acked, res.Outcome)
			alktest.RequireNotEnqueuedTx(ctx, t, tx, q, alktest.Payload(welcome{User: 1}))
			return errors.New("roll back")
		}), "roll back")
		assert.Equal(t, []welcome{{User: 1}}, sent)
		for _, w := range []welcome{{User: 1}, {User: 9}} {
			j := alktest.RequireEnqueued(ctx, t, q, alktest.Payload(w))
			assert.Equal(t, store.JobPending, j.State)
			assert.Zero(t, j.Attempts)
		}
	})
}

// WorkJobTx says why a job cannot be worked, as WorkJob does.
func TestWorkJobTxUnclaimable(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("tx-unclaimable")
		id, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Queue().Pause(ctx))
		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		nop := func(context.Context, store.Tx, *store.Job, welcome) error { t.Error("the handler ran"); return nil }
		msg := failed(func(tb testing.TB) { alktest.WorkJobTx(ctx, tb, tx, q, id, nop) })
		assert.Contains(t, msg, `queue "tx-unclaimable" is paused`)
		msg = failed(func(tb testing.TB) { alktest.WorkJobTx(ctx, tb, tx, q, id+100, nop) })
		assert.Contains(t, msg, "has no job")
		msg = failed(func(tb testing.TB) { alktest.WorkTx(ctx, tb, tx, q, welcome{User: 2}, store.EnqueueOpts{}, nop) })
		assert.Contains(t, msg, "is paused")
		alktest.RequireNotEnqueuedTx(ctx, t, tx, q, alktest.Payload(welcome{User: 2}))
	})
}
