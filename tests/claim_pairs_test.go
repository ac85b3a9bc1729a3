package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A second claim goes beside the one in flight (PostgreSQL; SQLite has one
// in flight) only while that one holds fewer than half a batch of slots,
// or when the second can take a whole batch: a second claim of the slots
// left beside a claim of half a batch or more split the next batches in
// two, and the pair went on splitting every batch after it (issue 18:
// 1,465 claims of 68 jobs instead of 1,000 of 100 at Concurrency 200,
// Batch 100). These tests hold a claim open in a statement hook (after
// ClaimJobs, before Claim returns its jobs) and count the claims that end
// meanwhile.

// TestNoClaimBesideHalfABatchInFlight: at Concurrency 15 and Batch 10 the
// first claim takes a whole batch, leaving 5 free slots: half a batch, not
// a whole one, so no claim may go while it is in flight. It is held until
// another claim ends (the old rule sent one of 5 at once, without waiting
// for any handler) or two seconds pass, whichever comes first: the wait
// only bounds how long a broken loop has to show itself, and a loop that
// keeps the rule passes whatever the machine's speed. Then the queue is
// worked to the end.
func TestNoClaimBesideHalfABatchInFlight(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const concurrency, batch, jobs = 15, 10, 60
		var claims atomic.Int64
		var firstHeld atomic.Bool
		var beside atomic.Int64 // claims that ended while the first was held
		other := make(chan struct{})
		var otherOnce sync.Once
		s := e.openHooked(t, func(name string) {
			if name != "ClaimJobs" {
				return
			}
			if claims.Add(1) == 1 {
				firstHeld.Store(true)
				select {
				case <-other:
				case <-time.After(2 * time.Second):
				}
				firstHeld.Store(false)
				return
			}
			if firstHeld.Load() {
				beside.Add(1)
			}
			otherOnce.Do(func() { close(other) })
		})
		q := s.Queue("pairs")
		_, err := q.EnqueueMany(ctx(t), make([]store.NewJob, jobs))
		require.NoError(t, err)

		var handled atomic.Int64
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency, Batch: batch}, func(context.Context, *store.Job) error {
				handled.Add(1)
				return nil
			})
		}()
		require.Eventually(t, func() bool { return handled.Load() >= jobs }, time.Minute, time.Millisecond)
		stop()
		require.NoError(t, <-done)
		assert.Zero(t, beside.Load(), "a claim went beside a claim of a whole batch with half a batch of slots free")
		st, err := q.Stats(ctx(t))
		require.NoError(t, err)
		assert.Zero(t, st.Ready+st.Running, "every job handled and acked")
	})
}

// TestSecondClaimBesideASmallClaim: the rule keeps the second claim where
// it pays. Eight handlers block at Concurrency 10 and Batch 10; twenty
// jobs more are enqueued and the claim of the 2 free slots is held open;
// then five handlers return: the one in flight holds fewer than half a
// batch, so a claim of those 5 slots must go beside it (PostgreSQL; on
// SQLite the held claim holds the writer and the next waits for it). A
// job never runs twice and the held claim's jobs run too.
func TestSecondClaimBesideASmallClaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const concurrency, batch = 10, 10
		var hold atomic.Bool
		held := make(chan struct{})
		beside := make(chan struct{})
		var heldOnce, besideOnce sync.Once
		var holding atomic.Bool
		s := e.openHooked(t, func(name string) {
			if name != "ClaimJobs" {
				return
			}
			if hold.CompareAndSwap(true, false) {
				holding.Store(true)
				heldOnce.Do(func() { close(held) })
				select {
				case <-beside:
				case <-time.After(20 * time.Second):
				}
				holding.Store(false)
				return
			}
			if holding.Load() {
				besideOnce.Do(func() { close(beside) })
			}
		})
		q := s.Queue("small")
		for range 8 {
			_, err := q.Enqueue(ctx(t), []byte("block"), store.EnqueueOpts{})
			require.NoError(t, err)
		}

		release := make(chan struct{})
		started := make(chan struct{}, 8)
		var mu sync.Mutex
		runs := map[int64]int{}
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency, Batch: batch, PollInterval: time.Minute},
				func(c context.Context, j *store.Job) error {
					mu.Lock()
					runs[j.ID]++
					mu.Unlock()
					if string(j.Payload) == "block" {
						started <- struct{}{}
						select {
						case <-release:
						case <-c.Done():
						}
					}
					return nil
				})
		}()
		for range 8 {
			<-started
		}
		hold.Store(true)
		_, err := q.EnqueueMany(ctx(t), make([]store.NewJob, 20))
		require.NoError(t, err)
		<-held
		for range 5 {
			release <- struct{}{}
		}
		if e.name == "pg" {
			select {
			case <-beside:
			case <-time.After(20 * time.Second):
				t.Fatal("no claim went beside a claim of 2 slots once 5 were free")
			}
		} else {
			besideOnce.Do(func() { close(beside) })
		}
		close(release)
		require.Eventually(t, func() bool {
			st, err := q.Stats(ctx(t))
			require.NoError(t, err)
			return st.Ready+st.Running == 0
		}, time.Minute, 5*time.Millisecond)
		stop()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, runs, 28, "every job ran")
		for id, n := range runs {
			assert.Equal(t, 1, n, "job %d ran %d times", id, n)
		}
	})
}
