package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAStopLeavingAHungTransactionalHandlerBehindKeepsTheJobsWaitingForIt:
// on SQLite a WorkTx handler's transaction holds the only writer, and
// extends in it the claims of every worker's jobs waiting for that writer
// (their heartbeats and their own transactions need it). When a stop
// leaves behind a handler that ignores its cancelled context, its
// transaction is rolled back 5 s later, and those extensions went with
// it: the waiting jobs' claims had lapsed by then, so a job the stop
// released was not released (left running, its attempt spent, then dead
// with MaxAttempts 1), another worker's WorkTx job found its claim gone
// as its transaction began at last and never ran, and a plain Work
// handler was told its claim was lost (attack56a F7: 4 of 4 runs). They
// must end as a stop promises: released with their attempt given back,
// or, for the workers not stopped, run once and acked.
//
// Three workers of one store, MaxAttempts 1, a Visibility of 2 s: a
// plain Work handler of queue c runs first and waits for the test; then
// two WorkTx workers, on queues a and b, two jobs each (claimed
// together). The first WorkTx handler that finds a job of the other
// queue claimed and waiting for the writer (running, its handler not
// started: on SQLite nothing can move it while this transaction holds
// the writer) hangs, ignoring its context; the others return nil. Once
// the waiting jobs' claims, as committed, have run out (on SQLite), a
// stop comes. Forms: WorkerStop cancels the hung handler's worker alone
// (the others go on: their jobs must run once and be acked, c's handler
// must keep its claim); Shutdown is a graceful Shutdown with a deadline
// far off (Grace 100 ms): every job but the hung one must end acked
// after one run or back in its queue with its attempt; HardShutdown is
// Shutdown with a done context, which cancels the handlers at once, with
// the same promise ("a deploy never kills a job"). Which handler takes
// the writer first is the scheduler's: rounds run until the hang was
// seen twice (on PostgreSQL the first handler hangs; its heartbeats run
// beside it and the same body holds).
func TestAStopLeavingAHungTransactionalHandlerBehindKeepsTheJobsWaitingForIt(t *testing.T) {
	const vis = 2 * time.Second
	eachEngineEachForm(t, []string{"WorkerStop", "Shutdown", "HardShutdown"}, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		seen := 0
		for round := 0; round < 8 && seen < 2; round++ {
			if e.name != "lite" && round == 1 {
				break
			}
			if abandonedWaitersRound(t, c, e, form, round, vis) {
				seen++
			}
			if t.Failed() {
				return
			}
		}
		t.Logf("%d rounds with a hung handler", seen)
		require.Positive(t, seen, "no round saw a handler hang with another worker's job waiting")
	})
}

