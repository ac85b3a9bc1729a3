package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// The handler lifecycle as one job at a time sees it (store.RunJob,
// RunJobTx, RunJobInTx: what alktest calls), and the Worker handle.

// TestRunJobOutcomes: every handler result ends in one Outcome, and the job
// is left as a worker would leave it.
func TestRunJobOutcomes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		var q *store.Queue
		opts := store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }}
		cases := []struct {
			name     string
			attempts int
			handler  store.Handler
			stop     bool // cancel RunJob's ctx while the handler runs
			want     store.Outcome
			state    store.JobState // "" when the job is gone
		}{
			{"nil", 5, func(context.Context, *store.Job) error { return nil }, false, store.OutcomeAcked, ""},
			{"error", 5, func(context.Context, *store.Job) error { return errors.New("flaky") }, false, store.OutcomeRetried, store.JobPending},
			{"error on the last attempt", 1, func(context.Context, *store.Job) error { return errors.New("flaky") }, false, store.OutcomeFailed, store.JobDead},
			{"permanent", 5, func(context.Context, *store.Job) error { return store.Permanent(errors.New("no")) }, false, store.OutcomeFailed, store.JobDead},
			{"snooze", 5, func(context.Context, *store.Job) error { return store.Snooze(time.Hour) }, false, store.OutcomeSnoozed, store.JobPending},
			{"panic", 5, func(context.Context, *store.Job) error { panic("boom") }, false, store.OutcomeRetried, store.JobPending},
			{"settled by the handler", 5, func(ctx context.Context, j *store.Job) error { return j.Fail(ctx, "mine") }, false, store.OutcomeSettledByHandler, store.JobDead},
			{"released by the handler", 5, func(ctx context.Context, j *store.Job) error { return j.Release(ctx) }, false, store.OutcomeSettledByHandler, store.JobPending},
			{"stopped", 1, func(ctx context.Context, j *store.Job) error { <-ctx.Done(); return ctx.Err() }, true, store.OutcomeReleased, store.JobPending},
			{"claim lost", 5, func(ctx context.Context, j *store.Job) error { return q.Cancel(ctx, j.ID) }, false, store.OutcomeClaimLost, store.JobCancelled},
		}
		for i, tc := range cases {
			q = s.Queue(fmt.Sprint("outcomes-", i))
			id, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: tc.attempts})
			require.NoError(t, err)
			j := claimOne(t, q)
			require.Equal(t, id, j.ID)
			rc, cancel := context.WithCancel(c)
			h := tc.handler
			if tc.stop {
				inner := h
				h = func(ctx context.Context, j *store.Job) error { cancel(); return inner(ctx, j) }
			}
			res, err := store.RunJob(rc, j, opts, h)
			cancel()
			require.NoError(t, err)
			assert.Equal(t, tc.want, res.Outcome, "%s: %v", tc.name, res)
			assert.NoError(t, res.SettleErr, tc.name)
			// SettledAs: the handler's own settle, for OutcomeSettledByHandler only.
			settledAs := map[string]store.Outcome{"settled by the handler": store.OutcomeFailed, "released by the handler": store.OutcomeReleased}
			assert.Equal(t, settledAs[tc.name], res.SettledAs, tc.name)
			got, err := q.Job(c, id)
			if tc.state == "" {
				require.ErrorIs(t, err, store.ErrNotFound, tc.name)
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, tc.state, got.State, tc.name)
			if tc.name == "panic" {
				assert.Contains(t, res.Err.Error(), "panicked: boom")
			}
			if tc.name == "stopped" {
				assert.Zero(t, got.Attempts, "released with its attempt given back")
			}
		}
		_, err := store.RunJob(c, &store.Job{}, opts, func(context.Context, *store.Job) error { return nil })
		require.ErrorIs(t, err, store.ErrInvalidArgument, "not a claimed job")
	})
}

// TestRunJobTxForms: RunJobTx commits the handler's row with the
// completion and rolls it back on error; RunJobInTx settles in the
// caller's transaction, which a test may roll back to leave no trace.
func TestRunJobTxForms(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		q := s.Queue("run-tx")
		write := func(fail bool) store.TxHandler {
			return func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				if fail {
					return errors.New("declined")
				}
				return nil
			}
		}
		opts := store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }}

		ok, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		res, err := store.RunJobTx(c, claimOne(t, q), opts, write(false))
		require.NoError(t, err)
		assert.Equal(t, store.OutcomeAcked, res.Outcome)
		assert.Equal(t, 1, effects(t, s)[ok])
		require.True(t, jobGone(t, q, ok)())

		bad, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		res, err = store.RunJobTx(c, claimOne(t, q), opts, write(true))
		require.NoError(t, err)
		assert.Equal(t, store.OutcomeRetried, res.Outcome)
		assert.Zero(t, effects(t, s)[bad])
		assert.Equal(t, "declined", jobLastError(t, q, bad))

		// In the caller's transaction: everything in it, undone by its rollback.
		inTx, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		j := claimOne(t, q)
		for _, fail := range []bool{false, true} {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			res, err = store.RunJobInTx(c, tx, j, opts, write(fail))
			require.NoError(t, err)
			want := map[bool]store.Outcome{false: store.OutcomeAcked, true: store.OutcomeRetried}[fail]
			assert.Equal(t, want, res.Outcome)
			require.NoError(t, tx.Rollback(c))
			assert.Zero(t, effects(t, s)[inTx])
			assert.Equal(t, store.JobRunning, jobState(t, q, inTx), "rolled back: still claimed")
		}
		require.NoError(t, j.Ack(c), "the rollbacks gave the claim back")
	})
}

