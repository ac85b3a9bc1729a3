package tests

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// shuttingDown waits until s has begun to shut down: from then on a new
// receiver is refused.
func shuttingDown(t *testing.T, c context.Context, s *store.Store) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := s.Stream("probe").Subscribe(c, "probe", store.SubscribeOpts{})
		if err == nil {
			_ = r.Close()
			return false
		}
		require.ErrorIs(t, err, store.ErrClosed)
		return true
	}, 30*time.Second, time.Millisecond)
}

// TestCancelledWorkStrandsNoJob: Work is cancelled while its claims may be
// in flight. A claim that committed must reach a handler; one that did not
// must leave its jobs untouched. No job may be left running without a
// handler, and none may lose an attempt (MaxAttempts 1 would make a lost
// attempt a dead job). The cancel lands at a random moment in the first
// few milliseconds, over many rounds, so it hits the claim statement's
// every stage: before it is sent, while it runs, while its rows come back.
func TestCancelledWorkStrandsNoJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		const rounds, perRound = 40, 300
		for round := range rounds {
			q := s.Queue("cancelled")
			batch := make([]store.NewJob, perRound)
			for i := range batch {
				batch[i].Opts.MaxAttempts = 1
			}
			_, err := q.EnqueueMany(c, batch)
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(c)
			done := make(chan error, 1)
			go func() {
				done <- q.Work(wctx, store.WorkOpts{Concurrency: 20, Batch: 20}, func(context.Context, *store.Job) error { return nil })
			}()
			time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
			cancel()
			require.NoError(t, <-done)

			st, err := q.Stats(c)
			require.NoError(t, err)
			require.Zero(t, st.Running, "round %d: a claimed job was left without a handler", round)
			require.Zero(t, st.Dead, "round %d: a job lost its only attempt", round)
			left, err := q.Claim(c, "sweeper", perRound, time.Minute)
			require.NoError(t, err)
			for _, j := range left {
				require.Equal(t, 1, j.Attempts, "round %d: job %d was claimed before without running", round, j.ID)
			}
			_, err = q.AckMany(c, left)
			require.NoError(t, err)
		}
	})
}

// TestCloseLetsHandlersFinishAndSettles: `defer s.Close()` with Work
// running. Close waits for the handler in flight (its context stays alive
// within Grace), acks its job, and only then releases the connections;
// Work returns ErrClosed.
func TestCloseLetsHandlersFinishAndSettles(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		q := s.Queue("deploy")
		id, err := q.Enqueue(c, []byte("in flight"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		started, release := make(chan struct{}), make(chan struct{})
		var cancelled atomic.Bool
		workDone := make(chan error, 1)
		go func() {
			workDone <- q.Work(c, store.WorkOpts{Grace: time.Minute}, func(ctx context.Context, j *store.Job) error {
				close(started)
				<-release
				cancelled.Store(ctx.Err() != nil)
				return nil
			})
		}()
		<-started
		closeDone := make(chan error, 1)
		go func() { closeDone <- s.Close() }()
		shuttingDown(t, c, s)
		select {
		case err := <-closeDone:
			t.Fatalf("Close returned (%v) while a handler was still running", err)
		default:
		}
		close(release)
		require.NoError(t, <-closeDone)
		require.ErrorIs(t, <-workDone, store.ErrClosed, "a loop the store's shutdown stopped says so")
		assert.False(t, cancelled.Load(), "the handler's context lives through the grace period")

		check := e.open(t)
		_, err = check.Queue("deploy").Job(c, id)
		require.ErrorIs(t, err, store.ErrNotFound, "the job was acked before the store closed")
		st, err := check.Queue("deploy").Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Running+st.Ready+st.Dead)
	})
}