// abandonedWaitersRound is one round of the test above; it reports
// whether a handler hung.
func abandonedWaitersRound(t *testing.T, c context.Context, e *engineEnv, form, round int, vis time.Duration) bool {
	s := e.open(t)
	name := func(q string) string { return fmt.Sprintf("abandoned-%s-%d-%d", q, form, round) }
	qs := []*store.Queue{s.Queue(name("a")), s.Queue(name("b"))}
	qc := s.Queue(name("c"))
	opts := store.WorkOpts{Visibility: vis, Timeout: 30 * time.Second, Grace: 100 * time.Millisecond,
		Concurrency: 2, Batch: 2, PollInterval: 50 * time.Millisecond}

	var mu sync.Mutex
	runs := map[int64]int{}
	var cLost error
	hangRel := make(chan struct{})
	defer close(hangRel) // the hung handler returns at last: it settles nothing
	cIn, cRel := make(chan struct{}, 1), make(chan struct{})
	var cReleased bool
	defer func() {
		if !cReleased {
			close(cRel)
		}
	}()

	type worker struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func(work func(ctx context.Context) error) worker {
		wc, cancel := context.WithCancel(c)
		w := worker{cancel, make(chan error, 1)}
		go func() { w.done <- work(wc) }()
		return w
	}
	awaitWork := func(w worker, what string) error {
		select {
		case err := <-w.done:
			return err
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: %s has not returned", round, what)
			return nil
		}
	}

	idC, err := qc.Enqueue(c, []byte("c"), store.EnqueueOpts{MaxAttempts: 1})
	require.NoError(t, err)
	wC := start(func(ctx context.Context) error {
		return qc.Work(ctx, opts, func(ctx context.Context, j *store.Job) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			cIn <- struct{}{}
			select {
			case <-cRel:
				return nil
			case <-ctx.Done():
				mu.Lock()
				cLost = context.Cause(ctx)
				mu.Unlock()
				return ctx.Err()
			}
		})
	})
	select {
	case <-cIn: // c's handler runs: its claim needs heartbeats (the writer, on SQLite)
	case <-c.Done():
		t.Fatal("c's handler never ran")
	}

	ids := make([][]int64, 2)
	for i, q := range qs {
		for range 2 {
			id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			ids[i] = append(ids[i], id)
		}
	}
	// waiting reports whether a job of queue i is claimed and its handler
	// has not started.
	waiting := func(i int) bool {
		for _, id := range ids[i] {
			mu.Lock()
			r := runs[id]
			mu.Unlock()
			if r > 0 {
				continue
			}
			if j, err := qs[i].Job(c, id); err == nil && j.State == store.JobRunning {
				return true
			}
		}
		return false
	}
	var hung atomic.Int64
	hungQueue := -1
	hungIn := make(chan struct{})
	handler := func(mine int) store.TxHandler {
		return func(ctx context.Context, _ store.Tx, j *store.Job) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			if hung.Load() == 0 && (e.name != "lite" || waiting(1-mine)) && hung.CompareAndSwap(0, j.ID) {
				hungQueue = mine
				close(hungIn)
				<-hangRel // ignores its context
			}
			return nil
		}
	}
	var wTx [2]worker
	for i, q := range qs {
		wTx[i] = start(func(ctx context.Context) error { return q.WorkTx(ctx, opts, handler(i)) })
	}

	allAcked := func() bool {
		for i, q := range qs {
			for _, id := range ids[i] {
				if _, err := q.Job(c, id); !errors.Is(err, store.ErrNotFound) {
					return false
				}
			}
		}
		return true
	}
