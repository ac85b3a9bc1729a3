package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Transactional handlers (issue 19, item 1): Queue.WorkTx and
// JobQueue.WorkTx.

// workTxUntil runs q.WorkTx with opts and handler until done reports true,
// then stops it and waits for it.
func workTxUntil(t *testing.T, q *store.Queue, opts store.WorkOpts, handler store.TxHandler, done func() bool) {
	t.Helper()
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- q.WorkTx(c, opts, handler) }()
	require.Eventually(t, done, time.Minute, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-errc)
}

func jobGone(t *testing.T, q *store.Queue, id int64) func() bool {
	return func() bool {
		_, err := q.Job(ctx(t), id)
		if errors.Is(err, store.ErrNotFound) {
			return true
		}
		require.NoError(t, err)
		return false
	}
}

func jobIn(t *testing.T, q *store.Queue, id int64, state store.JobState) func() bool {
	return func() bool { return jobState(t, q, id) == state }
}

// TestWorkTxCommitsEffectsWithCompletion: a handler's business row and the
// job's completion commit together; a failing handler's row rolls back
// while the retry (or the snooze, or the permanent failure) is recorded
// on its own; a panic counts as an error.
func TestWorkTxCommitsEffectsWithCompletion(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		cases := []struct {
			name   string
			result func() error
			done   func(q *store.Queue, id int64) func() bool
			rows   int
			check  func(j *store.Job)
		}{
			{"ok", func() error { return nil }, func(q *store.Queue, id int64) func() bool { return jobGone(t, q, id) }, 1, nil},
			{"error", func() error { return errors.New("flaky") },
				func(q *store.Queue, id int64) func() bool { return func() bool { return jobLastError(t, q, id) != "" } }, 0,
				func(j *store.Job) {
					assert.Equal(t, store.JobPending, j.State)
					assert.Equal(t, 1, j.Attempts)
					assert.Equal(t, "flaky", j.LastError)
				}},
			{"permanent", func() error { return store.Permanent(errors.New("never")) },
				func(q *store.Queue, id int64) func() bool { return jobIn(t, q, id, store.JobDead) }, 0, nil},
			{"snooze", func() error { return store.Snooze(time.Hour) },
				func(q *store.Queue, id int64) func() bool {
					return func() bool { j := mustJob(t, q, id); return j.State == store.JobPending && j.RunAt.After(time.Now()) }
				}, 0,
				func(j *store.Job) { assert.Zero(t, j.Attempts, "a snooze gives the attempt back") }},
			{"panic", func() error { panic("boom") },
				func(q *store.Queue, id int64) func() bool { return func() bool { return jobLastError(t, q, id) != "" } }, 0,
				func(j *store.Job) { assert.Contains(t, j.LastError, "boom") }},
		}
		for _, tc := range cases {
			q := s.Queue("worktx-" + tc.name)
			id, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 5})
			require.NoError(t, err)
			workTxUntil(t, q, store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }},
				func(ctx context.Context, tx store.Tx, j *store.Job) error {
					if err := writeEffect(ctx, tx, j.ID); err != nil {
						return err
					}
					return tc.result()
				}, tc.done(q, id))
			assert.Equal(t, tc.rows, effects(t, s)[id], tc.name)
			if tc.check != nil {
				tc.check(mustJob(t, q, id))
			}
		}
	})
}

func mustJob(t *testing.T, q *store.Queue, id int64) *store.Job {
	t.Helper()
	j, err := q.Job(ctx(t), id)
	require.NoError(t, err)
	return j
}

func jobLastError(t *testing.T, q *store.Queue, id int64) string { return mustJob(t, q, id).LastError }

