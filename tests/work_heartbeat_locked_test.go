package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// heldRowRun is a job's run while the application holds the job's row in
// a transaction that cancelled it (CancelTx), open across more than three
// of the worker's leases, then ended: rolled back (commit false) or
// committed. It returns what the run saw.
type heldRowRun struct {
	runs     int      // how many times a handler ran the job (either store)
	lost     []string // the causes a handler was told its claim was lost
	extended bool     // after the rollback the worker's claim held, extended past it
	state    store.JobState
	gone     bool // the job was acked (deleted)
	locked   int  // HeartbeatLockedJob statements run
}

func runWithHeldRow(t *testing.T, e *engineEnv, commit bool) heldRowRun {
	// A warm pool and a 1.5 s lease: at load 48 a beat that had to open a
	// connection against a 600 ms lease lost the claim before the row was
	// ever found held (the machine's cost, not what is tested here).
	const visibility = 1500 * time.Millisecond
	var counts stmtCounts
	s := e.openHookedWarm(t, counts.hook)
	c := ctx(t)
	q := s.Queue("held-row")
	id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
	require.NoError(t, err)

	var mu sync.Mutex
	var res heldRowRun
	started, release := make(chan struct{}), make(chan struct{})
	ended := make(chan struct{})
	handler := func(ctx context.Context, j *store.Job) error {
		mu.Lock()
		res.runs++
		first := res.runs == 1
		mu.Unlock()
		if first {
			close(started)
			defer close(ended)
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			if cause := context.Cause(ctx); errors.Is(cause, store.ErrClaimLost) {
				mu.Lock()
				res.lost = append(res.lost, cause.Error())
				mu.Unlock()
			}
			return context.Cause(ctx)
		}
	}
	problem := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(res.lost) > 0 || res.runs > 1
	}
	wc, stop := context.WithCancel(c)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		if err := q.Work(wc, store.WorkOpts{Concurrency: 1, Visibility: visibility, Timeout: time.Minute}, handler); err != nil && wc.Err() == nil {
			t.Errorf("Work: %v", err)
		}
	})
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not start")
	}

	// The application's transaction: it cancels the running job (on
	// PostgreSQL its row stays locked, on SQLite the transaction holds the
	// writer) and stays open across more than three leases, deliberately.
	tx, err := s.Begin(c)
	require.NoError(t, err)
	require.NoError(t, q.CancelTx(c, tx, id))
	heldUntil := time.Now().Add(3*visibility + visibility/2)
	for time.Now().Before(heldUntil) && !problem() {
		time.Sleep(10 * time.Millisecond)
	}
	var endedAt time.Time
	if commit {
		require.NoError(t, tx.Commit(c))
		endedAt = time.Now()
		select { // the handler is told, and returns
		case <-ended:
		case <-c.Done():
			t.Fatal("the handler was not told its job was cancelled")
		}
	} else {
		require.NoError(t, tx.Rollback(c))
		endedAt = time.Now()
		// The worker's claim must hold: its lease extended past the
		// rollback (or the run fails: the handler told its claim is lost).
		for !problem() && c.Err() == nil {
			j, err := q.Job(c, id)
			require.NoError(t, err)
			require.Equal(t, store.JobRunning, j.State)
			if j.ClaimExpiresAt != nil && j.ClaimExpiresAt.After(endedAt) {
				res.extended = true
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if res.extended {
			// Another machine working the queue, at once: it must find
			// nothing to take.
			thief := e.open(t)
			wg.Go(func() {
				_ = thief.Queue(q.Name()).Work(wc, store.WorkOpts{Concurrency: 1, Visibility: visibility,
					Timeout: time.Minute, PollInterval: 5 * time.Millisecond}, handler)
			})
			deadline := time.Now().Add(visibility)
			for time.Now().Before(deadline) && !problem() {
				time.Sleep(10 * time.Millisecond)
			}
		}
		close(release)
		select {
		case <-ended:
		case <-c.Done():
			t.Fatal("the handler did not return")
		}
	}
	// Settled: wait until nothing of the queue runs.
	for c.Err() == nil {
		st, err := q.Stats(c)
		require.NoError(t, err)
		if st.Running == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	wg.Wait()
	j, err := q.Job(c, id)
	if errors.Is(err, store.ErrNotFound) {
		res.gone = true
	} else {
		require.NoError(t, err)
		res.state = j.State
	}
	res.locked = counts.count("HeartbeatLockedJob")
	return res
}

// TestHeartbeatWaitsForRowLockOfRolledBackTx (PostgreSQL): a running
// job's row is held by the application's transaction (a CancelTx in an
// open transaction) across more than three leases, then the transaction
// rolls back. The worker's claim must survive: the handler is never told
// its claim is lost, the claim is extended past the rollback, another
// store working the queue finds nothing to take, and the job runs once
// and is acked. Before the fix (HeartbeatJobs' SKIP LOCKED alone, commit
// 703994a) it fails during the hold: the beats skipped the locked row,
// its lease ran out, and the next beat told the handler "job N:
// heartbeat: claim lost" (review54b F3).
//
// PostgreSQL only: on SQLite the application's transaction holds the
// writer slot, not a row, and every other process waits for the slot
// too; when it ends, whoever takes the slot first decides, so a lease
// that ran out meanwhile cannot be kept safely (a claim in another
// process may take the job first). There the worker's claim is lost as
// it always was once its lease ran out; the committed form below runs on
// both engines.
func TestHeartbeatWaitsForRowLockOfRolledBackTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("SQLite holds no row apart from the writer slot: see the comment")
		}
		res := runWithHeldRow(t, e, false)
		require.Empty(t, res.lost, "the handler was told its claim was lost")
		require.Equal(t, 1, res.runs, "the job ran more than once")
		require.True(t, res.extended, "the claim was not extended past the rollback")
		require.True(t, res.gone, "the job was not acked (state %s)", res.state)
		require.NotZero(t, res.locked, "no heartbeat waited for the row's lock")
	})
}

// TestHeartbeatLosesClaimToCommittedCancel: the same hold, ended by a
// commit: the Cancel took the claim, so the handler is told its claim
// is lost (cancelled), the job ends cancelled and runs only once. On
// PostgreSQL the heartbeat waiting for the row's lock finds the claim
// gone when the lock comes.
func TestHeartbeatLosesClaimToCommittedCancel(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		res := runWithHeldRow(t, e, true)
		require.Equal(t, 1, res.runs, "the job ran more than once")
		require.NotEmpty(t, res.lost, "the handler was not told its claim was lost")
		require.False(t, res.gone)
		require.Equal(t, store.JobCancelled, res.state, fmt.Sprint(res.lost))
	})
}
