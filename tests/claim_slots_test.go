package tests

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Work has up to two claims in flight on PostgreSQL (one on SQLite, which
// runs one write at a time), each reserving its handler slots before it is
// sent (issue 18). These tests hold claims open with a statement hook: the
// hook runs after ClaimJobs, before Claim returns its jobs (on PostgreSQL
// after the claim committed, on SQLite inside its transaction).

// claimsInFlight is how many claims a worker keeps in flight on e.
func claimsInFlight(e *engineEnv) int {
	if e.name == "lite" {
		return 1
	}
	return 2
}

// unfinishedClaims counts the queue's jobs the database (db, of e) holds
// claimed whose handler has not returned (finished holds the ids of those
// that did, stored before they return).
func unfinishedClaims(t *testing.T, e *engineEnv, db *sql.DB, queue string, finished *sync.Map) int {
	t.Helper()
	table := "alkstore.jobs"
	if e.name == "lite" {
		table = "alk_jobs"
	}
	rows, err := db.QueryContext(ctx(t), "SELECT id FROM "+table+" WHERE queue = $1 AND state = 'running'", queue)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	// Read after the rows: a job not finished now was not finished when
	// they were read, and its handler held its slot then.
	n := 0
	for _, id := range ids {
		if _, done := finished.Load(id); !done {
			n++
		}
	}
	return n
}

// TestClaimNeverTakesMoreJobsThanFreeSlots: however many claims are in
// flight, the jobs claimed and not yet finished never outnumber
// Concurrency: a claim takes at most the slots it reserved, and the slots
// a claim in flight reserved are not free for the next. The first claim
// is held open, after it took a whole batch, until a second claim ends or
// half a second passes: a worker that sized its next claim by the running
// handlers alone would send one at once and hold twice Concurrency
// (jobs claimed, waiting for a slot, their lease running without a
// heartbeat). Then every handler checks the bound as it starts, through a
// burn-down where handlers finish in random order while claims are in
// flight.
func TestClaimNeverTakesMoreJobsThanFreeSlots(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const concurrency, jobs = 4, 200
		var claims atomic.Int64
		second := make(chan struct{})
		var secondOnce sync.Once
		s := e.openHooked(t, func(name string) {
			if name != "ClaimJobs" {
				return
			}
			switch claims.Add(1) {
			case 1:
				select {
				case <-second:
				case <-time.After(500 * time.Millisecond):
				}
			default:
				secondOnce.Do(func() { close(second) })
			}
		})
		q := s.Queue("slots")
		_, err := q.EnqueueMany(ctx(t), make([]store.NewJob, jobs))
		require.NoError(t, err)

		// One pool for every handler's check: a pool per check (each
		// left open until the test ended) started a server process per
		// handled job, most of this test's cost.
		db := e.sqlDB(t)
		var finished sync.Map
		var handled atomic.Int64
		var worst atomic.Int64
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency, Batch: concurrency}, func(_ context.Context, j *store.Job) error {
				if n := int64(unfinishedClaims(t, e, db, "slots", &finished)); n > worst.Load() {
					worst.Store(n)
				}
				finished.Store(j.ID, true)
				handled.Add(1)
				return nil
			})
		}()
		require.Eventually(t, func() bool { return handled.Load() >= jobs }, time.Minute, time.Millisecond)
		stop()
		require.NoError(t, <-done)
		assert.LessOrEqual(t, worst.Load(), int64(concurrency), "jobs claimed and unfinished beyond Concurrency")
		st, err := q.Stats(ctx(t))
		require.NoError(t, err)
		assert.Zero(t, st.Ready+st.Running, "every job handled and acked")
	})
}

// TestShutdownMidClaimStrandsNoJob: Work is cancelled while its claims
// (two on PostgreSQL, one on SQLite) are held open after ClaimJobs. Work
// must not return before those claims did. On PostgreSQL they committed:
// their jobs reach handlers (which run to the end within Grace) and are
// acked. On SQLite the hook runs inside the claim's transaction, which the
// cancel rolls back: it claims nothing. Either way no job is left running
// without a handler or put back with an attempt spent. (A Work that
// returned first would leave them running: their claims hand them to a
// loop that is gone.)
func TestShutdownMidClaimStrandsNoJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const concurrency, batch = 4, 2
		inFlight := claimsInFlight(e)
		reached := make(chan struct{}, 8)
		release := make(chan struct{})
		var holding atomic.Bool
		holding.Store(true)
		s := e.openHooked(t, func(name string) {
			if name == "ClaimJobs" && holding.Load() {
				reached <- struct{}{}
				<-release
			}
		})
		q := s.Queue("midclaim")
		_, err := q.EnqueueMany(ctx(t), make([]store.NewJob, 10))
		require.NoError(t, err)

		var handled atomic.Int64
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency, Batch: batch}, func(hctx context.Context, _ *store.Job) error {
				handled.Add(1)
				return hctx.Err() // a cancelled handler would fail its job
			})
		}()
		for range inFlight {
			<-reached
		}
		stop()
		holding.Store(false)
		close(release)
		require.NoError(t, <-done)

		took := inFlight * batch
		if e.name == "lite" {
			took = 0
		}
		assert.EqualValues(t, took, handled.Load(), "every job the held claims took reached a handler")
		st, err := q.Stats(ctx(t))
		require.NoError(t, err)
		assert.Zero(t, st.Running, "a claimed job was left without a handler")
		assert.Zero(t, st.Dead, "a job lost an attempt")
		assert.EqualValues(t, 10-took, st.Ready, "the others untouched")
		left, err := q.Claim(ctx(t), "sweeper", 10, time.Minute)
		require.NoError(t, err)
		for _, j := range left {
			assert.Equal(t, 1, j.Attempts, "job %d was claimed before without running", j.ID)
		}
	})
}
