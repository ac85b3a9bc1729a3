package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// On SQLite a transactional handler's transaction holds the only writer
// for its whole run, so no heartbeat, claim extension or ack of any other
// worker of the store can run meanwhile. Session 55 had the transaction
// extend the claims of its own worker's waiting jobs; another worker's
// (a second queue's WorkTx worker, as a Client's HandleTx on two queues
// runs, or a plain Work worker's running handlers) lapsed when the
// handler held the writer past their leases, and those jobs ended dead
// without running or were told their claim was lost (attack56a F1: 4 of
// 4 runs). The tests below hold a transactional handler's transaction
// past the lease another worker's job had when the transaction took the
// writer (read once it held it: nothing else can move it then); every
// job must run once and be acked. On PostgreSQL heartbeats run beside the
// transaction and the same bodies pass as they are.

// TestAnotherWorkersRunningHandlerKeepsItsClaimBesideATransactionalHandler:
// a plain Work handler of queue b runs (its claim kept by heartbeats,
// which need the writer on SQLite) while a WorkTx handler of queue a, on
// the same store, holds its transaction until b's lease as it stood has
// run out. Forced in order by barriers, three rounds: on main b's handler
// was told its claim was lost as soon as the writer was free (its
// heartbeat found the lease run out) and its job ran again or died.
func TestAnotherWorkersRunningHandlerKeepsItsClaimBesideATransactionalHandler(t *testing.T) {
	const vis = time.Second
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		for round := range 3 {
			qa, qb := s.Queue(fmt.Sprintf("holder-%d", round)), s.Queue(fmt.Sprintf("beaten-%d", round))
			opts := store.WorkOpts{Visibility: vis, Timeout: 30 * time.Second, Concurrency: 1, Batch: 1}
			var mu sync.Mutex
			runs := map[string]int{}
			var lost error
			bIn, bRel := make(chan struct{}, 1), make(chan struct{})
			aIn, aRel := make(chan struct{}, 1), make(chan struct{})
			wc, cancel := context.WithCancel(c)
			var workers sync.WaitGroup
			workErr := make(chan error, 2)
			workers.Go(func() {
				workErr <- qb.Work(wc, opts, func(ctx context.Context, j *store.Job) error {
					mu.Lock()
					runs["b"]++
					mu.Unlock()
					bIn <- struct{}{}
					select {
					case <-bRel:
						return nil
					case <-ctx.Done():
						mu.Lock()
						lost = context.Cause(ctx)
						mu.Unlock()
						return ctx.Err()
					}
				})
			})
			idB, err := qb.Enqueue(c, []byte("b"), store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			select {
			case <-bIn: // b's handler runs; its claim needs heartbeats
			case <-c.Done():
				t.Fatal("b's handler never ran")
			}
			idA, err := qa.Enqueue(c, []byte("a"), store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			workers.Go(func() {
				workErr <- qa.WorkTx(wc, opts, func(ctx context.Context, _ store.Tx, j *store.Job) error {
					mu.Lock()
					runs["a"]++
					mu.Unlock()
					aIn <- struct{}{}
					select {
					case <-aRel:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
			})
			select {
			case <-aIn: // a's transaction holds the writer (SQLite)
			case <-c.Done():
				t.Fatal("a's handler never ran")
			}
			// b's lease as committed: on SQLite no heartbeat can move it
			// while a's transaction holds the writer. Hold a's transaction
			// until it has run out.
			jb, err := qb.Job(c, idB)
			require.NoError(t, err)
			require.Equal(t, store.JobRunning, jb.State)
			require.NotNil(t, jb.ClaimExpiresAt)
			until := jb.ClaimExpiresAt.Add(vis / 4)
			select {
			case <-time.After(time.Until(until)):
			case <-c.Done():
				t.Fatal(c.Err())
			}
			close(aRel)
			require.Eventually(t, func() bool {
				_, err := qa.Job(c, idA)
				return errors.Is(err, store.ErrNotFound)
			}, 30*time.Second, 10*time.Millisecond, "a's job was acked")
			committed := time.Now()
			// Wait for b's first heartbeat once the writer was free: it
			// extends b's claim past a Visibility from now, or finds it
			// gone and cancels b's handler.
			require.Eventually(t, func() bool {
				mu.Lock()
				l := lost
				mu.Unlock()
				if l != nil {
					return true
				}
				j, err := qb.Job(c, idB)
				return err == nil && j.ClaimExpiresAt != nil && j.ClaimExpiresAt.After(committed.Add(vis))
			}, 30*time.Second, 10*time.Millisecond, "b's claim was beaten once a's transaction committed")
			mu.Lock()
			assert.NoError(t, lost, "round %d: b's handler was told its claim was lost after a's transaction held the writer", round)
			mu.Unlock()
			close(bRel)
			require.Eventually(t, func() bool {
				j, err := qb.Job(c, idB)
				return errors.Is(err, store.ErrNotFound) || (err == nil && j.State != store.JobRunning && j.State != store.JobPending)
			}, 30*time.Second, 10*time.Millisecond, "b's job was settled")
			cancel()
			workers.Wait()
			close(workErr)
			for err := range workErr {
				require.NoError(t, err)
			}
			if j, err := qb.Job(c, idB); err == nil {
				t.Errorf("round %d: b's job ended %s after %d attempts (%s)", round, j.State, j.Attempts, j.LastError)
			}
			mu.Lock()
			assert.Equal(t, map[string]int{"a": 1, "b": 1}, runs, "round %d: each handler ran once", round)
			mu.Unlock()
			if t.Failed() {
				return
			}
		}
	})
}

// TestTransactionalHandlersOfTwoWorkersKeepEachOthersClaims: two WorkTx
// workers of one store, on two queues (as Client.HandleTx of two queues
// runs them), three jobs each, MaxAttempts 1. A handler that finds a job
// of the other queue claimed and waiting for the writer (running, its
// handler not started: on SQLite it can start only once this transaction
// ended) holds its transaction until that claim, as committed, has run
// out; otherwise it returns at once. Every job must run once and be
// acked. On main each waiting job, its transaction begun at last, found
// its claim gone and ended dead ("attempts exhausted: the last claim
// expired") without running. Which handler takes the writer first is the
// scheduler's choice: rounds run until the wait was seen twice (on
// SQLite; in every round so far at least once).
func TestTransactionalHandlersOfTwoWorkersKeepEachOthersClaims(t *testing.T) {
	const vis = time.Second
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		seen := 0
		for round := 0; round < 12; round++ {
			if e.name != "lite" && round == 2 || seen >= 2 {
				break
			}
			qs := []*store.Queue{s.Queue(fmt.Sprintf("pair-a-%d", round)), s.Queue(fmt.Sprintf("pair-b-%d", round))}
			var mu sync.Mutex
			runs := map[int64]int{}
			var ids []int64
			idQ := map[int64]*store.Queue{}
			for _, q := range qs {
				for range 3 {
					id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
					require.NoError(t, err)
					ids = append(ids, id)
					idQ[id] = q
				}
			}
			opts := store.WorkOpts{Visibility: vis, Timeout: 30 * time.Second, Concurrency: 1, Batch: 1}
			wc, cancel := context.WithCancel(c)
			var workers sync.WaitGroup
			workErr := make(chan error, len(qs))
			for i, q := range qs {
				other := qs[1-i]
				workers.Go(func() {
					workErr <- q.WorkTx(wc, opts, func(ctx context.Context, _ store.Tx, j *store.Job) error {
						mu.Lock()
						runs[j.ID]++
						mu.Unlock()
						waiting, err := other.Jobs(ctx, store.JobsOpts{State: store.JobRunning})
						if err != nil {
							return err
						}
						var until time.Time
						mu.Lock()
						for _, w := range waiting {
							if runs[w.ID] == 0 && w.ClaimExpiresAt != nil && w.ClaimExpiresAt.After(until) {
								until = *w.ClaimExpiresAt
							}
						}
						if !until.IsZero() {
							seen++
						}
						mu.Unlock()
						if until.IsZero() {
							return nil
						}
						select { // past the waiting claim's lease, as it stood
						case <-time.After(time.Until(until.Add(vis / 4))):
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					})
				})
			}
			require.Eventually(t, func() bool {
				for _, id := range ids {
					if j, err := idQ[id].Job(c, id); err == nil && (j.State == store.JobPending || j.State == store.JobRunning) {
						return false
					}
				}
				return true
			}, 60*time.Second, 20*time.Millisecond, "every job was settled")
			cancel()
			workers.Wait()
			close(workErr)
			for err := range workErr {
				require.NoError(t, err)
			}
			mu.Lock()
			for _, id := range ids {
				if j, err := idQ[id].Job(c, id); err == nil {
					t.Errorf("round %d: job %d of %s ended %s after %d attempts (%s), its handler run %d times",
						round, id, idQ[id].Name(), j.State, j.Attempts, j.LastError, runs[id])
					continue
				} else {
					require.ErrorIs(t, err, store.ErrNotFound)
				}
				assert.Equal(t, 1, runs[id], "round %d: job %d ran once", round, id)
			}
			mu.Unlock()
			if t.Failed() {
				return
			}
		}
		if e.name == "lite" {
			assert.GreaterOrEqual(t, seen, 2, "a job of the other queue was seen waiting for the writer")
		}
	})
}