// TestHardStopReturnsJobsWithTheirAttempt: Shutdown with a context that
// ends while a handler ignores its grace cancels the handler; the job goes
// back to its queue with its attempt restored, so a deploy never kills a
// job that has one attempt.
func TestHardStopReturnsJobsWithTheirAttempt(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		q := s.Queue("hard")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		started := make(chan struct{})
		workDone := make(chan error, 1)
		go func() {
			workDone <- q.Work(c, store.WorkOpts{Grace: time.Hour}, func(ctx context.Context, j *store.Job) error {
				close(started)
				<-ctx.Done() // only the hard stop ends it
				return ctx.Err()
			})
		}()
		<-started
		hard, cancel := context.WithCancel(c)
		cancel() // a hard stop right away
		require.ErrorIs(t, s.Shutdown(hard), context.Canceled)
		require.ErrorIs(t, <-workDone, store.ErrClosed)

		check := e.open(t)
		j, err := check.Queue("hard").Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		assert.Zero(t, j.Attempts, "the stop, not the job, ended the attempt")
	})
}

// TestLoopsStopWithTheStore: every loop returns an error matching ErrClosed
// when the store shuts down under it, and at once when started on a closed
// store: a supervisor that restarts loops must not spin.
func TestLoopsStopWithTheStore(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		noop := func(context.Context, *store.Job) error { return nil }
		loops := map[string]func() error{
			"Work":          func() error { return s.Queue("q").Work(c, store.WorkOpts{}, noop) },
			"Outbox.Run":    func() error { return s.Outbox("o").Run(c, store.OutboxOpts{}, noop) },
			"Scheduler.Run": func() error { return s.Scheduler("me", store.SchedulerOpts{}).Run(c) },
			"janitor.Run":   func() error { return janitor.New(s, janitor.Opts{}).Run(c) },
			"RunLoop": func() error {
				return s.RunLoop(c, "mine", func(ctx context.Context) error { <-ctx.Done(); return nil })
			},
			"RunLoop returning ctx.Err()": func() error {
				return s.RunLoop(c, "idiomatic", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			},
		}
		var wg sync.WaitGroup
		results := make(chan error, len(loops))
		for _, loop := range loops {
			wg.Go(func() { results <- loop() })
		}
		require.NoError(t, s.Close())
		wg.Wait() // Close waited for every loop; each has returned by now
		close(results)
		for err := range results {
			require.ErrorIs(t, err, store.ErrClosed)
		}
		for name, loop := range loops {
			require.ErrorIs(t, loop(), store.ErrClosed, "%s on a closed store", name)
		}
		_, err = s.Stream("s").Subscribe(c, "c", store.SubscribeOpts{})
		require.ErrorIs(t, err, store.ErrClosed)
		_, err = s.Listen(c, "ch")
		require.ErrorIs(t, err, store.ErrClosed)
	})
}

// TestWorkRejectsANilHandler: a nil handler is a programming error reported
// before any job is claimed, not a panic per job.
func TestWorkRejectsANilHandler(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("nil")
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.ErrorIs(t, q.Work(c, store.WorkOpts{}, nil), store.ErrInvalidArgument)
		require.ErrorIs(t, s.JobQueue[string]("nil").Work(c, store.WorkOpts{}, nil), store.ErrInvalidArgument)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, st.Ready, "nothing was claimed")
	})
}

// TestClosingSchedulerGivesItsLeaseUp: a leader whose store closes resigns,
// so a standby in another store takes over at once rather than after the
// lease's TTL.
func TestClosingSchedulerGivesItsLeaseUp(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		leader := s.Scheduler("leader", store.SchedulerOpts{LeaseTTL: time.Hour})
		done := make(chan error, 1)
		go func() { done <- leader.Run(c) }()
		require.Eventually(t, leader.Leading, 30*time.Second, time.Millisecond)
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, store.ErrClosed)

		other := e.open(t)
		lease, err := other.SchedulerLeader(c)
		require.NoError(t, err)
		assert.Empty(t, lease.Owner, "the lease was given up, not left to expire in an hour")
	})
}

