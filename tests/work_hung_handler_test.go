package tests

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkReturnsWithoutAHandlerThatIgnoresItsContext: once its stop
// cancelled the handlers, Work waits a bounded time (the hard stop's 5 s)
// for them and returns, leaving a handler that ignores its context behind:
// its job is not settled, its claim lapses and another worker takes it,
// and the handler's late return settles nothing. Before, Work waited for
// the handler for ever (it had not returned 20 s after its cancel, with a
// Grace of 1 s), and Worker.Stop and Shutdown gave up on it after 5 s.
func TestWorkReturnsWithoutAHandlerThatIgnoresItsContext(t *testing.T) {
	eachEngineEachForm(t, []string{"Work", "WorkTx"}, func(t *testing.T, e *engineEnv, form int) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("hung")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		started := make(chan *store.Job, 1)
		release := make(chan struct{})
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		var result atomic.Pointer[store.JobResult]
		ended := make(chan struct{})
		handler := func(j *store.Job) error {
			j.OnResult(func(r store.JobResult) { result.Store(&r); close(ended) })
			started <- j
			<-release // ignores its context
			return nil
		}
		wc, cancel := context.WithCancel(c)
		defer cancel()
		opts := store.WorkOpts{Grace: time.Millisecond, Visibility: time.Second, Timeout: time.Hour, PollInterval: noPoll}
		done := make(chan error, 1)
		go func() {
			if form == 0 {
				done <- q.Work(wc, opts, func(_ context.Context, j *store.Job) error { return handler(j) })
			} else {
				done <- q.WorkTx(wc, opts, func(_ context.Context, _ store.Tx, j *store.Job) error { return handler(j) })
			}
		}()
		first := <-started
		require.Equal(t, id, first.ID)
		cancel()
		t0 := time.Now()
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Logf("Work returned %v after its cancel", time.Since(t0).Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			t.Fatal("Work has not returned 20 s after its cancel (Grace 1 ms, a handler ignoring its context)")
		}
		claimAgain := func() *store.Job {
			var again []*store.Job
			require.Eventually(t, func() bool {
				again, err = q.Claim(c, "other", 1, time.Minute)
				require.NoError(t, err)
				return len(again) == 1
			}, 20*time.Second, 20*time.Millisecond, "the abandoned job comes back once its claim lapsed")
			require.Equal(t, id, again[0].ID)
			require.Equal(t, 2, again[0].Attempts)
			return again[0]
		}
		var again *store.Job
		if !(e.name == "lite" && form == 1) {
			again = claimAgain() // while the handler still hangs
		}
		// Its late return settles nothing: the job stays as the other
		// worker holds it (on SQLite a WorkTx handler's transaction holds
		// the writer: the job comes back once it rolled back).
		released = true
		close(release)
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			t.Fatal("the abandoned handler's run did not end once it returned")
		}
		require.Equal(t, store.OutcomeClaimLost, result.Load().Outcome, "%+v", *result.Load())
		if again == nil {
			again = claimAgain()
		}
		j, err := q.Job(c, id)
		require.NoError(t, err)
		require.Equal(t, store.JobRunning, j.State, "the late return settled nothing")
		require.Equal(t, "other", j.Worker)
		require.NoError(t, again.Ack(c), "the other worker's claim is whole")
	})
}