wait: // for the hang; or no handler hangs, every job is acked, and the round ends
	for {
		select {
		case <-hungIn:
			break wait
		case <-c.Done():
			t.Fatal(c.Err())
		case <-time.After(10 * time.Millisecond):
			if allAcked() {
				break wait
			}
		}
	}
	hungID := hung.Load()
	if hungID == 0 {
		for _, w := range wTx {
			w.cancel()
			require.NoError(t, awaitWork(w, "a WorkTx worker"))
		}
		cReleased = true
		close(cRel)
		wC.cancel()
		require.NoError(t, awaitWork(wC, "c's worker"))
		mu.Lock()
		defer mu.Unlock()
		for i := range qs {
			for _, id := range ids[i] {
				assert.Equal(t, 1, runs[id], "round %d: job %d ran once", round, id)
			}
		}
		return false
	}

	if e.name == "lite" {
		// The stop comes once the claims of the jobs waiting for the
		// writer have run out as committed (nothing can move them while
		// the hung transaction holds the writer), as a stop that comes
		// later does: a release issued before that was fenced at the time
		// it was issued, and passed on main.
		var until time.Time
		check := func(q *store.Queue, id int64) {
			if j, err := q.Job(c, id); err == nil && j.State == store.JobRunning && j.ClaimExpiresAt != nil && j.ClaimExpiresAt.After(until) {
				until = *j.ClaimExpiresAt
			}
		}
		for i, q := range qs {
			for _, id := range ids[i] {
				if id != hungID {
					check(q, id)
				}
			}
		}
		check(qc, idC)
		select {
		case <-time.After(time.Until(until.Add(vis / 4))):
		case <-c.Done():
			t.Fatal(c.Err())
		}
	}
	reopened := s
	switch form {
	case 0: // the hung handler's worker alone stops
		stopped := time.Now()
		wTx[hungQueue].cancel()
		require.NoError(t, awaitWork(wTx[hungQueue], "the hung handler's worker"))
		t.Logf("round %d: Work returned %v after its stop, without its hung handler", round, time.Since(stopped).Round(time.Millisecond))
		returned := time.Now()
		// The other WorkTx worker's jobs run once the writer is free.
		other := 1 - hungQueue
		require.Eventually(t, func() bool {
			for _, id := range ids[other] {
				j, err := qs[other].Job(c, id)
				if err == nil && j.State != store.JobDead {
					return false
				}
			}
			return true
		}, 30*time.Second, 10*time.Millisecond, "round %d: the other worker's jobs were settled", round)
		// c's claim is beaten once the writer is free: extended past a
		// Visibility from then, or found gone (its handler then told).
		require.Eventually(t, func() bool {
			mu.Lock()
			l := cLost
			mu.Unlock()
			if l != nil {
				return true
			}
			j, err := qc.Job(c, idC)
			return err == nil && j.ClaimExpiresAt != nil && j.ClaimExpiresAt.After(returned.Add(vis))
		}, 30*time.Second, 10*time.Millisecond, "round %d: c's claim was beaten once the writer was free", round)
		mu.Lock()
		assert.NoError(t, cLost, "round %d: c's handler was told its claim was lost", round)
		mu.Unlock()
		cReleased = true
		close(cRel)
		require.Eventually(t, func() bool {
			j, err := qc.Job(c, idC)
			return errors.Is(err, store.ErrNotFound) || err == nil && j.State != store.JobRunning
		}, 30*time.Second, 10*time.Millisecond, "round %d: c's job was settled", round)
		wTx[other].cancel()
		require.NoError(t, awaitWork(wTx[other], "the other WorkTx worker"))
		wC.cancel()
		require.NoError(t, awaitWork(wC, "c's worker"))
	default: // a graceful Shutdown with a deadline far off, or a hard one
		sc, cancel := context.WithTimeout(c, 60*time.Second)
		if form == 2 {
			cancel()
		}
		stopped := time.Now()
		err := s.Shutdown(sc)
		cancel()
		t.Logf("round %d: Shutdown returned %v after %v", round, err, time.Since(stopped).Round(time.Millisecond))
		for _, w := range append(wTx[:], wC) {
			require.ErrorIs(t, awaitWork(w, "a worker"), store.ErrClosed)
		}
		reopened = e.open(t)
	}

	mu.Lock()
	defer mu.Unlock()
	check := func(q *store.Queue, id int64, what string) {
		j, err := reopened.Queue(q.Name()).Job(c, id)
		if errors.Is(err, store.ErrNotFound) {
			assert.Equal(t, 1, runs[id], "round %d: %s %d, acked, ran once", round, what, id)
			return
		}
		if !assert.NoError(t, err) {
			return
		}
		t.Logf("round %d: %s %d: %s, attempts %d (%q), run %d times", round, what, id, j.State, j.Attempts, j.LastError, runs[id])
		ok := assert.Equal(t, store.JobPending, j.State, "round %d: %s %d, acked or released", round, what, id)
		ok = assert.Equal(t, 0, j.Attempts, "round %d: %s %d: released with its attempt given back", round, what, id) && ok
		ok = assert.LessOrEqual(t, runs[id], 1, "round %d: %s %d ran at most once", round, what, id) && ok
		if !ok {
			t.Logf("round %d: %s %d ended %s, attempts %d (%q), its handler run %d times", round, what, id, j.State, j.Attempts, j.LastError, runs[id])
		}
	}
	for i, q := range qs {
		for _, id := range ids[i] {
			if id == hungID {
				continue
			}
			what := "a job of the hung handler's worker"
			if i != hungQueue {
				what = "another WorkTx worker's job"
				if form == 0 {
					_, err := q.Job(c, id)
					assert.ErrorIs(t, err, store.ErrNotFound, "round %d: %s %d, left to run, was acked", round, what, id)
				}
			}
			check(q, id, what)
		}
	}
	check(qc, idC, "the plain Work job")
	if form == 0 {
		_, err := qc.Job(c, idC)
		assert.ErrorIs(t, err, store.ErrNotFound, "round %d: the plain Work job, left to run, was acked", round)
	}
	return true
}