// TestShutdownWaitsForOpenTransactions is the rule for a transaction open
// when the store closes, the same on both engines: Shutdown waits for it
// until its context ends, and it may commit meanwhile; once that context
// ended, its operations and its Commit fail with ErrClosed and it rolls
// back.
func TestShutdownWaitsForOpenTransactions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		t.Run("commits while Shutdown waits", func(t *testing.T) {
			s, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			st := s.Stream("waited")
			tx, err := s.Begin(c)
			require.NoError(t, err)
			_, err = st.PublishTx(c, tx, []byte("committed during shutdown"))
			require.NoError(t, err)
			closeDone := make(chan error, 1)
			go func() { closeDone <- s.Close() }()
			require.Eventually(t, func() bool { // new work is refused from now on
				_, err := st.ReadSince(c, 0, 1)
				return errors.Is(err, store.ErrClosed)
			}, 30*time.Second, time.Millisecond)
			select {
			case err := <-closeDone:
				t.Fatalf("Close returned (%v) with a transaction open", err)
			default:
			}
			_, err = st.PublishTx(c, tx, []byte("still works"))
			require.NoError(t, err)
			require.NoError(t, tx.Commit(c))
			require.NoError(t, <-closeDone)
			evs, err := e.open(t).Stream("waited").ReadSince(c, 0, 10)
			require.NoError(t, err)
			assert.Len(t, evs, 2)
		})
		t.Run("rolls back once the deadline passed", func(t *testing.T) {
			s, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			st := s.Stream("abandoned")
			tx, err := s.Begin(c)
			require.NoError(t, err)
			_, err = st.PublishTx(c, tx, []byte("never committed"))
			require.NoError(t, err)
			short, cancel := context.WithTimeout(c, 100*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, s.Shutdown(short), context.DeadlineExceeded)
			_, err = st.PublishTx(c, tx, nil)
			require.ErrorIs(t, err, store.ErrClosed)
			require.ErrorIs(t, tx.Commit(c), store.ErrClosed)
			require.NoError(t, tx.Rollback(c), "Rollback after the failed Commit is a no-op")
			evs, err := e.open(t).Stream("abandoned").ReadSince(c, 0, 10)
			require.NoError(t, err)
			assert.Empty(t, evs)
		})
	})
}

// TestHandlerSettlesItsOwnJob: handlers that Retry (with a delay of their
// choosing), Fail or Ack their own job and return nil leave it as they
// settled it, and every other job of the same ack batches is acked.
func TestHandlerSettlesItsOwnJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("self-settling")
		const n = 200
		ids, err := q.EnqueueMany(c, make([]store.NewJob, n))
		require.NoError(t, err)
		kind := map[int64]int{}
		for i, id := range ids {
			kind[id] = i % 4 // 0: Retry, 1: Fail, 2: Ack, 3: return nil
		}
		var mu sync.Mutex
		runs := map[int64]int{}
		all := make(chan struct{})
		wctx, cancel := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: 8}, func(ctx context.Context, j *store.Job) error {
				var err error
				switch kind[j.ID] {
				case 0:
					_, err = j.Retry(ctx, time.Hour, "later")
				case 1:
					err = j.Fail(ctx, "no")
				case 2:
					err = j.Ack(ctx)
				}
				mu.Lock()
				runs[j.ID]++
				if len(runs) == n {
					close(all)
				}
				mu.Unlock()
				return err
			})
		}()
		<-all
		cancel()
		require.NoError(t, <-done)
		for id, r := range runs {
			require.Equal(t, 1, r, "job %d ran %d times", id, r)
		}
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Running, "every job a handler returned from is settled")
		assert.Zero(t, st.Ready)
		assert.EqualValues(t, n/4, st.Scheduled, "retried an hour out")
		assert.EqualValues(t, n/4, st.Dead, "failed")
	})
}

// TestAckManySkipsSettledEntries: one settled job in a batch does not sink
// the batch.
func TestAckManySkipsSettledEntries(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("batch")
		_, err := q.EnqueueMany(c, make([]store.NewJob, 5))
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 5, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 5)
		require.NoError(t, jobs[2].Ack(c))
		n, err := q.AckMany(c, append(jobs, nil))
		require.NoError(t, err)
		assert.EqualValues(t, 4, n)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Running+st.Ready)
	})
}

// TestDroppedTransactionDoesNotWaitForTheGC: a Begin()'d transaction that
// is dropped while open holds the SQLite writer slot, or the only pooled
// Postgres connection, until its cleanup runs, which needs a garbage
// collection. With automatic collection off (a quiet program may not
// collect for minutes), the next writer must still get through: the store
// collects when a writer waits while a transaction is open.
func TestDroppedTransactionDoesNotWaitForTheGC(t *testing.T) {
	eachEngineInTurn(t, func(t *testing.T, e *engineEnv) { // SetGCPercent is process-wide
		s := e.open(t, store.WithMaxConns(1))
		c := ctx(t)
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		for range 5 {
			abandon(t, s, c)
			quick, cancel := context.WithTimeout(c, 5*time.Second)
			_, err := s.Stream("after").Publish(quick, []byte("got through"))
			cancel()
			require.NoError(t, err)
		}
	})
}

