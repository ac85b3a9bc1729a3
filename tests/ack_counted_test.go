package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkAcksHeldClaimsWithoutReturning: on SQLite a worker's ack counts
// the rows it settles (AckJob and CompleteJob for a batch of one,
// AckJobsCounted and CompleteJobsCounted for more) and acks again with
// the RETURNING forms (AckJobs, CompleteJobs: a trigger program a row)
// only when a claim was lost. With every claim held, whether the queue
// deletes its acked jobs or keeps them completed, and whether acks carry
// one job (Concurrency 1) or many, those never run, and every job ends
// acked. (An ack whose count missed the completed jobs would still end
// them right, through the RETURNING forms: only this test tells.)
func TestWorkAcksHeldClaimsWithoutReturning(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "lite" {
			t.Skip("SQLite's ack statements")
		}
		var stmts stmtCounts
		s := e.openHooked(t, stmts.hook)
		c := ctx(t)
		for _, kept := range []bool{false, true} {
			for _, concurrency := range []int{1, 8} {
				name := fmt.Sprintf("counted-%v-%d", kept, concurrency)
				q := s.Queue(name)
				if kept {
					require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
				}
				const jobs = 40
				_, err := q.EnqueueMany(c, make([]store.NewJob, jobs))
				require.NoError(t, err)
				var handled atomic.Int64
				wctx, stop := context.WithCancel(c)
				done := make(chan error, 1)
				go func() {
					done <- q.Work(wctx, store.WorkOpts{Concurrency: concurrency}, func(context.Context, *store.Job) error {
						handled.Add(1)
						return nil
					})
				}()
				require.Eventually(t, func() bool {
					st, err := q.Stats(c)
					require.NoError(t, err)
					return handled.Load() == jobs && st.Ready+st.Running == 0
				}, time.Minute, time.Millisecond, name)
				stop()
				require.NoError(t, <-done)
				st, err := q.Stats(c)
				require.NoError(t, err)
				if kept {
					assert.EqualValues(t, jobs, st.Completed, name)
				} else {
					assert.Zero(t, st.Completed, name)
				}
			}
		}
		assert.Zero(t, stmts.count("AckJobs", "CompleteJobs"), "acks fell back to the RETURNING forms")
		assert.Positive(t, stmts.count("AckJob"), "single acks")
		assert.Positive(t, stmts.count("CompleteJob"), "single acks of a queue that keeps its jobs")
		assert.Positive(t, stmts.count("AckJobsCounted"), "batch acks")
		assert.Positive(t, stmts.count("CompleteJobsCounted"), "batch acks of a queue that keeps its jobs")
	})
}
