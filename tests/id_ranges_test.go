package tests

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestRangesOfIdsSettleAndStampOnlyTheirRuns: a claim stamps exactly the
// jobs it chose, and an AckMany settles exactly the jobs it holds, when
// their ids have gaps: another queue's jobs between a claim's (a claim),
// and jobs of the same claim still running between the ones acked (an
// ack). On SQLite the runs of 8 or more ids without a gap go as ranges of
// the primary key (ClaimJobsInRange, AckJobsOfClaimInRange,
// CompleteJobsOfClaimInRange; db/lite's execListed) and the rest in
// lists: a range that ran past its run would stamp the other queue's jobs,
// or settle the jobs whose handlers still run.
func TestRangesOfIdsSettleAndStampOnlyTheirRuns(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		var stmts stmtCounts
		s := e.openHooked(t, stmts.hook)
		count := stmts.count
		c := ctx(t)
		rng := rand.New(rand.NewPCG(3, 4))
		for _, kept := range []bool{false, true} {
			name := fmt.Sprintf("kept %v", kept)
			x, y := s.Queue(fmt.Sprintf("gaps-x-%v", kept)), s.Queue(fmt.Sprintf("gaps-y-%v", kept))
			if kept {
				require.NoError(t, x.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
			}
			// x's ids: a run of 40, 10 single ids between y's, a run of 17,
			// one of 7 (short of a range), one of 40; y's jobs between.
			var xs []int64
			enqueue := func(q *store.Queue, n int) {
				for range n {
					id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
					require.NoError(t, err)
					if q == x {
						xs = append(xs, id)
					}
				}
			}
			enqueue(x, 40)
			for range 10 {
				enqueue(y, 1)
				enqueue(x, 1)
			}
			for _, k := range []int{17, 7, 40} {
				enqueue(y, 3)
				enqueue(x, k)
			}
			stamps, ranges := count("ClaimJobs"), count("ClaimJobsInRange")
			got, err := x.Claim(c, "w", len(xs), time.Hour)
			require.NoError(t, err)
			require.Equal(t, xs, ids(got), name)
			if e.name == "lite" {
				assert.Equal(t, ranges+3, count("ClaimJobsInRange"), "%s: the claim's runs of 8 or more as ranges", name)
				assert.Equal(t, stamps+1, count("ClaimJobs"), "%s: the rest in a list", name)
			}
			for _, j := range got {
				got, err := x.Job(c, j.ID)
				require.NoError(t, err, name)
				assert.Equal(t, store.JobRunning, got.State, "%s: job %d", name, j.ID)
				assert.Equal(t, "w", got.Worker, "%s: job %d", name, j.ID)
			}
			st, err := y.Stats(c)
			require.NoError(t, err)
			assert.EqualValues(t, 19, st.Ready, "%s: the other queue's jobs between the claim's", name)
			assert.Zero(t, st.Running, name)

			// Ack all but 4 jobs, as handlers still running leave them: the
			// run of 40 split into 2 ids, 28 and 8 (two ranges); the run of
			// 17 into 10 (a range) and 6 ids; the run of 7 whole; the last
			// run of 40 into 26 and 13 (two ranges); in a worker's finish
			// order.
			var batch, running []*store.Job
			for i, j := range got {
				switch i {
				case 2, 31, 60, 100:
					running = append(running, j)
				default:
					batch = append(batch, j)
				}
			}
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			listed := []string{"AckJobsOfClaim", "CompleteJobsOfClaim"}
			inRange := []string{"AckJobsOfClaimInRange", "CompleteJobsOfClaimInRange"}
			lists, ranges, fallbacks := count(listed...), count(inRange...), count("AckJobs", "CompleteJobs")
			acked, err := x.AckMany(c, batch)
			require.NoError(t, err, name)
			assert.EqualValues(t, len(batch), acked, name)
			if e.name == "lite" {
				assert.Equal(t, ranges+5, count(inRange...), "%s: the ack's runs of 8 or more as ranges", name)
				assert.Equal(t, lists+1, count(listed...), "%s: the rest in a list", name)
				// A count above the batch's (a range past its run) rolls
				// the counted ack back to the RETURNING forms.
				assert.Equal(t, fallbacks, count("AckJobs", "CompleteJobs"), "%s: the counted ack fell back to the RETURNING forms", name)
			}
			for _, j := range batch {
				got, err := x.Job(c, j.ID)
				if kept {
					require.NoError(t, err, name)
					assert.Equal(t, store.JobCompleted, got.State, "%s: job %d", name, j.ID)
				} else {
					assert.True(t, errors.Is(err, store.ErrNotFound), "%s: job %d still there: %v", name, j.ID, err)
				}
			}
			for _, j := range running {
				got, err := x.Job(c, j.ID)
				require.NoError(t, err, name)
				assert.Equal(t, store.JobRunning, got.State, "%s: job %d, not in the ack, settled", name, j.ID)
			}
			acked, err = x.AckMany(c, running)
			require.NoError(t, err, name)
			assert.EqualValues(t, len(running), acked, name)
			st, err = x.Stats(c)
			require.NoError(t, err)
			assert.Zero(t, st.Running+st.Ready, name)
		}
	})
}