// TestShutdownIsBoundedByItsContext: a handler that ignores its context
// cannot hold Shutdown past its deadline (plus the hard stop's few seconds
// for cancelled handlers to return), and a second call with a done context
// turns a graceful shutdown in progress into a hard one.
func TestShutdownIsBoundedByItsContext(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		t.Run("a handler that ignores its context", func(t *testing.T) {
			s, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			_, err = s.Queue("stuck").Enqueue(c, nil, store.EnqueueOpts{})
			require.NoError(t, err)
			started, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			go func() {
				_ = s.Queue("stuck").Work(c, store.WorkOpts{Grace: time.Hour}, func(context.Context, *store.Job) error {
					close(started)
					<-release // deaf to its context
					return nil
				})
			}()
			<-started
			short, cancel := context.WithTimeout(c, 200*time.Millisecond)
			defer cancel()
			begun := time.Now()
			require.ErrorIs(t, s.Shutdown(short), context.DeadlineExceeded)
			assert.Less(t, time.Since(begun), 30*time.Second, "bounded by the deadline and the hard stop's wait")
			_, err = s.Stream("x").ReadSince(c, 0, 1)
			require.ErrorIs(t, err, store.ErrClosed)
		})
		t.Run("a second call stops hard", func(t *testing.T) {
			s, err := store.Open(c, e.dsn)
			require.NoError(t, err)
			id, err := s.Queue("second").Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			started := make(chan struct{})
			go func() {
				_ = s.Queue("second").Work(c, store.WorkOpts{Grace: time.Hour}, func(ctx context.Context, j *store.Job) error {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			<-started
			graceful := make(chan error, 1)
			go func() { graceful <- s.Close() }() // would wait an hour's grace, bounded by a minute
			shuttingDown(t, c, s)
			now, cancel := context.WithCancel(c)
			cancel()
			require.ErrorIs(t, s.Shutdown(now), context.Canceled, "its done context cut the handlers short")
			require.ErrorIs(t, <-graceful, context.Canceled, "both calls report the one shutdown")
			j, err := e.open(t).Queue("second").Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobPending, j.State, "released by the hard stop")
			assert.Zero(t, j.Attempts)
		})
	})
}

// TestHardStopRollsBackOpenTransactions: a transaction a hard stop finds
// open is rolled back then and there, so it holds no lock, writer slot or
// connection once Shutdown returned, even if its owner never touches it
// again.
func TestHardStopRollsBackOpenTransactions(t *testing.T) {
	eachEngineAlone(t, func(t *testing.T, e *engineEnv) { // alone: the lock must be free within 5 s
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = s.Stream("locked").Key("k").LockCompactionHeadTx(c, tx)
		require.NoError(t, err)
		now, cancel := context.WithCancel(c)
		cancel()
		require.ErrorIs(t, s.Shutdown(now), context.Canceled)

		other := e.open(t)
		quick, stop := context.WithTimeout(c, 5*time.Second)
		defer stop()
		require.NoError(t, other.InTx(quick, func(ctx context.Context, tx2 store.Tx) error {
			_, err := other.Stream("locked").Key("k").LockCompactionHeadTx(ctx, tx2)
			return err
		}), "the abandoned transaction's lock is gone")
		require.ErrorIs(t, tx.Commit(c), store.ErrClosed)
	})
}

