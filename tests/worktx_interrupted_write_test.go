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

// TestATransactionalHandlerWhoseWriteItsTimeoutInterruptsKeepsTheClaimsItHeld:
// on SQLite a WorkTx handler's transaction extends its own claim and the
// claims of the worker's other jobs, which wait for the writer it holds,
// and commits those extensions whatever the handler returns. But when
// the handler's Timeout interrupts a write, SQLite rolls the whole
// transaction back, extensions and all: the job was then settled on its
// own after its claim had lapsed (its retry and backoff not recorded: it
// ran again at once), and the waiting jobs' claims had lapsed too, so
// with MaxAttempts 1 each ended dead without running (attack56a F4: 3 of
// 3 runs). Three jobs are claimed together; the handler that gets the
// writer first runs a long INSERT … SELECT with its ctx until its Timeout
// (one and a half Visibility) interrupts it, the others return nil at
// once. The first must be settled by its error after that one run (the
// job meant for it, MaxAttempts 2, retried after its backoff of an hour;
// another, MaxAttempts 1, dead with that error, not "the claim expired"),
// and every other must run once and be acked. Several rounds, each on a
// queue of its own.
func TestATransactionalHandlerWhoseWriteItsTimeoutInterruptsKeepsTheClaimsItHeld(t *testing.T) {
	interruptedWriteRounds(t, "interrupted", false)
}

// interruptedWriteRounds runs the rounds of
// TestATransactionalHandlerWhoseWriteItsTimeoutInterruptsKeepsTheClaimsItHeld
// on a table and queues named after name; swallow makes the interrupted
// handler ignore its write's error and return nil
// (TestATransactionalHandlerThatSwallowsItsInterruptedWriteFailsAndKeepsTheClaimsItHeld).
func interruptedWriteRounds(t *testing.T, name string, swallow bool) {
	const vis = 2 * time.Second
	const rounds = 3
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.Exec(ctx, `CREATE TABLE `+name+`_rows (i bigint)`)
			return err
		}))
		// A write that runs until its ctx ends (a row in a hundred of an
		// endless series).
		longWrite := `INSERT INTO ` + name + `_rows WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 3000000000) SELECT i FROM g WHERE i % 100 = 0`
		for round := range rounds {
			q := s.Queue(fmt.Sprintf("%s-write-%d", name, round))
			slow, err := q.Enqueue(c, []byte("slow"), store.EnqueueOpts{MaxAttempts: 2, Priority: 10})
			require.NoError(t, err)
			ids := []int64{slow}
			for range 2 {
				id, err := q.Enqueue(c, []byte("quick"), store.EnqueueOpts{MaxAttempts: 1})
				require.NoError(t, err)
				ids = append(ids, id)
			}
			var first atomic.Int64 // the job whose handler got the writer first
			var mu sync.Mutex
			runs := map[int64]int{}
			handler := func(ctx context.Context, tx store.Tx, j *store.Job) error {
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
				if first.CompareAndSwap(0, j.ID) {
					// The others were claimed with it and wait for the
					// writer (on SQLite) until its Timeout ends this.
					_, err := tx.Exec(ctx, longWrite)
					switch {
					case err == nil:
						return errors.New("the endless write ended")
					case swallow:
						return nil
					}
					return err
				}
				return nil
			}
			opts := store.WorkOpts{Visibility: vis, Timeout: vis * 3 / 2, Concurrency: 3, Batch: 3,
				Backoff: func(int) time.Duration { return time.Hour }}
			wc, cancel := context.WithCancel(c)
			done := make(chan error, 1)
			go func() { done <- q.WorkTx(wc, opts, handler) }()
			require.Eventually(t, func() bool {
				if first.Load() == 0 {
					return false
				}
				for _, id := range ids {
					j, err := q.Job(c, id)
					switch {
					case errors.Is(err, store.ErrNotFound), err == nil && j.State == store.JobDead:
					case err == nil && j.State == store.JobPending && time.Until(j.RunAt) > 30*time.Minute:
					default:
						return false
					}
				}
				return true
			}, 60*time.Second, 20*time.Millisecond, "round %d: every job was settled", round)
			cancel()
			require.NoError(t, <-done)
			mu.Lock()
			for _, id := range ids {
				j, err := q.Job(c, id)
				if id != first.Load() {
					if !assert.ErrorIs(t, err, store.ErrNotFound, "round %d: job %d, waiting for the writer, was acked", round, id) && err == nil {
						t.Errorf("round %d: job %d ended %s after %d attempts (%q), its handler run %d times", round, id, j.State, j.Attempts, j.LastError, runs[id])
					}
					assert.Equal(t, 1, runs[id], "round %d: job %d ran once", round, id)
					continue
				}
				assert.Equal(t, 1, runs[id], "round %d: the interrupted job %d ran once", round, id)
				if !assert.NoError(t, err, "round %d: the interrupted job %d is still there (not acked by a second run)", round, id) {
					continue
				}
				assert.Equal(t, 1, j.Attempts, "round %d: job %d", round, id)
				assert.NotEmpty(t, j.LastError, "round %d: job %d records its handler's error", round, id)
				assert.NotContains(t, j.LastError, "claim expired", "round %d: job %d was settled by its handler's error", round, id)
				if id == slow {
					assert.Equal(t, store.JobPending, j.State, "round %d: the interrupted job %d was retried", round, id)
					assert.Greater(t, time.Until(j.RunAt), 30*time.Minute, "round %d: retried after its backoff (an hour)", round)
				} else {
					assert.Equal(t, store.JobDead, j.State, "round %d: job %d, on its last attempt, failed", round, id)
				}
			}
			mu.Unlock()
		}
	})
}