// TestWorkTxHandlerSettlesInItsTx: a transactional handler that settles
// its own job in its transaction (here a snooze) and returns nil commits
// that settle with its row; Work adds no ack. A typed JobQueue.WorkTx
// hands the decoded value.
func TestWorkTxHandlerSettlesInItsTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		q := s.JobQueue[clientMail]("worktx-typed")
		id, err := q.Enqueue(c, clientMail{To: "ann"}, store.EnqueueOpts{})
		require.NoError(t, err)
		var to atomic.Value
		wc, cancel := context.WithCancel(c)
		errc := make(chan error, 1)
		go func() {
			errc <- q.WorkTx(wc, store.WorkOpts{}, func(ctx context.Context, tx store.Tx, j *store.Job, m clientMail) error {
				to.Store(m.To)
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				return j.SnoozeTx(ctx, tx, time.Hour)
			})
		}()
		require.Eventually(t, func() bool { return effects(t, s)[id] == 1 }, time.Minute, 5*time.Millisecond)
		cancel()
		require.NoError(t, <-errc)
		assert.Equal(t, "ann", to.Load())
		j := mustJob(t, q.Queue(), id)
		assert.Equal(t, store.JobPending, j.State)
		assert.True(t, j.RunAt.After(time.Now().Add(50*time.Minute)), "snoozed by the handler, not acked")
	})
}

// TestWorkTxClaimLapsedMidHandler: the claim lapses while the handler
// runs (the store's clock jumps past it, so another worker may take the
// job): the handler returns nil, yet its row is not committed; the job is
// claimed again and its second run commits exactly one row.
func TestWorkTxClaimLapsedMidHandler(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		createEffects(t, s)
		q := s.Queue("worktx-lapsed")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		var runs atomic.Int64
		workTxUntil(t, q, store.WorkOpts{Visibility: time.Minute, Timeout: 30 * time.Second},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				if runs.Add(1) == 1 {
					clk.Advance(2 * time.Minute) // the claim lapsed while the row was written
				}
				return nil
			}, jobGone(t, q, id))
		assert.EqualValues(t, 2, runs.Load(), "the lapsed run was rolled back and the job ran again")
		assert.Equal(t, 1, effects(t, s)[id], "the lapsed run's row was not committed")
	})
}

// TestWorkTxCancelledMidHandler: Queue.Cancel of a job whose transactional
// handler is running. On PostgreSQL the handler's context is cancelled
// (its cause matches ErrClaimLost) and, though it returns nil, its row is
// rolled back and the job stays cancelled. On SQLite the handler's
// transaction holds the writer slot, so the Cancel waits for it: the
// handler ends (here at its Timeout, ignoring it), its row and the
// completion commit, and the Cancel then finds no live job.
func TestWorkTxCancelledMidHandler(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		q := s.Queue("worktx-cancel")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		wrote := make(chan struct{})
		var cause atomic.Value
		cancelled := make(chan error, 1)
		go func() {
			<-wrote
			cancelled <- q.Cancel(c, id)
		}()
		workTxUntil(t, q, store.WorkOpts{Timeout: 3 * time.Second},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				close(wrote)
				<-ctx.Done()
				cause.Store(context.Cause(ctx))
				return nil // as a handler that ignores its context would
			}, func() bool { return cause.Load() != nil })
		err = <-cancelled
		if e.name == "pg" {
			require.NoError(t, err)
			assert.ErrorIs(t, cause.Load().(error), store.ErrClaimLost)
			assert.Zero(t, effects(t, s)[id], "the cancelled job's row rolled back")
			assert.Equal(t, store.JobCancelled, jobState(t, q, id))
		} else {
			require.ErrorIs(t, err, store.ErrNotFound, "the cancel waited for the handler's transaction")
			assert.ErrorIs(t, cause.Load().(error), context.DeadlineExceeded)
			assert.Equal(t, 1, effects(t, s)[id])
			_, err := q.Job(c, id)
			require.ErrorIs(t, err, store.ErrNotFound, "completed")
		}
	})
}