// TestUnstorableTextIsRefusedOrCleaned: PostgreSQL's text refuses NUL and
// invalid UTF-8, which SQLite would store. Names that would carry them are
// refused on both engines; a handler's error text is cleaned, so its job is
// always settled.
func TestUnstorableTextIsRefusedOrCleaned(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("causes")
		ids, err := q.EnqueueMany(c, []store.NewJob{{Opts: store.EnqueueOpts{MaxAttempts: 1}}, {}})
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(c)
		var handled sync.WaitGroup
		handled.Add(2)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }},
				func(ctx context.Context, j *store.Job) error {
					defer handled.Done()
					if j.ID == ids[0] {
						return store.Permanent(errors.New("bad utf8 \xff\xfe"))
					}
					return errors.New("bad\x00nul")
				})
		}()
		handled.Wait()
		cancel()
		require.NoError(t, <-done)
		dead, err := q.Job(c, ids[0])
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, dead.State)
		assert.Contains(t, dead.LastError, "bad utf8 \uFFFD")
		retried, err := q.Job(c, ids[1])
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, retried.State)
		assert.Contains(t, retried.LastError, "bad\uFFFDnul")

		for _, bad := range []string{"nul\x00", "bad \xff", ""} {
			_, err := s.Stream("s").ReadFromConsumer(c, bad, 10)
			require.ErrorIs(t, err, store.ErrInvalidName, "%q", bad)
			require.ErrorIs(t, s.Stream("s").SaveOffset(c, bad, 1), store.ErrInvalidName, "%q", bad)
			_, err = q.Claim(c, bad, 1, time.Minute)
			require.ErrorIs(t, err, store.ErrInvalidName, "%q", bad)
		}
		require.ErrorIs(t, q.Work(c, store.WorkOpts{Worker: "w\x00"}, func(context.Context, *store.Job) error { return nil }),
			store.ErrInvalidName, "bad options fail Work at once")
	})
}

// TestInTxRollsBackWhenItsFunctionExitsTheGoroutine: a function that leaves
// through runtime.Goexit (t.FailNow inside an InTx, for one) neither
// returns nor panics; its transaction must still end, or it would hold the
// writer slot or a connection until the store closes.
func TestInTxRollsBackWhenItsFunctionExitsTheGoroutine(t *testing.T) {
	eachEngineAlone(t, func(t *testing.T, e *engineEnv) { // alone: the writer slot must be free within 5 s
		s := e.open(t, store.WithMaxConns(1))
		c := ctx(t)
		st := s.Stream("goexit")
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
				if _, err := st.PublishTx(ctx, tx, []byte("never committed")); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		quick, cancel := context.WithTimeout(c, 5*time.Second)
		defer cancel()
		_, err := st.Publish(quick, []byte("after"))
		require.NoError(t, err, "the writer slot or connection is free")
		require.Eventually(t, func() bool {
			evs, err := st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			return len(evs) == 1 && string(evs[0].Payload) == "after"
		}, 30*time.Second, time.Millisecond)
	})
}

// TestWorkOptionsMakeSenseAlone: a Visibility shorter than the default
// Timeout, set alone, takes a Timeout that fits it instead of failing.
func TestWorkOptionsMakeSenseAlone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("short-lease")
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		ran := make(chan time.Duration, 1)
		wctx, cancel := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Visibility: 9 * time.Second}, func(ctx context.Context, j *store.Job) error {
				deadline, _ := ctx.Deadline()
				ran <- time.Until(deadline)
				return nil
			})
		}()
		left := <-ran
		cancel()
		require.NoError(t, <-done)
		assert.LessOrEqual(t, left, 6*time.Second, "the handler's timeout is two thirds of the lease")
		// An explicit Timeout past the lease is fine: Work heartbeats the
		// claims of handlers that run long (see TestHeartbeatKeepsLongHandler).
		short, cancelShort := context.WithTimeout(c, 200*time.Millisecond)
		defer cancelShort()
		require.NoError(t, q.Work(short, store.WorkOpts{Visibility: 9 * time.Second, Timeout: 10 * time.Second},
			func(context.Context, *store.Job) error { return nil }))
	})
}

