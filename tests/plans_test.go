package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Plans of the hot job statements, checked on a skewed queue: the cost of
// a claim must follow the rows it returns, not the delayed or dead rows
// beside them, and NextJobDue must be an index lookup.

// The skewed queue: planDelayed jobs due in an hour (priorities 0-9),
// planReady due jobs (priorities 0-4), planDead dead jobs, and a busy
// neighbour queue.
const (
	planDelayed = 50_000
	planReady   = 50
	planDead    = 10_000
	planOther   = 5_000
	planClaimN  = 100 // a short claim: more than there are ready jobs
)

// planStatements is the explicit list of statements checked, per engine:
// a new hot statement on the job tables belongs here. Each names the
// generated Go file and constant holding its SQL (what actually runs).
var planStatements = map[string][]string{
	"pg":   {"ClaimJobs", "NextJobDue", "ListJobs", "RequeueDeadJobs"},
	"lite": {"ClaimableJobs", "ClaimJobs", "NextJobDue", "ListJobs", "RequeueDeadJobs"},
}

// Bounds. Per scan node on the jobs table (Postgres): buffers touched, at
// most planBufPerRow per loop it ran and per row it returned (counting no
// more rows than the statement returns) plus planBufSlack.
// Per statement (SQLite): virtual machine steps, at most planStepsPerRow
// per ready job plus planStepsSlack, and no full-scan step at all. Before
// the claim walked priorities, the short claim's scan of the ready index
// read every delayed row of the queue (Postgres: 520 buffers for 50 rows;
// SQLite: 258,909 VM steps, 34,360 with statistics) and NextJobDue was a
// sequential scan (766 buffers; at 200k delayed jobs an index scan of every
// pending row, 3,000 buffers) or 250,297 VM steps; now the ready side
// takes about 40 buffers, ClaimableJobs 2,874 steps, the stamping UPDATE
// 7,982, NextJobDue 5-9 buffers or 52 steps.
const (
	planBufPerRow   = 4
	planBufSlack    = 32
	planStepsPerRow = 200
	planStepsSlack  = 5_000
)

// TestJobPlansStayOnIndexes: on a queue of many delayed and dead jobs and
// few ready ones, ClaimJobs and NextJobDue read through indexes only, and
// touch a number of pages (Postgres, custom and generic plans of a prepared
// statement) or VM steps (SQLite) bounded by the rows they return.
func TestJobPlansStayOnIndexes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
		e.open(t).Close() // migrate
		loadSkewedQueue(t, e, now)
		args := map[string]any{
			"queue": "skewed", "maxjobs": planClaimN, "worker": "w", "claimtoken": int64(7),
			"now": now, "claimexpiresat": now.Add(time.Minute),
			"state": "dead", "after": int64(planDead / 2), "batch": planReady, "before": now, // ListJobs, RequeueDeadJobs
		}
		if e.name == "lite" {
			args["now"], args["claimexpiresat"] = now.UnixMicro(), now.Add(time.Minute).UnixMicro()
			args["before"] = now.UnixMicro()
		}
		if e.name == "pg" {
			for _, name := range planStatements[e.name] {
				sqlText, params := generatedQuery(t, e.name, name)
				checkPGPlan(t, e, name, sqlText, params, args)
			}
			return
		}
		// SQLite plans without statistics (alkstore never runs ANALYZE)
		// and with them (an application may).
		for _, analyzed := range []bool{false, true} {
			if analyzed {
				e.execSQL(t, "ANALYZE")
			}
			for _, name := range planStatements[e.name] {
				sqlText, params := generatedQuery(t, e.name, name)
				checkLitePlan(t, e, fmt.Sprintf("%s (analyzed: %v)", name, analyzed), sqlText, params, args)
			}
		}
	})
}

