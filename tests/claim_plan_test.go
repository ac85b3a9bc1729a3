package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestClaimPlansOfOneBigQueuePostgres: ClaimJobs's plans stay on indexes
// and tid scans when the jobs table holds one big queue with statistics.
// A generic plan assumes a LIMIT it cannot see takes a tenth of the
// queue, and its update joined the picked rows by hash over a sequential
// scan of jobs (31 ms for a claim of 50 among 100k jobs, against 1.2 ms;
// issue 18): PostgreSQL uses that plan whenever it costs less than the
// custom plans did. Postgres only: the plan cache is PostgreSQL's
// (TestJobPlansStayOnIndexes checks SQLite's plans).
func TestClaimPlansOfOneBigQueuePostgres(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s := e.open(t)
	_, err := s.Queue("big").Enqueue(c, []byte("x"), store.EnqueueOpts{}) // registers the queue
	require.NoError(t, err)
	p := e.pool(t)
	_, err = p.Exec(c, `INSERT INTO alkstore.jobs (queue, payload, max_attempts, run_at)
		SELECT 'big', '\x78', 25, now() - interval '1 hour' FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = p.Exec(c, "ANALYZE alkstore.jobs")
	require.NoError(t, err)
	now := time.Now()
	sqlText, params := generatedQuery(t, "pg", "ClaimJobs")
	checkPGPlan(t, e, "ClaimJobs", sqlText, params, map[string]any{"queue": "big", "maxjobs": int32(50), "worker": "w",
		"claimtoken": int64(7), "now": now, "claimexpiresat": now.Add(time.Minute)})
}