// TestZeroValuesDoNotPanic: library code never panics, not even on a
// zero-value handle or a nil *Store; they report ErrInvalidArgument.
func TestZeroValuesDoNotPanic(t *testing.T) {
	c := ctx(t)
	var nilStore *store.Store
	var q store.Queue
	var st store.Stream
	var sch store.Schedule
	noop := func(context.Context, *store.Job) error { return nil }
	calls := map[string]func() error{
		"Queue.Enqueue":    func() error { _, err := q.Enqueue(c, nil, store.EnqueueOpts{}); return err },
		"Queue.Claim":      func() error { _, err := q.Claim(c, "w", 1, time.Minute); return err },
		"Queue.Work":       func() error { return q.Work(c, store.WorkOpts{}, noop) },
		"Stream.Publish":   func() error { _, err := st.Publish(c, nil); return err },
		"Stream.ReadSince": func() error { _, err := st.ReadSince(c, 0, 1); return err },
		"Schedule.Pause":   func() error { return sch.Pause(c) },
		"nil Store.Queue":  func() error { _, err := nilStore.Queue("q").Enqueue(c, nil, store.EnqueueOpts{}); return err },
		"nil Store.Begin":  func() error { _, err := nilStore.Begin(c); return err },
		"nil Store.InTx":   func() error { return nilStore.InTx(c, func(context.Context, store.Tx) error { return nil }) },
		"nil Store.Stats":  func() error { _, err := nilStore.Stats(c); return err },
		"nil Store.Scheduler.RunOnce": func() error {
			_, err := nilStore.Scheduler("me", store.SchedulerOpts{}).RunOnce(c)
			return err
		},
		"nil Store.Maintenance": func() error { _, err := nilStore.Maintenance().ApplyRetention(c, 10); return err },
		"nil Store.Shutdown":    func() error { return nilStore.Shutdown(c) },
	}
	for name, call := range calls {
		require.NotPanics(t, func() {
			require.ErrorIs(t, call(), store.ErrInvalidArgument, name)
		}, name)
	}
}

// TestHardShutdownFailsATxOperationWithErrClosed: an operation of an open
// transaction that a hard Shutdown rolled back under it fails with
// ErrClosed, as Shutdown promises, and nothing it wrote is stored.
func TestHardShutdownFailsATxOperationWithErrClosed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		entered, release := make(chan struct{}), make(chan struct{})
		mw := func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				if in.Batch {
					close(entered)
					<-release
				}
				return next(ctx, in)
			}
		}
		s := e.open(t, store.WithInsertMiddleware(mw))
		c := ctx(t)
		q := s.Queue("q")
		done := make(chan error, 1)
		go func() {
			done <- s.InTx(c, func(c context.Context, tx store.Tx) error {
				_, err := q.EnqueueTx(c, tx, []byte("first"), store.EnqueueOpts{})
				require.NoError(t, err)
				_, err = q.EnqueueManyTx(c, tx, []store.NewJob{{Payload: []byte("a")}, {Payload: []byte("b")}})
				return err
			})
		}()
		<-entered
		hard, cancel := context.WithCancel(c)
		cancel()
		_ = s.Shutdown(hard) // hard: rolls the open transaction back and returns
		close(release)
		err := <-done
		require.ErrorIs(t, err, store.ErrClosed, "the rolled-back transaction's operation")
		st, err := e.open(t).Queue("q").Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Ready, "nothing of the transaction is stored")
	})
}