// TestWorkTxKeepsHeartbeatsTimeoutsAndStops: a transactional handler that
// outlives its Visibility keeps its claim (heartbeats) and commits once; a
// handler past its Timeout is rolled back and retried; a hard stop of its
// Worker rolls its transaction back and releases the job with its attempt
// given back.
func TestWorkTxKeepsHeartbeatsTimeoutsAndStops(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)

		// The handler outlives its Visibility three times: the store's
		// clock moves on while it waits for its release. On PostgreSQL
		// heartbeats renew the claim (heartbeatThrough: each half
		// visibility once a heartbeat renewed it, so however late they run
		// the claim never lapses); on SQLite the handler's transaction
		// holds the writer, so neither a heartbeat nor another claim can
		// run, the clock jumps three visibilities at once, and the commit
		// is fenced by the claim's token. (Before, the handler waited
		// 1.8 s of real time: a PostgreSQL heartbeat held up a second let
		// the claim lapse, and the job never completed.)
		const visibility = 600 * time.Millisecond
		clk := newFakeClock()
		long := e.open(t, store.WithClock(clk.Now)).Queue("worktx-long")
		id, err := long.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		var runs atomic.Int32
		running, release := make(chan struct{}, 2), make(chan struct{})
		wc, stopLong := context.WithCancel(c)
		werr := make(chan error, 1)
		go func() {
			werr <- long.WorkTx(wc, store.WorkOpts{Visibility: visibility, Timeout: time.Hour},
				func(ctx context.Context, tx store.Tx, j *store.Job) error {
					runs.Add(1)
					if err := writeEffect(ctx, tx, j.ID); err != nil {
						return err
					}
					running <- struct{}{}
					select {
					case <-release:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
		}()
		<-running
		if e.name == "pg" {
			heartbeatThrough(t, clk, long, id, visibility)
		} else {
			clk.Advance(3 * visibility)
		}
		close(release)
		require.Eventually(t, jobGone(t, long, id), time.Minute, 5*time.Millisecond)
		stopLong()
		require.NoError(t, <-werr)
		assert.Equal(t, 1, effects(t, s)[id], "one run, committed, though it outlived its Visibility")
		assert.Equal(t, int32(1), runs.Load(), "one run")

		slow := s.Queue("worktx-timeout")
		id, err = slow.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		workTxUntil(t, slow, store.WorkOpts{Timeout: 100 * time.Millisecond, Backoff: func(int) time.Duration { return time.Hour }},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			}, func() bool { return jobLastError(t, slow, id) != "" })
		assert.Zero(t, effects(t, s)[id])
		assert.Contains(t, jobLastError(t, slow, id), "deadline exceeded")

		stopped := s.Queue("worktx-stop")
		id, err = stopped.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		started := make(chan struct{})
		w, err := stopped.NewWorkerTx(store.WorkOpts{Grace: time.Minute}, func(ctx context.Context, tx store.Tx, j *store.Job) error {
			if err := writeEffect(ctx, tx, j.ID); err != nil {
				return err
			}
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() { errc <- w.Run(c) }()
		<-started
		sc, cancel := context.WithTimeout(c, 100*time.Millisecond)
		err = w.Stop(sc)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "Stop says it cut a handler short")
		require.NoError(t, <-errc)
		j := mustJob(t, stopped, id)
		assert.Equal(t, store.JobPending, j.State)
		assert.Zero(t, j.Attempts, "released with its attempt given back")
		assert.Zero(t, effects(t, s)[id])
	})
}

// A transactional handler cannot end its transaction: Commit and Rollback
// of its Tx refuse with ErrInvalidArgument and change nothing, so its
// writes still commit with the job's completion.
func TestTxHandlerCannotEndItsTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q, out := s.Queue("worktx-end"), s.Queue("worktx-end-out")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		type refusals struct{ commit, rollback error }
		got := make(chan refusals, 1)
		wctx, stop := context.WithCancel(c)
		werr := make(chan error, 1)
		go func() {
			werr <- q.WorkTx(wctx, store.WorkOpts{}, func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if _, err := out.EnqueueTx(ctx, tx, []byte("written in the handler's transaction"), store.EnqueueOpts{}); err != nil {
					return err
				}
				r := refusals{tx.Commit(ctx), tx.Rollback(ctx)}
				if _, err := out.EnqueueTx(ctx, tx, []byte("after both"), store.EnqueueOpts{}); err != nil {
					return err // the transaction must still be open
				}
				got <- r
				return nil
			})
		}()
		r := <-got
		require.ErrorIs(t, r.commit, store.ErrInvalidArgument)
		require.ErrorIs(t, r.rollback, store.ErrInvalidArgument)
		assert.ErrorContains(t, r.commit, "must not end its transaction")
		stop() // Work returns once the handler's transaction ended
		require.NoError(t, <-werr)
		st, err := out.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, st.Ready, "both writes committed with the job's completion")
		_, err = q.Job(c, id)
		require.ErrorIs(t, err, store.ErrNotFound, "the job completed")
	})
}

