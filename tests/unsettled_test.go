package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// failFirstAck makes the database refuse the ack of the jobs whose ids are
// from lo to hi on their first attempt: a real fault in the settle's own
// statement, not a mock. A worker's ack deletes the job (the queue keeps
// no completed jobs), so a trigger raises on that DELETE; the jobs' next
// attempt is acked. Test-only SQL: the library's own SQL lives in queries/.
func failFirstAck(t *testing.T, e *engineEnv, s *store.Store, lo, hi int64) {
	t.Helper()
	refuse(t, e, s, "DELETE", fmt.Sprintf("OLD.id BETWEEN %d AND %d AND OLD.attempts = 1", lo, hi))
}

// refuse creates a trigger that raises "injected fault" on the jobs
// table's op (DELETE or UPDATE) for the rows that match when.
func refuse(t *testing.T, e *engineEnv, s *store.Store, op, when string) {
	t.Helper()
	c := ctx(t)
	stmts := []string{fmt.Sprintf(`CREATE TRIGGER test_refuse BEFORE %s ON alk_jobs
		WHEN %s BEGIN SELECT RAISE(ABORT, 'injected fault'); END`, op, when)}
	if e.name == "pg" {
		stmts = []string{`CREATE FUNCTION public.test_refuse() RETURNS trigger LANGUAGE plpgsql
			AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$`,
			fmt.Sprintf(`CREATE TRIGGER test_refuse BEFORE %s ON alkstore.jobs FOR EACH ROW
			WHEN (%s) EXECUTE FUNCTION public.test_refuse()`, op, when)}
	}
	tx, err := s.Begin(c)
	require.NoError(t, err)
	for _, stmt := range stmts {
		_, err := tx.Exec(c, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(c))
}

// A retry the database refuses (the lifecycle's own settle of a failed
// run, one UPDATE, not Work's batched ack) gives exactly one JobUnsettled
// with the database's error and the outcome it tried; the job, still
// running under its claim, runs again once the claim lapses.
func TestClientJobEventsWhenTheRetryFails(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		var ahead atomic.Int64 // moves the store's clock past the claim's lapse
		s := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }))
		q := s.Queue("jobs")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		// The retry sets the job pending; a claim or a heartbeat keeps it running.
		refuse(t, e, s, "UPDATE", fmt.Sprintf("OLD.id = %d AND OLD.attempts = 1 AND NEW.state = 'pending'", id))
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		all := cl.Subscribe(0)
		defer all.Close()
		require.NoError(t, cl.Handle(q, store.WorkOpts{Visibility: time.Hour, PollInterval: 20 * time.Millisecond},
			func(ctx context.Context, j *store.Job) error {
				if j.Attempts == 1 {
					return errors.New("boom")
				}
				return nil
			}))
		require.NoError(t, cl.Start(c))
		next := func() client.JobEvent {
			select {
			case ev := <-all.C():
				return ev
			case <-c.Done():
				t.Fatal("an event is missing")
			}
			return client.JobEvent{}
		}
		ev := next()
		assert.Equal(t, client.JobUnsettled, ev.Kind)
		assert.Equal(t, store.OutcomeRetried, ev.Result.Outcome)
		assert.ErrorContains(t, ev.Result.SettleErr, "injected fault")
		assert.EqualError(t, ev.Err, "boom")
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, j.State, "not lost: held by its claim until it lapses")

		ahead.Store(int64(2 * time.Hour)) // the claim has lapsed
		ev = next()
		assert.Equal(t, client.JobCompleted, ev.Kind)
		assert.Equal(t, 2, ev.Job.Attempts)
		require.NoError(t, cl.Stop(c))
		select {
		case ev, ok := <-all.C():
			require.False(t, ok, "an extra event: %+v", ev)
		default:
		}
	})
}

