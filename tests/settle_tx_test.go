package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Settling inside the caller's transaction (issue 19, item 1).

// createEffects makes the business table a test's handlers write to: one
// row per effect, deliberately without a unique key, so a job whose effects
// committed twice shows as two rows.
func createEffects(t testing.TB, s *store.Store) {
	t.Helper()
	require.NoError(t, s.InTx(ctx(t), func(c context.Context, tx store.Tx) error {
		_, err := tx.Exec(c, `CREATE TABLE IF NOT EXISTS effects (job_id BIGINT NOT NULL)`)
		return err
	}))
}

// effects counts the business rows per job id.
func effects(t testing.TB, s *store.Store) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	require.NoError(t, s.InTx(ctx(t), func(c context.Context, tx store.Tx) error {
		rows, err := tx.Query(c, `SELECT job_id, COUNT(*) FROM effects GROUP BY job_id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, n int64
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			out[id] = int(n)
		}
		return rows.Err()
	}))
	return out
}

func writeEffect(c context.Context, tx store.Tx, id int64) error {
	_, err := tx.Exec(c, `INSERT INTO effects (job_id) VALUES ($1)`, id)
	return err
}

// TestJobSettlesInTx: each Tx settle changes the job only if its
// transaction commits, together with the business row written beside it;
// after a rollback the claim is the job's again, so it can be settled anew.
func TestJobSettlesInTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		cases := []struct {
			name   string
			settle func(c context.Context, tx store.Tx, j *store.Job) error
			want   store.JobState // "" when the job is gone
		}{
			{"ack", func(c context.Context, tx store.Tx, j *store.Job) error { return j.AckTx(c, tx) }, ""},
			{"retry", func(c context.Context, tx store.Tx, j *store.Job) error {
				_, err := j.RetryTx(c, tx, time.Hour, "later")
				return err
			}, store.JobPending},
			{"fail", func(c context.Context, tx store.Tx, j *store.Job) error { return j.FailTx(c, tx, "no") }, store.JobDead},
			{"snooze", func(c context.Context, tx store.Tx, j *store.Job) error { return j.SnoozeTx(c, tx, time.Hour) }, store.JobPending},
			{"cancel", func(c context.Context, tx store.Tx, j *store.Job) error { return j.CancelTx(c, tx) }, store.JobCancelled},
		}
		for _, tc := range cases {
			q := s.Queue("settle-tx-" + tc.name)
			id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
			require.NoError(t, err)
			j := claimOne(t, q)

			// Rolled back: nothing happened, and the claim still holds.
			tx, err := s.Begin(c)
			require.NoError(t, err)
			require.NoError(t, writeEffect(c, tx, id))
			require.NoError(t, tc.settle(c, tx, j), tc.name)
			require.ErrorIs(t, j.AckTx(c, tx), store.ErrInvalidArgument, "%s: the claim is spent in tx", tc.name)
			require.NoError(t, tx.Rollback(c))
			assert.Equal(t, store.JobRunning, jobState(t, q, id), tc.name)
			assert.Zero(t, effects(t, s)[id], tc.name)

			// Committed: the settle and the business row together.
			tx, err = s.Begin(c)
			require.NoError(t, err)
			require.NoError(t, writeEffect(c, tx, id))
			require.NoError(t, tc.settle(c, tx, j), "%s after the rollback gave the claim back", tc.name)
			require.NoError(t, tx.Commit(c))
			assert.Equal(t, 1, effects(t, s)[id], tc.name)
			got, err := q.Job(c, id)
			if tc.want == "" {
				require.ErrorIs(t, err, store.ErrNotFound, tc.name)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got.State, tc.name)
			}
		}
	})
}

// TestTxSettleIsFencedByTheClaim: once another worker took a job whose
// claim lapsed, the first claim's Tx settles fail with ErrClaimLost and
// change nothing: the caller rolls back its business row.
func TestTxSettleIsFencedByTheClaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("fenced-tx")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		first := claimOne(t, q)
		clk.Advance(2 * time.Minute) // the claim (1 minute) lapsed
		second := claimOne(t, q)
		require.Equal(t, id, second.ID)

		settles := map[string]func(tx store.Tx) error{
			"ack":    func(tx store.Tx) error { return first.AckTx(c, tx) },
			"retry":  func(tx store.Tx) error { _, err := first.RetryTx(c, tx, 0, "x"); return err },
			"fail":   func(tx store.Tx) error { return first.FailTx(c, tx, "x") },
			"snooze": func(tx store.Tx) error { return first.SnoozeTx(c, tx, 0) },
		}
		for name, settle := range settles {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			require.ErrorIs(t, settle(tx), store.ErrClaimLost, name)
			require.NoError(t, tx.Rollback(c))
		}
		got, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, got.State)
		assert.Equal(t, 2, got.Attempts, "the second claim holds the job, untouched")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error { return second.AckTx(c, tx) }))
	})
}

// TestQueueOperationsInTx: Queue.CancelTx, RequeueTx and DeleteTx change
// the job only if their transaction commits.
func TestQueueOperationsInTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("ops-tx")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		inTx := func(commit bool, op func(tx store.Tx) error) {
			t.Helper()
			tx, err := s.Begin(c)
			require.NoError(t, err)
			require.NoError(t, op(tx))
			if commit {
				require.NoError(t, tx.Commit(c))
			} else {
				require.NoError(t, tx.Rollback(c))
			}
		}
		cancel := func(tx store.Tx) error { return q.CancelTx(c, tx, id) }
		requeue := func(tx store.Tx) error { return q.RequeueTx(c, tx, id) }
		del := func(tx store.Tx) error { return q.DeleteTx(c, tx, id) }

		inTx(false, cancel)
		assert.Equal(t, store.JobPending, jobState(t, q, id))
		inTx(true, cancel)
		assert.Equal(t, store.JobCancelled, jobState(t, q, id))
		inTx(false, requeue)
		assert.Equal(t, store.JobCancelled, jobState(t, q, id))
		inTx(true, requeue)
		assert.Equal(t, store.JobPending, jobState(t, q, id))
		inTx(false, del)
		assert.Equal(t, store.JobPending, jobState(t, q, id))
		inTx(true, del)
		_, err = q.Job(c, id)
		require.ErrorIs(t, err, store.ErrNotFound)

		tx, err := s.Begin(c)
		require.NoError(t, err)
		require.ErrorIs(t, q.CancelTx(c, tx, id), store.ErrNotFound)
		require.ErrorIs(t, q.DeleteTx(c, tx, id), store.ErrNotFound)
		require.ErrorIs(t, q.RequeueTx(c, tx, id), store.ErrNotFound)
		require.NoError(t, tx.Rollback(c))
	})
}