// TestAnAbandonedTransactionalHandlerGivesItsSlotBack: on a pool of 2 a
// store holds one transactional handler's transaction at a time. When Work
// left a hung WorkTx handler behind, that handler kept its slot until it
// returned, and every other WorkTx worker of the store waited for it, its
// jobs' claims heartbeat for ever (review53c: 0 of 2 jobs in 10 s). The
// slot now goes back when the handler is abandoned. (On SQLite a
// transaction holds the writer slot instead, which the hung handler's
// open transaction keeps: there is nothing to give back, and the test is
// PostgreSQL's.)
func TestAnAbandonedTransactionalHandlerGivesItsSlotBack(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	{
		s := e.open(t, store.WithMaxConns(2))
		c := ctx(t)
		q := s.Queue("abandon-slot")
		for range 3 {
			_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		release, started := make(chan struct{}), make(chan struct{}, 1)
		defer close(release)
		wc, cancel := context.WithCancel(c)
		done := make(chan error, 1)
		var first atomic.Bool
		go func() {
			done <- q.WorkTx(wc, store.WorkOpts{Grace: time.Millisecond, Visibility: time.Second, Concurrency: 1},
				func(context.Context, store.Tx, *store.Job) error {
					if first.CompareAndSwap(false, true) {
						started <- struct{}{}
						<-release // ignores its context
					}
					return nil
				})
		}()
		<-started
		cancel()
		<-done // 5 s after the cancel: the handler is left behind
		ran := make(chan struct{}, 3)
		wc2, cancel2 := context.WithCancel(c)
		done2 := make(chan error, 1)
		go func() {
			done2 <- q.WorkTx(wc2, store.WorkOpts{Visibility: time.Second}, func(context.Context, store.Tx, *store.Job) error {
				ran <- struct{}{}
				return nil
			})
		}()
		for i := range 2 {
			select {
			case <-ran:
			case <-c.Done():
				t.Fatalf("%d of the 2 other jobs ran: the abandoned handler's slot starved the store's WorkTx", i)
			}
		}
		cancel2()
		<-done2
	}
}

// TestWorkerStopSaysItLeftAHandlerBehind: when Run's Grace cancels a
// handler that ignores its context, Run leaves it behind 5 s later, just
// before Stop's own 5 s wait ends; Stop then returned nil although a
// handler was still running (review53c). It says so now.
func TestWorkerStopSaysItLeftAHandlerBehind(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("left-behind")
		_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		release, started := make(chan struct{}), make(chan struct{}, 1)
		defer close(release)
		w, err := q.NewWorker(store.WorkOpts{Grace: time.Millisecond}, func(context.Context, *store.Job) error {
			started <- struct{}{}
			<-release // ignores its context
			return nil
		})
		require.NoError(t, err)
		ran := make(chan error, 1)
		go func() { ran <- w.Run(c) }()
		<-started
		sc, cancel := context.WithTimeout(c, 100*time.Millisecond)
		defer cancel()
		err = w.Stop(sc)
		require.Error(t, err, "Stop left a handler running")
		// Run leaves it behind 5 s after its Grace cancelled it, about
		// 100 ms before Stop's own wait ends; under load Run may return
		// after that, and Stop reports the hung handler itself.
		require.Regexp(t, "left behind|ignored the hard stop", err.Error())
		require.NoError(t, <-ran)
	})
}

// TestAnAbandonedHandlersTransactionIsRolledBack: when Work leaves behind
// a WorkTx handler that ignores its cancelled context, the store rolls its
// transaction back. Kept open (attack54), the transaction held a pooled
// connection that the store's transaction slots no longer counted, so on a
// pool of 2 the next transactional handler took the last connection and
// its claim lapsed unextended while it ran (another process ran the job
// too); a graceful Shutdown waited for it for ever; and on SQLite, where
// it held the writer slot, the settles of the worker's other claimed jobs
// waited for the slot, so Work itself never returned. What the handler
// wrote is gone, and what it tries to write after is refused. A handler
// hung inside a statement whose context never ends is the same case: the
// store interrupts the statement (on PostgreSQL a cancel request, on SQLite
// its connection's interrupt) before it rolls back, where the rollback
// raced the statement on pgx's connection and, on SQLite, waited for it,
// writer slot and all (review54a).
func TestAnAbandonedHandlersTransactionIsRolledBack(t *testing.T) {
	eachEngineEachForm(t, []string{"hung in Go", "hung in a statement"}, func(t *testing.T, e *engineEnv, form int) {
		s, err := store.Open(ctx(t), e.dsn, store.WithMaxConns(2))
		require.NoError(t, err)
		closed := false
		defer func() {
			if !closed {
				_ = s.Close()
			}
		}()
		c := ctx(t)
		q, side := s.Queue("abandon-tx"), s.Queue("abandon-tx-side")
		for range 2 {
			_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		release, started := make(chan struct{}), make(chan struct{}, 1)
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		hang := func(tx store.Tx) error {
			if form == 0 {
				<-release // ignores its context
				return nil
			}
			long := "SELECT pg_sleep(600)"
			if e.name == "lite" {
				long = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 100000000000) SELECT count(*) FROM c"
			}
			_, err := tx.Exec(context.Background(), long) // a context that never ends
			return err
		}
		late, hung := make(chan error, 1), make(chan error, 1)
		var first atomic.Bool
		wc, cancel := context.WithCancel(c)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			// Batch 2: on SQLite the second job is claimed beside the hung
			// one and waits for the writer slot to settle.
			done <- q.WorkTx(wc, store.WorkOpts{Grace: time.Millisecond, Visibility: time.Minute, Concurrency: 2, Batch: 2, PollInterval: noPoll},
				func(ctx context.Context, tx store.Tx, j *store.Job) error {
					if !first.CompareAndSwap(false, true) {
						return ctx.Err()
					}
					_, err := side.EnqueueTx(ctx, tx, []byte("written before the hang"), store.EnqueueOpts{})
					if err != nil {
						return err
					}
					started <- struct{}{}
					hung <- hang(tx)
					_, err = side.EnqueueTx(context.Background(), tx, []byte("written after"), store.EnqueueOpts{})
					late <- err
					return nil
				})
		}()
		<-started
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Work has not returned 30 s after its cancel (Grace 1 ms, then 5 s for the hung handler)")
		}
		// Both connections of the pool are free: two transactions at once.
		bc, bcancel := context.WithTimeout(c, 10*time.Second)
		defer bcancel()
		tx1, err := s.Begin(bc)
		require.NoError(t, err, "the abandoned handler's transaction still holds a connection (or the writer slot)")
		if e.name == "pg" {
			tx2, err := s.Begin(bc)
			require.NoError(t, err, "the abandoned handler's transaction still holds a connection")
			require.NoError(t, tx2.Rollback(c))
		}
		require.NoError(t, tx1.Rollback(c))
		jobs, err := side.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		require.Empty(t, jobs, "the abandoned handler's write was rolled back")

		released = true
		close(release)
		select {
		case err := <-hung:
			if form == 1 {
				require.Error(t, err, "the hung statement was ended")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the abandoned handler's hang did not end")
		}
		select {
		case err := <-late:
			require.ErrorIs(t, err, store.ErrTxDone, "a write after the rollback is refused")
		case <-time.After(20 * time.Second):
			t.Fatal("the abandoned handler's late write did not return")
		}
		jobs, err = side.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		require.Empty(t, jobs, "nothing the abandoned handler wrote is stored")

		sd := make(chan error, 1)
		go func() { sd <- s.Shutdown(context.Background()) }()
		select {
		case err := <-sd:
			closed = true
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("a graceful Shutdown has not returned 30 s after: it waits for the abandoned handler's transaction")
		}
	})
}