// A settle the database refuses gives exactly one JobUnsettled event, with
// the database's error in Result.SettleErr, and loses nothing: the job
// runs again once its claim lapses. In Work's batched ack, the refused job
// fails only itself: the jobs batched with it complete (each with one
// JobCompleted), rather than all being reported unsettled and run again.
//
// The batch is forced: a first job's result function holds the ack loop
// while the faulty job and its batch mates return, and the worker has
// claimed a follower into each slot they freed (so each had handed its job
// to the ack loop) before it is let go.
func TestClientJobEventsWhenTheAckFails(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) { ackFaultEvents(t, e, false) })
}

// When the database refuses the ack of every job of a batch (as when it
// is down), every one of them gets exactly one JobUnsettled, none is
// reported completed, and each runs again once its claim lapses.
func TestClientJobEventsWhenEveryAckOfABatchFails(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) { ackFaultEvents(t, e, true) })
}

// ackFaultEvents forces a batch of Work's acks holding a job whose ack the
// database refuses and its mates, whose acks it refuses too when allFail,
// and checks each job's events.
func ackFaultEvents(t *testing.T, e *engineEnv, allFail bool) {
	c := ctx(t)
	var ahead atomic.Int64 // moves the store's clock past the claims' lapse
	s := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }))
	q := s.Queue("jobs")
	cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
	all := cl.Subscribe(0)
	defer all.Close()

	const mates = 3
	const slots = mates + 2 // the lead, the faulty job and its mates
	ids := map[int64]string{}
	enqueue := func(k string) int64 {
		id, err := q.Enqueue(c, []byte(k), store.EnqueueOpts{})
		require.NoError(t, err)
		ids[id] = k
		return id
	}
	enqueue("lead")
	faulty := enqueue("faulty")
	last := faulty
	for i := range mates {
		id := enqueue(fmt.Sprint("mate", i))
		if allFail {
			last = id // ids grow: the lead's is below, the followers' above
		}
	}
	failFirstAck(t, e, s, faulty, last)
	refused := map[string]bool{"faulty": true}
	for i := range mates {
		refused[fmt.Sprint("mate", i)] = allFail
	}

	started := make(chan string, 4*slots)
	leadGo, restGo, followersGo := make(chan struct{}), make(chan struct{}), make(chan struct{})
	leadHeld, leadLet := make(chan struct{}), make(chan struct{})
	defer func() { // on a failure, let every handler return so Close does not wait
		for _, ch := range []chan struct{}{leadGo, restGo, followersGo, leadLet} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}()
	opts := store.WorkOpts{Concurrency: slots, Visibility: time.Hour, PollInterval: 20 * time.Millisecond}
	require.NoError(t, cl.Handle(q, opts, func(ctx context.Context, j *store.Job) error {
		k := string(j.Payload)
		if j.Attempts > 1 {
			started <- k + " again"
			return nil
		}
		started <- k
		switch {
		case k == "lead":
			// Runs on the ack loop, after the lead's ack: holds it.
			j.OnResult(func(store.JobResult) { close(leadHeld); <-leadLet })
			<-leadGo
		case k == "follower":
			<-followersGo
		default:
			<-restGo
		}
		return nil
	}))
	require.NoError(t, cl.Start(c))
	for range slots {
		<-started
	}
	for range slots { // claimed only as slots free up
		enqueue("follower")
	}
	close(leadGo)
	<-leadHeld // the ack loop holds on the lead's result
	close(restGo)
	for range slots { // every slot was freed: each job was handed to the ack loop
		require.Equal(t, "follower", <-started)
	}
	close(leadLet) // the next batch: the faulty job and its mates

	got := map[string][]client.JobEvent{}
	next := func() client.JobEvent {
		select {
		case ev := <-all.C():
			got[ids[ev.Job.ID]] = append(got[ids[ev.Job.ID]], ev)
			return ev
		case <-c.Done():
			t.Fatal("events missing", got)
		}
		return client.JobEvent{}
	}
	for range 2 + mates {
		next()
	}
	require.Len(t, got["lead"], 1)
	assert.Equal(t, client.JobCompleted, got["lead"][0].Kind)
	again := 0
	for k, refused := range refused {
		require.Len(t, got[k], 1, "%s: %+v", k, got[k])
		ev := got[k][0]
		if !refused {
			require.Equal(t, client.JobCompleted, ev.Kind, "%s: %+v", k, ev.Result)
			assert.NoError(t, ev.Result.SettleErr)
			continue
		}
		again++
		require.Equal(t, client.JobUnsettled, ev.Kind, "%s: %+v", k, ev.Result)
		assert.ErrorContains(t, ev.Result.SettleErr, "injected fault")
		assert.Equal(t, store.OutcomeAcked, ev.Result.Outcome)
		j, err := q.Job(c, ev.Job.ID)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, j.State, "%s: not lost: held by its claim until it lapses", k)
	}

	close(followersGo)
	for range slots {
		assert.Equal(t, client.JobCompleted, next().Kind)
	}
	ahead.Store(int64(2 * time.Hour)) // the refused jobs' claims have lapsed
	for range again {
		ev := next()
		k := ids[ev.Job.ID]
		assert.True(t, refused[k], "%s ran again", k)
		assert.Equal(t, client.JobCompleted, ev.Kind, k)
		assert.Equal(t, 2, ev.Job.Attempts, k)
		assert.Len(t, got[k], 2, k)
		_, err := q.Job(c, ev.Job.ID)
		assert.ErrorIs(t, err, store.ErrNotFound, "%s: acked on its second run", k)
	}

	require.NoError(t, cl.Stop(c))
	select {
	case ev, ok := <-all.C():
		require.False(t, ok, "an extra event: %+v", ev)
	default:
	}
	assert.Zero(t, all.Dropped())
}

