package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// TestWorkTxHoldsNoMoreTransactionsThanThePoolCanGive: on PostgreSQL each
// WorkTx handler's transaction holds a pooled connection for its whole
// run. With Concurrency above the pool, the transactions took every
// connection, the heartbeats (and the handlers waiting to begin) could get
// none, claims lapsed while their handlers ran, and jobs whose handlers
// never failed ran again: with a pool of 4, Concurrency 10, handlers of
// 1 s and a Visibility of 2 s, 12-17 of 30 jobs ran twice. Now the store
// holds at most one transaction fewer than its pool's connections for
// transactional handlers, of every worker together (a handler waiting for
// one keeps its claim, heartbeat on the connection left), and a worker
// runs no more handlers than that at once. Here two WorkTx loops at
// Concurrency 8 on a pool of 2 (the least WorkTx accepts: a pool of 1 is
// refused), each handler holding its transaction past its claim's first
// lease: every job runs once. On SQLite (one transaction at a time, which
// extends its claim itself) the same holds.
func TestWorkTxHoldsNoMoreTransactionsThanThePoolCanGive(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t, store.WithMaxConns(2))
		// Two seconds: each handler holds its transaction past its first
		// lease, and under load 19+ with the race detector a beat on the
		// one spare connection of a 1 s lease came too late now and then
		// (2 of 34 runs), which is the machine's speed, not the cap.
		const visibility = 2 * time.Second
		const perQueue = 2
		queues := []*store.Queue{s.Queue("tx-a"), s.Queue("tx-b")}
		for _, q := range queues {
			for range perQueue {
				_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
				require.NoError(t, err)
			}
		}
		wc, cancel := context.WithTimeout(c, 60*time.Second)
		defer cancel()
		var mu sync.Mutex
		runs, completed := map[string]int{}, map[string]bool{}
		twice := false
		handler := func(ctx context.Context, tx store.Tx, j *store.Job) error {
			key := fmt.Sprint(j.Queue, "/", j.ID)
			mu.Lock()
			runs[key]++
			if runs[key] > 1 {
				twice = true
				cancel()
			}
			mu.Unlock()
			if _, err := s.Stream("effects").PublishTx(ctx, tx, []byte(key)); err != nil {
				return err
			}
			// Hold the transaction past the claim's first lease: only
			// heartbeats keep the job this run's.
			select {
			case <-time.After(time.Until(j.ClaimExpiresAt.Add(visibility / 2))):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			j.OnResult(func(r store.JobResult) {
				mu.Lock()
				defer mu.Unlock()
				if r.Outcome == store.OutcomeAcked {
					completed[key] = true
				}
				if len(completed) == len(queues)*perQueue {
					cancel()
				}
			})
			return nil
		}
		var wg sync.WaitGroup
		for _, q := range queues {
			wg.Go(func() {
				err := q.WorkTx(wc, store.WorkOpts{Concurrency: 8, Visibility: visibility, Timeout: time.Minute, PollInterval: 50 * time.Millisecond}, handler)
				require.NoError(t, err)
			})
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.False(t, twice, "a job ran more than once though no handler failed: runs %v", runs)
		require.Len(t, completed, len(queues)*perQueue, "every job completed once: runs %v, completed %v", runs, completed)
		for _, q := range queues {
			st, err := q.Stats(c)
			require.NoError(t, err)
			require.Zero(t, st.Ready+st.Scheduled+st.Running+st.Dead, "%s: %+v", q.Name(), st)
		}
		if e.name == "pg" {
			one := e.open(t, store.WithMaxConns(1))
			_, err := one.Queue("one").NewWorkerTx(store.WorkOpts{}, func(context.Context, store.Tx, *store.Job) error { return nil })
			require.ErrorIs(t, err, store.ErrInvalidArgument, "WorkTx on a pool of one connection")
			require.Contains(t, err.Error(), "pool of 2 connections or more")
			// A group member's transaction would hold the only connection
			// too, its partitions' leases then renewed by nothing
			// (attack56b F7: ConsumeTx and HandleGroupTx ran on it).
			g := one.Stream("one").Group("g")
			require.ErrorIs(t, g.CheckTxOpts(store.GroupOpts{}), store.ErrInvalidArgument)
			c, cancel := context.WithTimeout(c, 5*time.Second)
			defer cancel()
			err = g.ConsumeTx(c, store.GroupOpts{}, func(context.Context, store.Tx, store.Event) error { return nil })
			require.ErrorIs(t, err, store.ErrInvalidArgument, "ConsumeTx on a pool of one connection")
			require.Contains(t, err.Error(), "pool of 2 connections or more")
			cl := client.New(one, client.Opts{})
			err = cl.HandleGroupTx(g, store.GroupOpts{}, func(context.Context, store.Tx, store.Event) error { return nil })
			require.ErrorIs(t, err, store.ErrInvalidArgument, "HandleGroupTx on a pool of one connection")
			require.NoError(t, g.CheckOpts(store.GroupOpts{}), "a plain member needs no transaction")
		} else {
			require.NoError(t, s.Stream("one").Group("g").CheckTxOpts(store.GroupOpts{}), "SQLite has no pool")
		}
	})
}