// TestWorkerHandle: NewWorker checks everything before anything runs; a
// Worker runs once; Stop before Run makes Run return at once, claiming
// nothing; a graceful Stop lets the handler in flight finish and ack.
func TestWorkerHandle(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		ok := func(context.Context, *store.Job) error { return nil }
		for name, err := range map[string]error{
			"nil handler":          func() error { _, err := s.Queue("w").NewWorker(store.WorkOpts{}, nil); return err }(),
			"negative concurrency": func() error { _, err := s.Queue("w").NewWorker(store.WorkOpts{Concurrency: -2}, ok); return err }(),
			"negative visibility": func() error {
				_, err := s.Queue("w").NewWorkerTx(store.WorkOpts{Visibility: -time.Second}, func(context.Context, store.Tx, *store.Job) error { return nil })
				return err
			}(),
			"bad name": func() error { _, err := s.Queue("").NewWorker(store.WorkOpts{}, ok); return err }(),
		} {
			var op *store.OpError
			require.ErrorAs(t, err, &op, name)
		}

		q := s.Queue("handle")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		early, err := q.NewWorker(store.WorkOpts{}, func(context.Context, *store.Job) error {
			t.Error("a worker stopped before Run ran a handler")
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, early.Stop(c))
		require.NoError(t, early.Run(c))
		require.ErrorIs(t, early.Run(c), store.ErrInvalidArgument, "a worker runs once")
		assert.Equal(t, store.JobPending, jobState(t, q, id))

		w, finish, errc := runBlockedWorker(t, c, q, store.WorkOpts{})
		stopped := make(chan error, 1)
		go func() { stopped <- w.Stop(c) }()
		close(finish)
		require.NoError(t, <-stopped)
		require.NoError(t, <-errc)
		require.True(t, jobGone(t, q, id)(), "the handler in flight finished and its job was acked")
	})
}

// A hard Worker.Stop whose wait runs out says what is still stuck. With no
// handler running, the ack of the finished job waits for a transaction of
// the application's: on SQLite one holding the writer (a business InTx or
// Begin). Stop used to say "handlers ignored the hard stop" then, blaming
// handlers for a stuck ack (fresh-eyes review of wave 30, finding 5). The
// transaction is held open until Stop returned, so the ack cannot get
// through whatever the speed. On PostgreSQL the transaction holds the
// job's row, which the ack skips and acks apart, and a hard stop waits at
// most a second for that (review57; TestWorkerStopDoesNotWaitForAHeldRowsAck):
// Stop returns with Run, blaming nothing stuck, and the job is acked once
// the transaction ended.
func TestWorkerHardStopSaysWhatIsStuck(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("stuck")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		w, finish, errc := runBlockedWorker(t, c, q, store.WorkOpts{Concurrency: 1})

		// The application's transaction: SQLite's writer, or the job's row.
		tx, err := s.Begin(c)
		require.NoError(t, err)
		if e.name == "pg" {
			_, err = tx.Exec(c, "SELECT id FROM alkstore.jobs WHERE id = $1 FOR UPDATE", id)
			require.NoError(t, err)
		}
		close(finish) // the handler returns; its ack waits for tx

		hard, cancel := context.WithCancel(c)
		cancel() // no grace: a hard stop at once
		err = w.Stop(hard)
		if e.name == "lite" {
			require.Error(t, err, "Run cannot return while the ack waits")
			assert.ErrorIs(t, err, context.Canceled)
			assert.NotContains(t, err.Error(), "handlers ignored", "no handler was running")
			assert.Contains(t, err.Error(), "no handler was running: the ack of finished jobs still waits for ")
			assert.Contains(t, err.Error(), "SQLite's writer, which a transaction holds")
		} else if err != nil { // the stop may have caught the handler before it returned
			assert.NotContains(t, err.Error(), "handlers ignored", "no handler was running")
			assert.NotContains(t, err.Error(), "still waits", "Run returned without the held row's ack")
		}

		require.NoError(t, tx.Rollback(c))
		require.NoError(t, <-errc)
		gone := jobGone(t, q, id)
		for deadline := time.Now().Add(30 * time.Second); !gone(); time.Sleep(5 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "the ack went through once the transaction ended")
		}
	})
}

// runBlockedWorker runs a worker on q whose first handler blocks until
// finish closes, and returns once that handler is running; errc gets Run's
// result.
func runBlockedWorker(t *testing.T, c context.Context, q *store.Queue, opts store.WorkOpts) (w *store.Worker, finish chan struct{}, errc chan error) {
	t.Helper()
	started := make(chan struct{})
	finish, errc = make(chan struct{}), make(chan error, 1)
	w, err := q.NewWorker(opts, func(ctx context.Context, j *store.Job) error {
		close(started)
		<-finish
		return nil
	})
	require.NoError(t, err)
	go func() { errc <- w.Run(c) }()
	<-started
	return w, finish, errc
}