// TestATransactionalHandlersTimeoutStartsWithItsTransaction: a WorkTx
// handler's Timeout runs from its transaction's begin, not from its job's
// hand-out. A handler that waited for the store's one transaction slot (a
// PostgreSQL pool of 2) or SQLite's writer slot while another handler's
// transaction held it had its Timeout spent by the wait: it ran with what
// was left, or its Begin failed, and the job's attempt was spent
// (attack54: 5 of 6 jobs dead with "context deadline exceeded" on a pool of
// 2, handlers of 700 ms and a Timeout of 1 s). Here the first handler holds
// the slot for its whole Timeout while the second job waits for it, claimed
// (on SQLite in the same claim: a claim needs the writer too; on
// PostgreSQL by a second worker, as a worker there runs no more handlers
// than the store has slots); the second handler must still get its own
// Timeout.
func TestATransactionalHandlersTimeoutStartsWithItsTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t, store.WithMaxConns(2))
		c := ctx(t)
		const timeout = 2 * time.Second
		qa, qb := s.Queue("slot-holder"), s.Queue("slot-waiter")
		if e.name == "lite" {
			qb = qa
		}
		_, err := qa.Enqueue(c, []byte("a"), store.EnqueueOpts{})
		require.NoError(t, err)
		idB, err := qb.Enqueue(c, []byte("b"), store.EnqueueOpts{})
		require.NoError(t, err)
		opts := store.WorkOpts{Timeout: timeout, Visibility: 10 * time.Second, PollInterval: noPoll, Concurrency: 2, Batch: 2}
		holding := make(chan struct{})
		left := make(chan time.Duration, 1)
		var held atomic.Bool
		handler := func(ctx context.Context, _ store.Tx, j *store.Job) error {
			if held.CompareAndSwap(false, true) {
				close(holding)
				<-ctx.Done() // holds the slot for its whole Timeout
				return nil
			}
			deadline, ok := ctx.Deadline()
			if !ok {
				left <- 0
				return errors.New("no deadline")
			}
			left <- time.Until(deadline)
			return nil
		}
		wc, cancel := context.WithCancel(c)
		defer cancel()
		var done []chan error
		work := func(q *store.Queue) {
			d := make(chan error, 1)
			done = append(done, d)
			go func() { d <- q.WorkTx(wc, opts, handler) }()
		}
		work(qa)
		<-holding
		if qb != qa {
			work(qb)
		}
		select {
		case d := <-left:
			require.GreaterOrEqual(t, d, timeout/2, "the second handler's Timeout was spent waiting for the first one's transaction slot")
		case <-time.After(30 * time.Second):
			j, err := qb.Job(c, idB)
			require.NoError(t, err)
			t.Fatalf("the second handler never ran: its job is %s after %d attempts (%s)", j.State, j.Attempts, j.LastError)
		}
		require.Eventually(t, func() bool {
			_, err := qb.Job(c, idB)
			return errors.Is(err, store.ErrNotFound)
		}, 20*time.Second, 10*time.Millisecond, "the second job completed")
		cancel()
		for _, d := range done {
			require.NoError(t, <-d)
		}
	})
}
