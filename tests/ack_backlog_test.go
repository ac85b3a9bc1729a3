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

// TestStuckAckBoundsFinishedJobs: while one ack waits on a row another
// transaction holds, Work goes on claiming and finishing jobs only until ten
// rounds of Concurrency wait for their ack. Their claims are no longer
// extended, so each would run again after a crash or a lapse: the number
// must follow Concurrency (it was a fixed thousand: 1,020 jobs at
// Concurrency 10 on PostgreSQL). On SQLite the held write lock stops the
// claims too; the bound holds the same.
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
		var once sync.Once
		held := make(chan struct{})
		release := make(chan struct{})
		var handled atomic.Int64
		seen := sync.Map{}
		var again atomic.Int64
		wctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency}, func(_ context.Context, j *store.Job) error {
				once.Do(func() {
					// Another transaction takes this job's row: its ack waits.
					tx, err := db.BeginTx(context.Background(), nil)
					if assert.NoError(t, err) {
						_, err = tx.Exec(lock, j.ID)
						assert.NoError(t, err)
						go func() { <-release; _ = tx.Rollback() }()
					}
					close(held)
				})
				if _, dup := seen.LoadOrStore(j.ID, true); dup {
					again.Add(1)
				}
				handled.Add(1)
				return nil
			})
		}()
		<-held

		// Handled jobs grow while the ack waits, until handlers wait for room
		// in the ack queue. A wrong bound only grows with time; a right one
		// stays put, which 20 unchanged polls 25 ms apart take as settled.
		// Ten rounds wait in the queue, as many in the stuck AckMany, and
		// one round of handlers waits to hand its jobs over.
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
		close(release)
		assert.LessOrEqual(t, n, bound, "finished jobs waiting behind one stuck ack")

		// Once the row is free, everything is settled once.
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
