package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkerAckSkipsRowHeldByOpenTx: four jobs run at once; the
// application cancels the lowest-id one in a transaction it keeps open
// (CancelTx: on PostgreSQL the job's row stays locked) while the job's
// handler runs, then all four handlers return nil. On PostgreSQL the
// other three must be acked while the transaction is still open, and the
// held job once it ends: each job runs exactly once, the three are gone,
// and the held job is gone (rolled back: acked) or cancelled (committed:
// the Cancel wins). Rounds alternate rollback and commit.
//
// Before the fix (AckJobs locking its batch's rows without SKIP LOCKED,
// one ack at a time; attack56a F2) it failed on PostgreSQL during the
// hold: the ack of the held job's batch waited on its row and the others'
// acks waited behind it, their claims (no longer heartbeat) ran out after
// one lease, and the worker claimed and ran them again ("job N ran 2
// times"), every round.
//
// On SQLite the application's transaction holds the writer slot, not a
// row: no ack commits until it ends, and a lease that runs out meanwhile
// is lost (README, Engine differences). There the transaction is held
// only until the handlers returned, well inside the lease, and the same
// outcome is required once it ended.
func TestWorkerAckSkipsRowHeldByOpenTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		for round := range 4 {
			commit := round%2 == 1
			t.Run(fmt.Sprintf("round%d-commit-%v", round, commit), func(t *testing.T) {
				ackBehindHeldRow(t, e, fmt.Sprintf("ack-held-%d", round), commit)
			})
		}
	})
}

func ackBehindHeldRow(t *testing.T, e *engineEnv, queue string, commit bool) {
	// A 1.5 s lease and a warm pool, as runWithHeldRow: the machine's
	// load must not lose claims on its own.
	const visibility = 1500 * time.Millisecond
	var counts stmtCounts // PostgreSQL's statements, counted as they are sent
	var s *store.Store
	if e.name == "pg" {
		s = e.openWarmTraced(t, pgStartTracer{counts.hook})
	} else {
		s = e.open(t)
	}
	c := ctx(t)
	q := s.Queue(queue)
	ids := make([]int64, 4)
	for i := range ids {
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		ids[i] = id
	}
	held, rest := ids[0], ids[1:] // the lowest id: AckJobs locks in id order

	var mu sync.Mutex
	runs := map[int64]int{}
	returned := 0
	allStarted, restReturned := make(chan struct{}), make(chan struct{})
	releaseHeld, releaseRest := make(chan struct{}), make(chan struct{})
	handler := func(ctx context.Context, j *store.Job) error {
		mu.Lock()
		runs[j.ID]++
		n := runs[j.ID]
		if n == 1 && len(runs) == len(ids) {
			close(allStarted)
		}
		mu.Unlock()
		if n > 1 { // run again: the failure; end it at once
			return nil
		}
		release := releaseRest
		if j.ID == held {
			release = releaseHeld
		}
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if j.ID != held {
			mu.Lock()
			if returned++; returned == len(rest) {
				close(restReturned)
			}
			mu.Unlock()
		}
		return nil
	}
	twice := func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if runs[id] > 1 {
				return fmt.Sprintf("job %d ran %d times", id, runs[id])
			}
		}
		return ""
	}
	gone := func(id int64) bool {
		_, err := q.Job(c, id)
		if errors.Is(err, store.ErrNotFound) {
			return true
		}
		require.NoError(t, err)
		return false
	}

	wc, stop := context.WithCancel(c)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		if err := q.Work(wc, store.WorkOpts{Concurrency: len(ids), Visibility: visibility, Timeout: time.Minute}, handler); err != nil && wc.Err() == nil {
			t.Errorf("Work: %v", err)
		}
	})
	select {
	case <-allStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("the handlers did not all start")
	}

	// The application's transaction cancels the held job while its
	// handler runs and stays open.
	tx, err := s.Begin(c)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(c) }() // on a failure: before the worker's stop waits for its acks
	require.NoError(t, q.CancelTx(c, tx, held))
	acks := counts.count("AckJobs")
	close(releaseHeld)
	if e.name == "pg" {
		// The held job's ack has begun (its batch's AckJobs) before the
		// others return: their acks come behind it.
		for counts.count("AckJobs") == acks && c.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	close(releaseRest)
	select {
	case <-restReturned:
	case <-c.Done():
		t.Fatal("the handlers did not return")
	}
	if e.name == "pg" {
		// While the transaction is open, the three others are acked
		// (at most three leases: before the fix they ran again after one).
		deadline := time.Now().Add(3 * visibility)
		acked := false
		for !acked && twice() == "" && time.Now().Before(deadline) {
			acked = gone(rest[0]) && gone(rest[1]) && gone(rest[2])
			time.Sleep(5 * time.Millisecond)
		}
		require.Empty(t, twice(), "a finished job ran again while another's row was held")
		require.True(t, acked, "the other jobs were not acked while the held job's row was locked")
		j, err := q.Job(c, held)
		require.NoError(t, err)
		require.Equal(t, store.JobRunning, j.State, "the held job's ack did not wait for its row")
	}
	if commit {
		require.NoError(t, tx.Commit(c))
	} else {
		require.NoError(t, tx.Rollback(c))
	}

	// Settled: the held job's ack ended too.
	for c.Err() == nil {
		st, err := q.Stats(c)
		require.NoError(t, err)
		if st.Running == 0 && st.Ready+st.Scheduled == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	wg.Wait()
	require.Empty(t, twice())
	for _, id := range rest {
		require.True(t, gone(id), "job %d was not acked", id)
	}
	if commit {
		j, err := q.Job(c, held)
		require.NoError(t, err)
		require.Equal(t, store.JobCancelled, j.State, "the committed Cancel did not win")
	} else {
		require.True(t, gone(held), "the held job was not acked after the rollback")
	}
}

// pgStartTracer calls hook with a statement's name as the statement is
// sent (pgHookTracer: once it succeeded), so that a test can wait for a
// statement that may wait for a lock to have begun.
type pgStartTracer struct{ hook stmtHook }

func (h pgStartTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if name := stmtName(d.SQL); name != "" {
		h.hook(name)
	}
	return ctx
}

func (pgStartTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
