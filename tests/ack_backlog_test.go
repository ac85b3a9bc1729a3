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

// TestStuckAckBoundsFinishedJobs: while the acks wait on rows another
// transaction holds, Work goes on claiming and finishing jobs only until
// ten rounds of Concurrency wait for their ack in its queue, and as many
// in the ack in flight or, on PostgreSQL, acked apart. Their claims are
// no longer extended, so each would run again after a crash or a lapse:
// the number must follow Concurrency (it was a fixed thousand: 1,020 jobs
// at Concurrency 10 on PostgreSQL).
//
// The application's transaction takes the row of every job as its handler
// runs. On SQLite the first takes the writer and stops the acks and the
// claims, as one held row did. On PostgreSQL one held row no longer stops
// the acks (attack56a F2: the batches skip it, its job is acked apart;
// TestWorkerAckSkipsRowHeldByOpenTx), so every job's row is held: the
// jobs acked apart count against the same bound.
func TestStuckAckBoundsFinishedJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const concurrency = 10
		s := e.open(t)
		q := s.Queue("ackbacklog")
		_, err := q.EnqueueMany(ctx(t), make([]store.NewJob, 3000))
		require.NoError(t, err)

		db := e.sqlDB(t)
		lock := "UPDATE alkstore.jobs SET priority = priority WHERE id = $1"
		if e.name == "lite" {
			lock = "UPDATE alk_jobs SET priority = priority WHERE id = $1"
		}
		var mu sync.Mutex // the transaction, and holding
		var tx *sql.Tx
		holding := true
		held := make(chan struct{})
		// hold takes job's row in the transaction, begun at the first.
		hold := func(id int64) {
			mu.Lock()
			defer mu.Unlock()
			if !holding {
				return
			}
			if tx == nil {
				var err error
				if tx, err = db.BeginTx(context.Background(), nil); !assert.NoError(t, err) {
					holding = false
					close(held)
					return
				}
				defer close(held)
			}
			_, err := tx.Exec(lock, id)
			assert.NoError(t, err)
		}
		var handled atomic.Int64
		seen := sync.Map{}
		var again atomic.Int64
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency}, func(_ context.Context, j *store.Job) error {
				hold(j.ID)
				if _, dup := seen.LoadOrStore(j.ID, true); dup {
					again.Add(1)
				}
				handled.Add(1)
				return nil
			})
		}()
		<-held

		// Handled jobs grow while the acks wait, until handlers wait for
		// room in the ack queue. A wrong bound only grows with time; a right
		// one stays put, which 20 unchanged polls 25 ms apart take as
		// settled. Ten rounds wait in the queue, as many in the stuck
		// AckMany or acked apart, and one round of handlers waits to hand
		// its jobs over.
		bound := int64((2*10 + 1) * concurrency)
		last, still := int64(-1), 0
		for deadline := time.Now().Add(time.Minute); still < 20 && time.Now().Before(deadline); {
			time.Sleep(25 * time.Millisecond)
			n := handled.Load()
			if n > bound {
				break
			}
			if n == last {
				still++
			} else {
				last, still = n, 0
			}
		}
		n := handled.Load()
		mu.Lock()
		holding = false
		if tx != nil {
			_ = tx.Rollback()
		}
		mu.Unlock()
		assert.LessOrEqual(t, n, bound, "finished jobs waiting behind stuck acks")

		// Once the rows are free, everything is settled once.
		require.Eventually(t, func() bool {
			st, err := q.Stats(ctx(t))
			return err == nil && st.Ready+st.Scheduled+st.Running == 0
		}, time.Minute, 20*time.Millisecond)
		stop()
		require.NoError(t, <-done)
		assert.Zero(t, again.Load(), "no job ran twice")
		assert.EqualValues(t, 3000, handled.Load())
	})
}
