package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestClaimStepsOverSettledJobsOnce: a burn-down leaves the index entries
// of every job it claimed and settled at the head of the ready index until
// VACUUM reaches the table (Postgres; SQLite removes them with the row). A
// claim steps over them once, finding where the queue's ready jobs begin,
// and reads each priority's ready jobs from there: the cost beyond that one
// walk follows the rows it returns. (Issue 18: ClaimJobs walked them again
// for the top priority, a third more buffers per job in a burn-down.)
func TestClaimStepsOverSettledJobsOnce(t *testing.T) {
	const total, settle, claimN = 30_000, 25_000, 10
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		if e.name == "pg" {
			// Nothing may clean the settled entries away before the check.
			e.execSQL(t, "ALTER TABLE alkstore.jobs SET (autovacuum_enabled = false)")
		}
		q := s.Queue("burn")
		batch := make([]store.NewJob, 1000)
		for i := 0; i < total; i += len(batch) {
			_, err := q.EnqueueMany(ctx(t), batch)
			require.NoError(t, err)
		}
		for settled := 0; settled < settle; {
			got, err := q.Claim(ctx(t), "w", 1000, time.Minute)
			require.NoError(t, err)
			require.Len(t, got, 1000)
			n, err := q.AckMany(ctx(t), got)
			require.NoError(t, err)
			require.EqualValues(t, len(got), n)
			settled += len(got)
		}
		now := time.Now()
		args := map[string]any{
			"queue": "burn", "maxjobs": claimN, "worker": "w", "claimtoken": int64(7),
			"now": now, "claimexpiresat": now.Add(time.Minute),
		}
		if e.name == "lite" {
			// No dead entries to step over: the claim's steps follow the
			// rows it returns, as on the skewed queue.
			args["now"], args["claimexpiresat"] = now.UnixMicro(), now.Add(time.Minute).UnixMicro()
			for _, name := range []string{"ClaimableReadyJobs", "ClaimableJobs"} {
				sqlText, params := generatedQuery(t, e.name, name)
				checkLitePlan(t, e, name+" after a burn-down", sqlText, params, args)
			}
			return
		}
		sqlText, params := generatedQuery(t, e.name, "ClaimJobs")
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			top, _ := explainPG(t, e, "ClaimJobs", sqlText, params, args, mode)
			require.Equal(t, claimN, top.Rows, mode)
			// Every scan of jobs_ready but the costliest (the walk over
			// the settled entries) is bounded by the rows it gives.
			var sum, most, rows, loops int
			top.walk(func(n *pgPlanNode) {
				if n.Relation != "jobs" || n.Index != "jobs_ready" {
					return
				}
				b := n.SharedHit + n.SharedRead
				sum, most = sum+b, max(most, b)
				rows, loops = rows+n.Rows*n.Loops, loops+n.Loops
			})
			bound := planBufPerRow*(min(rows, claimN)+loops) + planBufSlack
			t.Logf("%s: jobs_ready read %d buffers, the costliest scan %d, the others %d (bound %d)", mode, sum, most, sum-most, bound)
			assert.Greater(t, most, bound, "%s: the settled entries are not in the way: the check proves nothing", mode)
			assert.LessOrEqual(t, sum-most, bound, "%s: ClaimJobs walks the settled jobs' index entries more than once:\n%s", mode, top.summary(""))
		}
	})
}
