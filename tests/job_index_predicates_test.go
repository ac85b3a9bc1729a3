package tests

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Schema 00039 (PostgreSQL) builds three job indexes under predicates that
// test columns for NULL, which PostgreSQL plans and compiles once a
// statement for every INSERT and UPDATE of jobs, whether or not the row
// enters the index: the finished indexes on finished_at IS NOT NULL, the
// unique one on unique_key alone (the held flag a key column). SQLite's
// finished and expiring indexes have said finished_at since its 00025.
// Both rest on one rule of the rows the library writes: finished_at is set
// exactly when the state is final.

// jobsInManyStates writes jobs through the store that pass through every
// transition: pending, running, completed (kept), dead, retried, snoozed,
// released, cancelled (running and pending), expired (pending, and running
// with its claim lapsed), requeued (cancelled, dead), and unique jobs
// holding their key or not (queue "preds-u").
func jobsInManyStates(t *testing.T, s *store.Store, clk *fakeClock) {
	t.Helper()
	c := ctx(t)
	q, u := s.Queue("preds"), s.Queue("preds-u")
	require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour, DeadRetention: time.Hour}))
	enqueue := func(opts store.EnqueueOpts) int64 {
		t.Helper()
		id, err := q.Enqueue(c, []byte("x"), opts)
		require.NoError(t, err)
		return id
	}
	claim := func(q *store.Queue, n int) []*store.Job {
		t.Helper()
		jobs, err := q.Claim(c, "w", n, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, n)
		return jobs
	}
	expiring := store.EnqueueOpts{MaxAttempts: 3, ExpiresAt: clk.Now().Add(time.Minute)}
	enqueue(expiring) // claimed below and left running: its claim lapses, it expires
	var plain []int64
	for range 8 {
		plain = append(plain, enqueue(store.EnqueueOpts{}))
	}
	enqueue(expiring) // expires pending
	jobs := claim(q, 7)
	require.Equal(t, plain[:6], ids(jobs[1:]))
	require.NoError(t, jobs[1].Ack(c))          // completed, kept
	require.NoError(t, jobs[2].Fail(c, "boom")) // dead
	_, err := jobs[3].Retry(c, 0, "again")
	require.NoError(t, err)
	require.NoError(t, jobs[4].Snooze(c, time.Hour))
	require.NoError(t, jobs[5].Release(c))
	require.NoError(t, jobs[6].Cancel(c))      // cancelled while running
	require.NoError(t, q.Cancel(c, plain[6]))  // cancelled while pending
	require.NoError(t, q.Requeue(c, plain[6])) // and back to pending
	_, err = q.RequeueDead(c)                  // the dead one back to pending
	require.NoError(t, err)
	require.NoError(t, claim(q, 1)[0].Fail(c, "boom")) // dead again (another job)

	// Unique jobs: one dies (its key free again, a second job takes it),
	// one holds its key pending; the dead one's requeue leaves it dead.
	_, err = u.EnqueueUnique(c, nil, uniq("dies"))
	require.NoError(t, err)
	require.NoError(t, claim(u, 1)[0].Fail(c, "boom"))
	again, err := u.EnqueueUnique(c, nil, uniq("dies"))
	require.NoError(t, err)
	assert.False(t, again.Duplicate, "a dead job leaves its key free")
	held, err := u.EnqueueUnique(c, nil, uniq("held"))
	require.NoError(t, err)
	require.False(t, held.Duplicate)
	n, err := u.RequeueDead(c)
	require.NoError(t, err)
	assert.Zero(t, n, "the dead job's key is held")

	clk.Advance(2 * time.Minute)
	n, err = q.SweepExpired(c)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "both expiring jobs expired")
	claim(q, 1)                                                                     // one left running
	enqueue(store.EnqueueOpts{MaxAttempts: 3, ExpiresAt: clk.Now().Add(time.Hour)}) // one that can expire, pending
}

// TestFinishedAtMarksFinalJobs: after jobs went through every transition
// the store makes, each job's finished_at is set exactly when its state is
// final, the rule the finished indexes' predicates rest on (PostgreSQL
// since 00039; SQLite's, and its expiring ones', since 00025): a statement
// that finished a job without setting it, or moved one back without
// clearing it, would hide the job from retention, listing and Stats (and
// on SQLite leave a pending job out of the expiry sweeps). Fails, for one,
// with BuryJob's "finished_at = @now" dropped from PostgreSQL's statement
// ("3 dead jobs with finished_at set: false").
func TestFinishedAtMarksFinalJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		jobsInManyStates(t, s, clk)
		table := "alkstore.jobs"
		if e.name == "lite" {
			table = "alk_jobs"
		}
		rows, err := e.sqlDB(t).QueryContext(ctx(t), `SELECT state, finished_at IS NOT NULL, count(*) FROM `+table+` GROUP BY 1, 2 ORDER BY 1, 2`)
		require.NoError(t, err)
		defer rows.Close()
		seen := map[string]bool{}
		for rows.Next() {
			var state string
			var finished bool
			var n int
			require.NoError(t, rows.Scan(&state, &finished, &n))
			final := state != "pending" && state != "running"
			assert.Equal(t, final, finished, "%d %s jobs with finished_at set: %v", n, state, finished)
			seen[state] = true
		}
		require.NoError(t, rows.Err())
		for _, state := range []string{"pending", "running", "completed", "dead", "cancelled", "expired"} {
			assert.True(t, seen[state], "no %s job was written", state)
		}
	})
}