// Many jobs whose acks the database refuses (a tenth of them, scattered
// over Work's batches, so refused jobs land in both halves of a split):
// every other job runs once and is completed once, and only the refused
// ones are unsettled. The split once stopped when both halves of a batch
// failed, taking that for the database being down, and left hundreds of
// good jobs to run again (fresh-eyes review).
func TestWorkAckSplitFindsEveryRefusedJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.Queue("scattered")
		const n = 400
		jobs := make([]store.NewJob, n)
		for i := range jobs {
			jobs[i] = store.NewJob{Payload: []byte("x")}
		}
		ids, err := q.EnqueueMany(c, jobs)
		require.NoError(t, err)
		refuse(t, e, s, "DELETE", "OLD.id % 10 = 3")
		refused := func(id int64) bool { return id%10 == 3 }

		var mu sync.Mutex
		runs, completed, unsettled := map[int64]int{}, map[int64]int{}, map[int64]int{}
		wctx, cancel := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: 32, Visibility: time.Hour}, func(ctx context.Context, j *store.Job) error {
				j.OnResult(func(r store.JobResult) {
					mu.Lock()
					defer mu.Unlock()
					if r.SettleErr != nil {
						unsettled[j.ID]++
					} else if r.State == store.JobCompleted {
						completed[j.ID]++
					}
				})
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
				return nil
			})
		}()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(completed)+len(unsettled) >= n
		}, time.Minute, 10*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if refused(id) {
				assert.Zero(t, completed[id], "job %d's ack was refused, yet reported completed", id)
				assert.Equal(t, 1, unsettled[id], "job %d", id)
				continue
			}
			assert.Equal(t, 1, runs[id], "job %d runs", id)
			assert.Equal(t, 1, completed[id], "job %d completed reports", id)
			assert.Zero(t, unsettled[id], "job %d reported unsettled", id)
		}
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(n/10), st.Running, "only the refused jobs are left running")
	})
}