// loadSkewedQueue fills the skewed queue and its neighbour with SQL, fast.
func loadSkewedQueue(t *testing.T, e *engineEnv, now time.Time) {
	t.Helper()
	db := e.sqlDB(t)
	var stmts []string
	if e.name == "pg" {
		ts := func(d time.Duration) string {
			return fmt.Sprintf("'%s'::timestamptz", now.Add(d).Format(time.RFC3339Nano))
		}
		ins := "INSERT INTO alkstore.jobs (queue, priority, state, max_attempts, created_at, run_at, finished_at, last_error) "
		stmts = []string{
			ins + fmt.Sprintf("SELECT 'skewed', g %% 10, 'pending', 3, %s, %s + g * interval '1 ms', NULL, NULL FROM generate_series(1, %d) g",
				ts(-time.Hour), ts(time.Hour), planDelayed),
			ins + fmt.Sprintf("SELECT 'skewed', g %% 5, 'pending', 3, %s, %s + g * interval '1 ms', NULL, NULL FROM generate_series(1, %d) g",
				ts(-time.Hour), ts(-time.Minute), planReady),
			ins + fmt.Sprintf("SELECT 'skewed', 0, 'dead', 3, %s, %s, %s, 'x' FROM generate_series(1, %d) g",
				ts(-2*time.Hour), ts(-2*time.Hour), ts(-time.Hour), planDead),
			ins + fmt.Sprintf("SELECT 'other', 0, 'pending', 3, %s, %s, NULL, NULL FROM generate_series(1, %d) g",
				ts(-time.Hour), ts(-time.Minute), planOther),
			"VACUUM ANALYZE alkstore.jobs",
		}
	} else {
		us := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
		ins := "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %d) " +
			"INSERT INTO alk_jobs (queue, priority, state, max_attempts, created_at, run_at, finished_at, last_error) "
		stmts = []string{
			fmt.Sprintf(ins+"SELECT 'skewed', i %% 10, 'pending', 3, %d, %d + i * 1000, NULL, NULL FROM g",
				planDelayed, us(-time.Hour), us(time.Hour)),
			fmt.Sprintf(ins+"SELECT 'skewed', i %% 5, 'pending', 3, %d, %d + i * 1000, NULL, NULL FROM g",
				planReady, us(-time.Hour), us(-time.Minute)),
			fmt.Sprintf(ins+"SELECT 'skewed', 0, 'dead', 3, %d, %d, %d, 'x' FROM g",
				planDead, us(-2*time.Hour), us(-2*time.Hour), us(-time.Hour)),
			fmt.Sprintf(ins+"SELECT 'other', 0, 'pending', 3, %d, %d, NULL, NULL FROM g",
				planOther, us(-time.Hour), us(-time.Minute)),
		}
	}
	for _, s := range stmts {
		_, err := db.ExecContext(ctx(t), s)
		require.NoError(t, err, s)
	}
}

// generatedQuery returns a query's SQL as sqlc generated it (the constant
// in db/<dialect>/*.sql.go) and the names of its parameters in order (the
// arguments the generated method passes after the constant), lower-cased.
func generatedQuery(t *testing.T, dialect, name string) (string, []string) {
	t.Helper()
	src, err := os.ReadFile("../db/" + dialect + "/queues.sql.go")
	require.NoError(t, err)
	constName := strings.ToLower(name[:1]) + name[1:]
	m := regexp.MustCompile("(?s)\nconst " + constName + " = `(.*?)`\n").FindSubmatch(src)
	require.NotNil(t, m, "no constant %s in db/%s/queues.sql.go", constName, dialect)
	call := regexp.MustCompile(`[(, ]` + constName + `((?:,\s*[\w.]+)*),?\s*\)`).FindSubmatch(src)
	require.NotNil(t, call, "no call of %s in db/%s/queues.sql.go", constName, dialect)
	var params []string
	for _, a := range strings.Split(string(call[1]), ",") {
		if a = strings.TrimSpace(a); a != "" {
			params = append(params, strings.ToLower(strings.TrimPrefix(a, "arg.")))
		}
	}
	return string(m[1]), params
}

