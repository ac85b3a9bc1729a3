package tests

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAckReadsOnlyTheJobsItSettles: AckMany finds its jobs by id, one
// primary-key probe each (AckJobs, and CompleteJobs for a queue that keeps
// completed jobs, or CompleteLockedJobs for the rows they skipped for a
// lock), whatever else of its queue is running: beside
// 20,000 running jobs of the same queue (the claims in flight of other
// handlers and workers), an ack of 10 may not read the others. (Issue 18:
// PostgreSQL's generic plan walked jobs_running over every running job of
// the queue and tested each against the ids: an ack of 25 took 15 ms
// beside 10,000; CompleteJobs read all 20,000 in 17-35 ms. SQLite's
// statements have been driven by their pairs since.)
// The one-job settles and the heartbeat of such a job, by id, a worker's
// heartbeat of many (HeartbeatJobs, by its pairs), and on
// SQLite the worker's counted acks (AckJobsCounted and CompleteJobsCounted
// by their pairs; AckJobsOfClaim and CompleteJobsOfClaim by a list of ids
// under one claim's token, their InRange forms and ClaimJobsInRange by a
// range of ids), are held to the same. PostgreSQL: custom and generic plans, analysed and not;
// SQLite: no scan of alk_jobs.
func TestAckReadsOnlyTheJobsItSettles(t *testing.T) {
	const running, acked = 20_000, 10
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		e.open(t) // migrated
		now := time.Now()
		if e.name == "pg" {
			ts := func(d time.Duration) string {
				return fmt.Sprintf("'%s'::timestamptz", now.Add(d).Format(time.RFC3339Nano))
			}
			e.execSQL(t, "INSERT INTO alkstore.jobs (queue, priority, state, attempts, max_attempts, created_at, run_at, claimed_at, claim_expires_at, claim_token, worker) "+
				fmt.Sprintf("SELECT 'busy', 0, 'running', 1, 3, %s, %s, %s, %s, g, 'w' FROM generate_series(1, %d) g",
					ts(-time.Hour), ts(-time.Hour), ts(-time.Minute), ts(time.Hour), running))
		} else {
			us := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
			e.execSQL(t, fmt.Sprintf("WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %d) "+
				"INSERT INTO alk_jobs (queue, priority, state, attempts, max_attempts, created_at, run_at, claimed_at, claim_expires_at, claim_token, worker) "+
				"SELECT 'busy', 0, 'running', 1, 3, %d, %d, %d, %d, i, 'w' FROM g",
				running, us(-time.Hour), us(-time.Hour), us(-time.Minute), us(time.Hour)))
		}
		table := map[string]string{"pg": "alkstore.jobs", "lite": "alk_jobs"}[e.name]
		rows, err := e.sqlDB(t).QueryContext(ctx(t), fmt.Sprintf("SELECT id, claim_token FROM %s WHERE queue = 'busy' ORDER BY id DESC LIMIT %d", table, acked))
		require.NoError(t, err)
		var ids, tokens []int64
		var claims []string
		for rows.Next() {
			var id, token int64
			require.NoError(t, rows.Scan(&id, &token))
			ids, tokens = append(ids, id), append(tokens, token)
			claims = append(claims, fmt.Sprintf(`"%d":%d`, id, token))
		}
		require.NoError(t, rows.Err())
		require.Len(t, ids, acked)
		args := map[string]any{"ids": ids, "claimtokens": tokens, "queue": "busy", "now": now, "claims": "{" + strings.Join(claims, ",") + "}"}
		// The one-job settles and heartbeats of a job of the queue, by id.
		one := planArgs(t, e, now)
		for k, v := range one {
			one[k] = planValue(t, e, now, v)
		}
		one["queue"], one["id"], one["claimtoken"] = "busy", ids[0], tokens[0]
		if e.name == "lite" {
			args["now"] = now.UnixMicro()
		}
		for _, analyzed := range []bool{false, true} {
			if analyzed {
				e.execSQL(t, "ANALYZE")
			}
			stmts := []string{"AckJobs", "CompleteJobs", "CompleteLockedJobs", "AckJob", "CompleteJob", "RetryJob", "HeartbeatJob", "HeartbeatJobs", "ReleaseJob", "SnoozeJob"}
			if e.name == "lite" {
				stmts = append(stmts, "AckJobsCounted", "CompleteJobsCounted", "AckJobsOfClaim", "CompleteJobsOfClaim",
					"AckJobsOfClaimInRange", "CompleteJobsOfClaimInRange", "ClaimJobsInRange")
			}
			for _, stmt := range stmts {
				sqlText, params := generatedQuery(t, e.name, stmt)
				name := fmt.Sprintf("%s beside %d running jobs of its queue (analyzed: %v)", stmt, running, analyzed)
				a := args
				switch {
				case strings.HasSuffix(stmt, "OfClaim"): // the list of ids under one claim's token
					a = maps.Clone(args)
					a["claimtoken"] = tokens[0]
				case strings.HasSuffix(stmt, "InRange"): // a range of ids (the acked ones: ids descend)
					a = maps.Clone(args)
					a["claimtoken"], a["firstid"], a["lastid"] = tokens[0], ids[len(ids)-1], ids[0]
					a["claimexpiresat"], a["worker"] = now.Add(time.Hour).UnixMicro(), "w"
				case stmt == "HeartbeatJobs": // a worker's tick: the pairs, as the Jobs forms
					a = maps.Clone(args)
					a["claimexpiresat"] = now.Add(time.Hour)
					if e.name == "lite" {
						a["claimexpiresat"] = now.Add(time.Hour).UnixMicro()
					}
				case strings.HasSuffix(stmt, "Counted"): // the pairs, as the Jobs forms
				case !strings.HasSuffix(stmt, "Jobs"):
					a = one
				}
				if e.name == "pg" {
					checkPGPlan(t, e, name, sqlText, params, a)
				} else {
					checkLitePlan(t, e, name, sqlText, params, a)
				}
			}
		}
	})
}