// A batch ack that fails for a reason other than its rows (here a lock
// wait that times out, SQLSTATE 55P03) would fail every half alike, so
// Work does not split it: each job's ack waits out the lock once. What is
// checked is the statements the worker sent, not how long they took: every
// job's id is in exactly one ack statement that waited, and each ended at
// the lock timeout (a split sends a job's id again in each half it falls
// into). The batches' own statements skip rows another transaction holds
// (attack56a F2); those jobs are acked apart, by a statement that waits.
// The fresh-eyes review found the split once kept going on such errors.
// Postgres only: lock_timeout is its own (SQLite's busy wait is covered
// by the same refusedRows test, which splits only on a constraint).
func TestWorkAckLockTimeoutIsNotSplitPostgres(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	p := e.pool(t)
	_, err := p.Exec(c, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L', current_database(), '500ms'); END $$`)
	require.NoError(t, err)
	s, stmts := openLogged(t, e)
	q := s.Queue("locked")
	const n = 32
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Payload: []byte("x")}
	}
	ids, err := q.EnqueueMany(c, jobs)
	require.NoError(t, err)

	release := make(chan struct{})
	var mu sync.Mutex
	started, ended := 0, 0
	var errs []error
	wctx, cancel := context.WithCancel(c)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- q.Work(wctx, store.WorkOpts{Concurrency: n, Visibility: time.Hour}, func(ctx context.Context, j *store.Job) error {
			j.OnResult(func(r store.JobResult) {
				mu.Lock()
				defer mu.Unlock()
				ended++
				errs = append(errs, r.SettleErr)
			})
			mu.Lock()
			started++
			mu.Unlock()
			<-release
			return nil
		})
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return started == n }, 30*time.Second, time.Millisecond)
	// Every job's row is locked by another transaction, which waits as
	// long as it likes (lock_timeout 0) and holds them until every ack
	// ended; the worker's acks give up after 500 ms each.
	lk, err := p.Begin(c)
	require.NoError(t, err)
	defer lk.Rollback(c) //nolint:errcheck
	_, err = lk.Exec(c, `SET LOCAL lock_timeout = 0`)
	require.NoError(t, err)
	_, err = lk.Exec(c, `SELECT id FROM alkstore.jobs FOR UPDATE`)
	require.NoError(t, err)
	stmts.reset()
	close(release)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return ended == n }, 2*time.Minute, 10*time.Millisecond)
	mu.Lock()
	for _, err := range errs {
		var pgErr *pgconn.PgError
		if assert.ErrorAs(t, err, &pgErr) {
			assert.Equal(t, "55P03", pgErr.Code)
		}
	}
	mu.Unlock()

	// The batches' statements skip the held rows (SKIP LOCKED: they do
	// not wait); the jobs they left are acked apart by one statement that
	// waits for their locks (CompleteLockedJobs), the jobs left meanwhile
	// joining the next. The statements that waited are checked: every
	// job's id is in exactly one, each ended at the lock timeout, and
	// there are no more of them than batches. (Before, each batch's one
	// AckJobs waited; a first form of the skip waited for each job alone
	// and retried the others every second: 529 statements for 32 jobs.)
	sent := map[int64]int{}
	waits := stmts.all("CompleteLockedJobs")
	for _, st := range waits {
		assert.Equal(t, "55P03", st.code, "CompleteLockedJobs ended at the lock timeout")
		arg, ok := st.arg.([]int64)
		require.True(t, ok, "CompleteLockedJobs's first argument %T", st.arg)
		for _, id := range arg {
			sent[id]++
		}
	}
	batches := stmts.all("AckJobs")
	for _, st := range batches {
		assert.Empty(t, st.code, "AckJobs skips the held rows, it does not wait")
	}
	assert.Empty(t, stmts.all("AckJob"), "no job acked alone")
	assert.LessOrEqual(t, len(waits), len(batches), "lock waits against batches")
	again := map[int64]int{} // job -> times its ack waited, when not once
	for _, id := range ids {
		if sent[id] != 1 {
			again[id] = sent[id]
		}
	}
	assert.Empty(t, again, "jobs whose ack did not wait exactly once, in %d statements that waited (split)", len(waits))
	assert.Len(t, sent, n, "no ack for a job not enqueued here")
	t.Logf("%d jobs: %d batch acks (AckJobs), %d that waited (CompleteLockedJobs)", n, len(batches), len(waits))
	require.NoError(t, lk.Rollback(c))
	cancel()
	require.NoError(t, <-done)
}