// checkPGPlan runs the statement as a prepared statement under EXPLAIN
// (ANALYZE, BUFFERS), with a custom and then a generic plan, in a
// transaction rolled back after.
func checkPGPlan(t *testing.T, e *engineEnv, name, sqlText string, params []string, args map[string]any) {
	cfg, err := pgx.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // session-level PREPARE below
	conn, err := pgx.ConnectConfig(ctx(t), cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	c := ctx(t)
	_, err = conn.Exec(c, "PREPARE hot AS "+sqlText)
	require.NoError(t, err, name)
	placeholders := make([]string, len(params))
	vals := make([]any, len(params))
	for i, p := range params {
		v, ok := args[p]
		require.True(t, ok, "%s: no value for parameter %s", name, p)
		placeholders[i], vals[i] = fmt.Sprintf("$%d", i+1), v
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err = conn.Exec(c, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		tx, err := conn.Begin(c)
		require.NoError(t, err)
		var out string
		err = tx.QueryRow(c, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE hot("+strings.Join(placeholders, ", ")+")", vals...).Scan(&out)
		require.NoError(t, err, name)
		require.NoError(t, tx.Rollback(c))
		var plans []struct{ Plan pgPlanNode }
		require.NoError(t, json.Unmarshal([]byte(out), &plans))
		require.Len(t, plans, 1)
		var problems []string
		top := plans[0].Plan
		top.walk(func(n *pgPlanNode) {
			if n.Relation != "jobs" {
				return
			}
			// A scan may read no more rows than the statement returns (an
			// index scan feeding min() must stop at its first row).
			bufs := n.SharedHit + n.SharedRead
			rows := min(n.Rows*n.Loops, max(top.Rows, 1))
			bound := planBufPerRow*(rows+n.Loops) + planBufSlack
			switch {
			case strings.Contains(n.Type, "Seq Scan"):
				problems = append(problems, fmt.Sprintf("%s on jobs", n.Type))
			case strings.Contains(n.Type, "Scan") && bufs > bound:
				problems = append(problems, fmt.Sprintf("%s using %s: %d buffers for %d rows in %d loops, %d returned (bound %d)",
					n.Type, n.Index, bufs, n.Rows*n.Loops, n.Loops, top.Rows, bound))
			}
		})
		t.Logf("%s (%s): %d buffers, %.3f ms", name, mode, plans[0].Plan.SharedHit+plans[0].Plan.SharedRead, plans[0].Plan.Time)
		assert.Empty(t, problems, "%s (%s) reads unrelated rows:\n%s", name, mode, out)
	}
	_, err = conn.Exec(c, "DEALLOCATE hot")
	require.NoError(t, err)
}

// pgPlanNode is the part of EXPLAIN (FORMAT JSON) the check reads.
type pgPlanNode struct {
	Type       string       `json:"Node Type"`
	Relation   string       `json:"Relation Name"`
	Index      string       `json:"Index Name"`
	Rows       int          `json:"Actual Rows"`
	Loops      int          `json:"Actual Loops"`
	Time       float64      `json:"Actual Total Time"`
	SharedHit  int          `json:"Shared Hit Blocks"`
	SharedRead int          `json:"Shared Read Blocks"`
	Plans      []pgPlanNode `json:"Plans"`
}

func (n *pgPlanNode) walk(f func(*pgPlanNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// checkLitePlan reads the statement's EXPLAIN QUERY PLAN (no SCAN of
// alk_jobs without an index) and runs it once, in a transaction rolled back
// after, counting its VM steps and full-scan steps.
func checkLitePlan(t *testing.T, e *engineEnv, name, sqlText string, params []string, args map[string]any) {
	c := ctx(t)
	db := e.sqlDB(t)
	conn, err := db.Conn(c)
	require.NoError(t, err)
	defer conn.Close()
	if slices.Contains(params, "ids") {
		// ClaimJobs stamps the ids ClaimableJobs chose: the ready jobs.
		var ids string
		require.NoError(t, conn.QueryRowContext(c, "SELECT json_group_array(id) FROM alk_jobs WHERE queue = 'skewed' AND state = 'pending' AND run_at <= ?",
			args["now"]).Scan(&ids))
		args = maps.Clone(args)
		args["ids"] = ids
	}
	vals := make([]any, len(params))
	for i, p := range params {
		v, ok := args[p]
		require.True(t, ok, "%s: no value for parameter %s", name, p)
		vals[i] = v
	}

	// Aliases of alk_jobs in the statement: a SCAN of any of them is a
	// full table scan.
	aliases := map[string]bool{"alk_jobs": true}
	for _, m := range regexp.MustCompile(`alk_jobs\s+(?:AS\s+)?(\w+)`).FindAllStringSubmatch(sqlText, -1) {
		aliases[m[1]] = true
	}
	rows, err := conn.QueryContext(c, "EXPLAIN QUERY PLAN "+sqlText, vals...)
	require.NoError(t, err, name)
	var plan []string
	var problems []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan = append(plan, detail)
		if f := strings.Fields(detail); len(f) == 2 && f[0] == "SCAN" && aliases[f[1]] {
			problems = append(problems, detail)
		}
	}
	require.NoError(t, rows.Err())
	assert.Empty(t, problems, "%s scans alk_jobs:\n%s", name, strings.Join(plan, "\n"))

	err = conn.Raw(func(dc any) error {
		raw := dc.(interface{ Raw() *sqlite3.Conn }).Raw()
		if err := raw.Exec("BEGIN"); err != nil {
			return err
		}
		defer raw.Exec("ROLLBACK")
		stmt, _, err := raw.Prepare(sqlText)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, v := range vals {
			switch v := v.(type) {
			case int64:
				err = stmt.BindInt64(i+1, v)
			case int:
				err = stmt.BindInt64(i+1, int64(v))
			case string:
				err = stmt.BindText(i+1, v)
			default:
				err = fmt.Errorf("parameter %s: unexpected %T", params[i], v)
			}
			if err != nil {
				return err
			}
		}
		n := 0
		for stmt.Step() {
			n++
		}
		if err := stmt.Err(); err != nil {
			return err
		}
		steps := stmt.Status(sqlite3.STMTSTATUS_VM_STEP, false)
		full := stmt.Status(sqlite3.STMTSTATUS_FULLSCAN_STEP, false)
		bound := planStepsPerRow*planReady + planStepsSlack
		t.Logf("%s: %d rows, %d VM steps, %d full-scan steps; plan: %s", name, n, steps, full, strings.Join(plan, "; "))
		assert.Zero(t, full, "%s steps through alk_jobs in a full scan:\n%s", name, strings.Join(plan, "\n"))
		assert.LessOrEqual(t, steps, bound, "%s reads unrelated rows:\n%s", name, strings.Join(plan, "\n"))
		return nil
	})
	require.NoError(t, err, name)
}

// TestClaimTakesTheOrderedPrefix: whatever mix of priorities, due times,
// expiry and lapsed claims a queue holds, Claim takes exactly the jobs an
// ordered scan of every claimable job (priority DESC, run_at, id) takes
// first, so walking priorities one at a time changed no claim's result.
func TestClaimTakesTheOrderedPrefix(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("mix")
		c := ctx(t)
		rng := rand.New(rand.NewPCG(1, 2))

		type model struct {
			id, prio        int64
			runAt, expires  time.Time
			claimedUntil    time.Time // zero: pending
			attempts, limit int
		}
		jobs := map[int64]*model{}
		enqueue := func(k int) {
			for range k {
				opts := store.EnqueueOpts{Priority: rng.IntN(6) - 2, MaxAttempts: 1 + rng.IntN(3)}
				if rng.IntN(2) == 0 {
					opts.RunAt = clk.Now().Add(time.Duration(rng.IntN(120)-60) * time.Second)
				}
				if rng.IntN(5) == 0 {
					opts.ExpiresAt = clk.Now().Add(time.Duration(1+rng.IntN(90)) * time.Second)
				}
				id, err := q.Enqueue(c, nil, opts)
				require.NoError(t, err)
				runAt := opts.RunAt
				if runAt.IsZero() {
					runAt = clk.Now()
				}
				jobs[id] = &model{id: id, prio: int64(opts.Priority), runAt: runAt, expires: opts.ExpiresAt, limit: opts.MaxAttempts}
			}
		}
		expired := func(m *model, now time.Time) bool { return !m.expires.IsZero() && !m.expires.After(now) }
		for round := range 40 {
			enqueue(rng.IntN(12))
			clk.Advance(time.Duration(rng.IntN(20)) * time.Second)
			now := clk.Now()
			var want []*model
			for _, m := range jobs {
				pending := m.claimedUntil.IsZero()
				switch {
				case expired(m, now):
				case pending && !m.runAt.After(now):
					want = append(want, m)
				case !pending && !m.claimedUntil.After(now) && m.attempts < m.limit:
					want = append(want, m)
				}
			}
			slices.SortFunc(want, func(a, b *model) int {
				if a.prio != b.prio {
					return int(b.prio - a.prio)
				}
				if !a.runAt.Equal(b.runAt) {
					return a.runAt.Compare(b.runAt)
				}
				return int(a.id - b.id)
			})
			n := 1 + rng.IntN(8)
			want = want[:min(n, len(want))]
			got, err := q.Claim(c, "w", n, time.Duration(5+rng.IntN(30))*time.Second)
			require.NoError(t, err)
			wantIDs := make([]int64, len(want))
			for i, m := range want {
				wantIDs[i] = m.id
			}
			require.Equal(t, wantIDs, ids(got), "round %d, claim of %d", round, n)
			// Follow what the store did: claimed jobs run; some are acked or
			// retried; dead ones (expired, spent) leave the model.
			for id, m := range jobs {
				if expired(m, now) || (!m.claimedUntil.IsZero() && !m.claimedUntil.After(now) && m.attempts >= m.limit) {
					delete(jobs, id)
				}
			}
			for _, j := range got {
				m := jobs[j.ID]
				m.claimedUntil, m.attempts = *j.ClaimExpiresAt, j.Attempts
				switch rng.IntN(3) {
				case 0:
					require.NoError(t, j.Ack(c))
					delete(jobs, j.ID)
				case 1:
					delay := time.Duration(rng.IntN(30)) * time.Second
					ok, err := j.Retry(c, delay, "again")
					require.NoError(t, err)
					if ok {
						m.claimedUntil, m.runAt = time.Time{}, now.Add(delay)
					} else {
						delete(jobs, j.ID) // out of attempts: dead
					}
				}
			}
		}
	})
}