// TestGracefulShutdownLetsARunningWriteFinish: an auto-commit EnqueueMany
// that began before a graceful Shutdown (held in insert middleware) is
// still running when the store drains and new operations fail with
// ErrClosed. Shutdown waits for it (the test releases it only once
// Shutdown waits for running operations, read from the goroutines' stacks,
// and fails if Shutdown returns first); it stores its batch and returns
// its ids. In a Tx, the same batch finishes and commits. A hard Shutdown
// does not wait for the write (held in middleware, out of the engine's
// reach, it gets the hard stop's 5 s and Shutdown says it is still
// running): the write fails with ErrClosed and stores nothing. (Before: the graceful Shutdown closed the connections under the
// write, which failed with ErrClosed.) In a transaction the application
// began and adopted (AdoptPgx, AdoptSQL), which the store does not wait
// for, the operation counts as running like an auto-commit one: Shutdown
// waits for it, an operation that starts in an adopted transaction once
// the store drains fails with ErrClosed, and what the finished one wrote
// commits when the application commits. (Before: Shutdown did not wait
// and closed the store under the running operation, and an operation
// adopted transactions started while the store drained ran.)
func TestGracefulShutdownLetsARunningWriteFinish(t *testing.T) {
	forms := []string{"graceful", "graceful in a Tx", "graceful in an adopted Tx", "hard"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, i int) {
		form := forms[i]
		c := ctx(t)
		entered, release := make(chan struct{}), make(chan struct{})
		s, err := store.Open(c, e.dsn, store.WithInsertMiddleware(func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				if in.Batch {
					close(entered)
					<-release
				}
				return next(ctx, in)
			}
		}))
		require.NoError(t, err)
		q := s.Queue("running")
		jobs := make([]store.NewJob, 500)
		type result struct {
			ids []int64
			err error
		}
		// In the adopted form: the application's transaction the
		// batch runs in (adopted, ended by commit), and another
		// one adopted before Shutdown (other).
		var adopted, other store.Tx
		var commit func() error
		if form == "graceful in an adopted Tx" {
			adopted, commit, _ = adoptedTx(t, e, s)
			other = adoptedReader(t, e, s)
		}
		done := make(chan result, 1)
		go func() {
			var r result
			if form == "graceful in an adopted Tx" {
				r.ids, r.err = q.EnqueueManyTx(c, adopted, jobs)
			} else if form == "graceful in a Tx" {
				r.err = s.InTx(c, func(c context.Context, tx store.Tx) error {
					var err error
					r.ids, err = q.EnqueueManyTx(c, tx, jobs)
					return err
				})
			} else {
				r.ids, r.err = q.EnqueueMany(c, jobs)
			}
			done <- r
		}()
		<-entered

		sctx, cancel := context.WithCancel(c)
		defer cancel()
		if form == "hard" {
			cancel()
		}
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(sctx) }()
		if form == "hard" {
			require.ErrorIs(t, <-shut, context.Canceled)
			close(release)
			r := <-done
			require.ErrorIs(t, r.err, store.ErrClosed)
			assert.Nil(t, r.ids)
		} else {
			// The store drains: new operations are refused.
			require.Eventually(t, func() bool {
				_, err := s.Stream("probe").ReadSince(c, 0, 1)
				return errors.Is(err, store.ErrClosed)
			}, 30*time.Second, time.Millisecond)
			if form == "graceful in an adopted Tx" {
				_, err := s.Stream("probe").ReadSinceTx(c, other, 0, 1)
				require.ErrorIs(t, err, store.ErrClosed, "an operation that starts in an adopted transaction once the store drains")
				_, err = other.Exec(c, "SELECT 1")
				require.ErrorIs(t, err, store.ErrClosed, "business SQL through an adopted Tx once the store drains")
			}
			waitFor(t, "Shutdown waits for the running write", func() bool {
				select {
				case err := <-shut:
					t.Fatalf("Shutdown returned (%v) while a write was running", err)
				default:
				}
				if form == "graceful in a Tx" {
					return goroutineWaits("TestGracefulShutdownLetsARunningWriteFinish", "store.waitTxs")
				}
				return goroutineWaits("TestGracefulShutdownLetsARunningWriteFinish", "store.waitOps")
			})
			close(release)
			r := <-done
			require.NoError(t, r.err)
			require.Len(t, r.ids, len(jobs))
			require.NoError(t, <-shut)
			if commit != nil {
				_, err := q.EnqueueTx(c, adopted, []byte("late"), store.EnqueueOpts{})
				require.ErrorIs(t, err, store.ErrClosed, "the store is closed")
				require.NoError(t, commit(), "the adopted transaction is the application's to end")
			}
		}
		st, err := e.open(t).Queue("running").Stats(c)
		require.NoError(t, err)
		if form == "hard" {
			assert.Zero(t, st.Ready, "the failed write stored nothing")
		} else {
			assert.EqualValues(t, len(jobs), st.Ready, "the write Shutdown waited for stored its batch")
		}
	})
}

// adoptedReader is a transaction begun with the application's own driver
// and adopted into s, which does not take SQLite's write lock (SQLite: a
// read-only transaction; the driver begins others IMMEDIATE); rolled back
// when the test ends.
func adoptedReader(t *testing.T, e *engineEnv, s *store.Store) store.Tx {
	t.Helper()
	if e.name == "pg" {
		tx, _, _ := adoptedTx(t, e, s)
		return tx
	}
	stx, err := e.sqlDB(t).BeginTx(ctx(t), &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = stx.Rollback() })
	tx, err := s.AdoptSQL(stx)
	require.NoError(t, err)
	return tx
}