// TestWorkTxQueueCancelTxOfOwnJob: a transactional handler that cancels
// its own job with Queue.CancelTx in the Tx it was handed, writes a row
// and returns nil settled its job (as with Job.CancelTx): the cancel and
// the row commit together, and the job ran once. Before (attacker
// attack56a F5) the cancel did not spend the job's claim, so the worker
// completed the job in the same transaction, whose fence found the claim
// the cancel had ended: ErrClaimLost rolled the transaction back whole
// (cancel and row), and the job ran again until it died. WorkTx,
// RunJobTx and RunJobInTx share the path.
func TestWorkTxQueueCancelTxOfOwnJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		handler := func(q *store.Queue, runs *atomic.Int32, results chan<- store.JobResult) store.TxHandler {
			return func(ctx context.Context, tx store.Tx, j *store.Job) error {
				runs.Add(1)
				j.OnResult(func(r store.JobResult) { results <- r })
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				if err := q.CancelTx(ctx, tx, j.ID); err != nil {
					return err
				}
				// Cancelled in tx already: a second cancel finds no live job.
				if err := q.CancelTx(ctx, tx, j.ID); !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("second CancelTx: %v, want ErrNotFound", err)
				}
				return nil
			}
		}
		check := func(name string, q *store.Queue, id int64, runs *atomic.Int32, res store.JobResult) {
			t.Helper()
			assert.Equal(t, store.OutcomeSettledByHandler, res.Outcome, "%s: %v", name, res.Err)
			assert.Equal(t, store.OutcomeCancelled, res.SettledAs, name)
			assert.Equal(t, store.JobCancelled, res.State, name)
			assert.Equal(t, store.JobCancelled, jobState(t, q, id), name)
			assert.Equal(t, 1, effects(t, s)[id], "%s: the handler's row committed with the cancel", name)
			assert.Equal(t, int32(1), runs.Load(), name)
		}

		// WorkTx.
		q := s.Queue("worktx-cancel-own")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 3})
		require.NoError(t, err)
		var runs atomic.Int32
		results := make(chan store.JobResult, 4)
		var res store.JobResult
		workTxUntil(t, q, store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }}, handler(q, &runs, results),
			func() bool {
				select {
				case res = <-results:
					return true
				default:
					return false
				}
			})
		check("WorkTx", q, id, &runs, res)

		// RunJobTx: the handler's own transaction.
		q = s.Queue("runjobtx-cancel-own")
		opts := store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }}
		id, err = q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 3})
		require.NoError(t, err)
		runs.Store(0)
		res, err = store.RunJobTx(c, claimOne(t, q), opts, handler(q, &runs, make(chan store.JobResult, 4)))
		require.NoError(t, err)
		check("RunJobTx", q, id, &runs, res)

		// RunJobInTx: the caller's transaction, committed by the caller.
		id, err = q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 3})
		require.NoError(t, err)
		runs.Store(0)
		j := claimOne(t, q) // before Begin: on SQLite the claim needs the writer
		tx, err := s.Begin(c)
		require.NoError(t, err)
		res, err = store.RunJobInTx(c, tx, j, opts, handler(q, &runs, make(chan store.JobResult, 4)))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(c))
		check("RunJobInTx", q, id, &runs, res)
	})
}