// jobIndexPredicates returns each job index's predicate ("" for none) by
// name, and its key columns as PostgreSQL prints them.
func jobIndexPredicates(t *testing.T, db *sql.DB) (preds, keys map[string]string) {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), `SELECT c.relname, COALESCE(pg_get_expr(i.indpred, i.indrelid, true), ''),
			(SELECT string_agg(pg_get_indexdef(i.indexrelid, k, true), ', ' ORDER BY k) FROM generate_series(1, i.indnkeyatts) k)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'alkstore.jobs'::regclass AND i.indisvalid`)
	require.NoError(t, err)
	defer rows.Close()
	preds, keys = map[string]string{}, map[string]string{}
	for rows.Next() {
		var name, pred, key string
		require.NoError(t, rows.Scan(&name, &pred, &key))
		preds[name], keys[name] = pred, key
	}
	require.NoError(t, rows.Err())
	return preds, keys
}

// TestJobIndexPredicatesMigrateBothWays: schema 00039 up, down and up
// again on a database holding jobs that went through every transition.
// Up, the finished indexes test finished_at and the unique one unique_key
// alone, its held flag a key column; no index is left under a
// temporary name; each rebuilt index holds the rows its old predicate
// held; the unique index still refuses a second holder of a key and lets a
// dead job's key be taken. Down, the old definitions. An Up that stopped
// after dropping the old unique index, before the rename, completes on the
// next run. PostgreSQL only (SQLite's 00039 is a no-op). Fails on 00038's
// schema (the old predicates).
func TestJobIndexPredicatesMigrateBothWays(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	clk := newFakeClock()
	s := e.open(t, store.WithClock(clk.Now))
	jobsInManyStates(t, s, clk)
	db := e.sqlDB(t)
	p, _, _, _ := jobsInEveryState(t, e) // more jobs, in queue "q", and the provider

	newPreds := map[string]string{
		"jobs_pkey":      "",
		"jobs_ready":     "state = 'pending'::text",
		"jobs_running":   "state = 'running'::text",
		"jobs_finished":  "finished_at IS NOT NULL",
		"jobs_listing":   "finished_at IS NOT NULL",
		"jobs_expirable": "expires_at IS NOT NULL AND (state = ANY (ARRAY['pending'::text, 'running'::text]))",
		"jobs_unique":    "unique_key IS NOT NULL",
	}
	oldPreds := map[string]string{
		"jobs_pkey":      "",
		"jobs_ready":     "state = 'pending'::text",
		"jobs_running":   "state = 'running'::text",
		"jobs_finished":  "state = ANY (ARRAY['completed'::text, 'cancelled'::text, 'expired'::text, 'dead'::text])",
		"jobs_listing":   "state = ANY (ARRAY['completed'::text, 'cancelled'::text, 'expired'::text, 'dead'::text])",
		"jobs_expirable": "expires_at IS NOT NULL AND (state = ANY (ARRAY['pending'::text, 'running'::text]))",
		"jobs_unique":    "unique_key IS NOT NULL AND strpos(unique_states, (','::text || state) || ','::text) > 0",
	}
	held := "NULLIF(strpos(unique_states, (','::text || state) || ','::text) > 0, false)"
	up := func() {
		t.Helper()
		preds, keys := jobIndexPredicates(t, db)
		assert.Equal(t, newPreds, preds)
		assert.Equal(t, "unique_key, "+held, keys["jobs_unique"])
		// Each index holds the rows its old predicate held (the unique
		// one: those whose key is held, the entries that can conflict).
		for name, pred := range newPreds {
			if name == "jobs_unique" {
				pred += " AND " + held + " IS NOT NULL"
			}
			var differ, in int
			require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FILTER (WHERE COALESCE(`+cmpOr(pred, "true")+`, false)
					<> COALESCE(`+cmpOr(oldPreds[name], "true")+`, false)), count(*) FILTER (WHERE `+cmpOr(pred, "true")+`)
				FROM alkstore.jobs`).Scan(&differ, &in))
			assert.Zero(t, differ, "%s: rows its new predicate and its old one disagree on", name)
			assert.NotZero(t, in, "%s holds no row here", name)
		}
	}
	up()

	_, err := p.DownTo(c, 38)
	require.NoError(t, err)
	preds, keys := jobIndexPredicates(t, db)
	assert.Equal(t, oldPreds, preds)
	assert.Equal(t, "unique_key", keys["jobs_unique"])
	_, err = p.Up(c)
	require.NoError(t, err)
	up()

	// An Up that stopped between dropping the old unique index and the
	// rename: the next run ends as a whole one does (from 39, the latest
	// version then).
	_, err = p.DownTo(c, 39)
	require.NoError(t, err)
	_, err = db.ExecContext(c, `ALTER INDEX alkstore.jobs_unique RENAME TO jobs_unique_00039`)
	require.NoError(t, err)
	_, err = db.ExecContext(c, `DELETE FROM alkstore.goose_db_version WHERE version_id = 39`)
	require.NoError(t, err)
	_, err = p.Up(c)
	require.NoError(t, err)
	up()

	dup, err := s.Queue("preds-u").EnqueueUnique(c, nil, uniq("held"))
	require.NoError(t, err)
	assert.True(t, dup.Duplicate, "the pending job still holds its key")
	_, err = db.ExecContext(c, `INSERT INTO alkstore.jobs (queue, max_attempts, run_at, unique_key, unique_states)
		SELECT queue, max_attempts, run_at, unique_key, unique_states FROM alkstore.jobs WHERE state = 'pending' AND unique_key IS NOT NULL LIMIT 1`)
	require.ErrorContains(t, err, `unique constraint "jobs_unique"`, "a second holder of a key")
}

// cmpOr is s, or else when s is empty.
func cmpOr(s, orElse string) string {
	if s == "" {
		return orElse
	}
	return s
}

// TestUniqueKeyProbesSkipTheKeysFinishedJobs: since schema 00039
// jobs_unique holds every job with a key, its second column true while the
// job holds the key and NULL once it does not. A key reused by many jobs
// (one enqueued again each time the last finished, kept by retention) then
// has many entries of finished jobs, and the statements that look for the
// key's holder (UniqueJobIDs, JobKeyHolder, RequeueDeadJobs's probe) must
// read the held range only: on 5,000 completed jobs of one key beside its
// pending holder and a dead one (and 50,000 jobs of other keys), each stays within the plan test's bound
// of the rows it returns, custom and generic plans, never analysed and
// analysed. PostgreSQL only. Fails with the probes filtering on strpos (as
// before 00039) instead of naming the held expression: the bitmap scan of
// jobs_unique reads the key's 5,000 finished entries and their heap pages.
func TestUniqueKeyProbesSkipTheKeysFinishedJobs(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	s := e.open(t)
	require.NoError(t, s.Close())
	now := skewedNow
	key := []byte("some digest")
	e.execSQL(t, noAutovacuum)
	for _, stmt := range []string{
		// The table's other jobs: 50,000 finished unique jobs of other
		// keys, one each (on a table of one key's jobs alone, a sequential
		// scan is as cheap as an index and the planner takes it, before
		// 00039 too).
		`INSERT INTO alkstore.jobs (queue, state, max_attempts, created_at, run_at, finished_at, unique_key, unique_states)
			SELECT 'other', 'completed', 3, $1, $1, $1, $2 || int8send(g), ',pending,running,' FROM generate_series(1, 50000) g`,
		`INSERT INTO alkstore.jobs (queue, state, max_attempts, created_at, run_at, finished_at, unique_key, unique_states)
			SELECT 'reused', 'completed', 3, $1, $1, $1, $2, ',pending,running,' FROM generate_series(1, 5000)`,
		`INSERT INTO alkstore.jobs (queue, state, max_attempts, created_at, run_at, finished_at, last_error, unique_key, unique_states)
			VALUES ('reused', 'dead', 3, $1, $1, $1, 'x', $2, ',pending,running,')`,
		`INSERT INTO alkstore.jobs (queue, max_attempts, created_at, run_at, unique_key, unique_states)
			VALUES ('reused', 3, $1, $1, $2, ',pending,running,')`,
	} {
		_, err := e.sqlDB(t).ExecContext(ctx(t), stmt, now.Add(-time.Hour), key)
		require.NoError(t, err)
	}
	var dead int64
	require.NoError(t, e.sqlDB(t).QueryRowContext(ctx(t), `SELECT id FROM alkstore.jobs WHERE state = 'dead'`).Scan(&dead))
	args := map[string]any{
		"uniquekeys": [][]byte{key}, "id": dead, "queue": "reused",
		"now": now, "before": now, "batch": 100,
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			e.execSQL(t, "VACUUM ANALYZE alkstore.jobs")
		}
		for _, name := range []string{"UniqueJobIDs", "JobKeyHolder", "RequeueDeadJobs"} {
			sqlText, params := generatedQuery(t, "pg", name)
			checkPGPlan(t, e, fmt.Sprintf("%s (analyzed: %v)", name, analyzed), sqlText, params, args)
		}
	}
}
