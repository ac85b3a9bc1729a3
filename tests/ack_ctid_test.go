package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAckReachesEachJobOncePostgres: PostgreSQL's AckJobs (a worker's
// batch ack) deletes the rows it locked by the ctid their lock returned,
// so each job costs one probe of jobs_pkey, not a probe to lock it and a
// second to delete it (issue 18: an ack of 100 claimed jobs read 1,002
// buffers, 393 of them in that second probe, a nested loop of 100 index
// scans). Checked on jobs a worker really claimed (jobs_pkey then holds an
// entry for the pending version and one for the running), with a custom
// and a generic plan: no scan of jobs may run once per job, and the
// statement reads at most ackBufsPerJob buffers a job. PostgreSQL only:
// SQLite's AckJobs deletes by rowid, one seek a job, and has no ctid.
func TestAckReachesEachJobOncePostgres(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	s := e.open(t)
	pool := e.pool(t)
	c := ctx(t)
	q := s.Queue("acks")
	const n = 100
	jobs := make([]store.NewJob, 4*n)
	for i := range jobs {
		jobs[i].Payload = []byte("x")
	}
	_, err := q.EnqueueMany(c, jobs)
	require.NoError(t, err)
	// Claims and acks before, as in a burn-down: the rows acked now lie
	// among rows already gone.
	for range 2 {
		js, err := q.Claim(c, "w", n, time.Minute)
		require.NoError(t, err)
		_, err = q.AckMany(c, js)
		require.NoError(t, err)
	}
	claimed, err := q.Claim(c, "w", n, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, n)

	ids := make([]int64, n)
	claims := make([]string, n)
	for i, j := range claimed {
		var token int64
		require.NoError(t, pool.QueryRow(c, "SELECT claim_token FROM alkstore.jobs WHERE id = $1", j.ID).Scan(&token))
		ids[i], claims[i] = j.ID, fmt.Sprintf(`"%d":%d`, j.ID, token)
	}
	args := map[string]any{"ids": ids, "queue": "acks", "now": time.Now(), "claims": "{" + strings.Join(claims, ",") + "}"}
	sqlText, params := generatedQuery(t, "pg", "AckJobs")

	// Fresh sessions: the bound is the statement's whole figure, measured so.
	explainPGPlansFresh(t, e, "AckJobs", sqlText, params, args, func(mode, out string, top pgPlanNode) {
		var perJob []string
		top.walk(func(n *pgPlanNode) {
			if n.Relation == "jobs" && strings.Contains(n.Type, "Scan") && n.Loops > 1 {
				perJob = append(perJob, fmt.Sprintf("%s using %s: %d loops", n.Type, n.Index, n.Loops))
			}
		})
		bufs := top.SharedHit + top.SharedRead
		t.Logf("AckJobs of %d claimed jobs (%s): %d buffers, %.3f ms", n, mode, bufs, top.Time)
		assert.Empty(t, perJob, "%s: a scan of jobs runs once per job:\n%s", mode, out)
		assert.LessOrEqual(t, bufs, ackBufsPerJob*n, "%s: buffers for an ack of %d:\n%s", mode, n, out)
	})
}

// ackBufsPerJob bounds AckJobs's buffers a job in this test's small
// table (a jobs_pkey of one level): 3.2 by the ctid, 6.1 with the second
// probe (on a 100,000-job table after a burn-down's first quarter: 6.1
// against 10).
const ackBufsPerJob = 5

// TestAckSettlesAJobUpdatedWhileItWaitsPostgres: a job's row updated by
// another transaction after the ack's statement took its snapshot (a
// heartbeat of the same claim, committed while the ack waits for its row
// lock) is still acked. AckJobs and CompleteJobs skip the held row (SKIP
// LOCKED, attack56a F2), and AckMany then waits for it in
// CompleteLockedJobs, which locks the new version, which its snapshot
// does not see, and settles it by id. (Before the skip, AckJobs waited,
// its delete by ctid left the new version and CompleteJobs settled it;
// AckJobs meets that case still, for a row updated between its snapshot
// and its lock.) The update is held open until the ack waits on its
// lock (pg_stat_activity), then committed; 10 rounds, the updated job
// first, last and in the middle of the batch. PostgreSQL only: SQLite's
// writes take turns on one writer, so nothing can write between an ack's
// read and its delete.
func TestAckSettlesAJobUpdatedWhileItWaitsPostgres(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	s := e.open(t)
	pool := e.pool(t)
	c := ctx(t)
	q := s.Queue("beats")
	for round := range 10 {
		for range 3 {
			_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		jobs, err := q.Claim(c, "w", 3, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 3)
		beat := jobs[round%3]
		// The heartbeat, held open: HeartbeatJob's write, by hand.
		holder, err := pool.Begin(c)
		require.NoError(t, err)
		tag, err := holder.Exec(c, `UPDATE alkstore.jobs SET claim_expires_at = claim_expires_at + interval '1 minute'
			WHERE id = $1 AND state = 'running'`, beat.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
		type result struct {
			n   int64
			err error
		}
		acked := make(chan result, 1)
		go func() {
			n, err := q.AckMany(c, jobs)
			acked <- result{n, err}
		}()
		require.Eventually(t, func() bool {
			var n int
			err := pool.QueryRow(c, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF x%'`).Scan(&n)
			return err == nil && n == 1
		}, 30*time.Second, 2*time.Millisecond, "round %d: the ack never waited for the held row", round)
		select {
		case r := <-acked:
			t.Fatalf("round %d: the ack returned while the row was held: %+v", round, r)
		default:
		}
		require.NoError(t, holder.Commit(c))
		r := <-acked
		require.NoError(t, r.err, "round %d", round)
		assert.EqualValues(t, 3, r.n, "round %d: every job acked", round)
		for _, j := range jobs {
			_, err := q.Job(c, j.ID)
			assert.ErrorIs(t, err, store.ErrNotFound, "round %d: job %d settled and deleted", round, j.ID)
		}
	}
}
