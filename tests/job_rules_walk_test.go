package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// jobRuleRow is one row of the walk over the jobs table's rules: the values
// of the six columns they read (the others are left as an enqueue leaves
// them).
type jobRuleRow struct {
	state         string
	maxAttempts   int
	token, expiry bool // claim_token, claim_expires_at set
	key, states   bool // unique_key, unique_states set
}

// The values the walk takes: every state, and strings that are almost one
// (case, a trailing space, empty); attempts at and around the bound and at
// int4's top; every combination of the claim's two columns and of the
// unique key's two.
var (
	jobRuleStates   = []string{"pending", "running", "completed", "cancelled", "expired", "dead", "Pending", "running ", "", "bogus"}
	jobRuleAttempts = []int{1, 2147483647, 0, -1}
)

// jobRuleRows is every combination of the values above.
func jobRuleRows() []jobRuleRow {
	var rows []jobRuleRow
	for _, st := range jobRuleStates {
		for _, n := range jobRuleAttempts {
			for claim := range 4 {
				for unique := range 4 {
					rows = append(rows, jobRuleRow{st, n, claim&1 != 0, claim&2 != 0, unique&1 != 0, unique&2 != 0})
				}
			}
		}
	}
	return rows
}

// broken names the rules (their constraints' names, as PostgreSQL reports
// them) that r breaks on engine; none: the row is allowed. The rules, as
// schema 00001, 00006 and 00010 wrote them: the state is one of six; at
// least one attempt is allowed; a job is running exactly when it holds a
// claim (a token and an expiry); a unique key comes with its states and
// only with them (PostgreSQL only: SQLite's unique columns have no CHECK).
func (r jobRuleRow) broken(engine string) []string {
	var b []string
	if (r.state == "running") != (r.token && r.expiry) {
		b = append(b, "jobs_check")
	}
	if r.maxAttempts <= 0 {
		b = append(b, "jobs_max_attempts_check")
	}
	if !slices.Contains(jobRuleStates[:6], r.state) {
		b = append(b, "jobs_state_check")
	}
	if engine == "pg" && r.key != r.states {
		b = append(b, "jobs_unique_check")
	}
	return b
}

// values returns r's six columns as SQL literals for engine, in the order
// state, max_attempts, claim_token, claim_expires_at, unique_key,
// unique_states.
func (r jobRuleRow) values(engine string) []string {
	ts, key := "CURRENT_TIMESTAMP", `'\x6b'::bytea`
	if engine == "lite" {
		ts, key = "1", "X'6b'"
	}
	or := func(set bool, v string) string {
		if set {
			return v
		}
		return "NULL"
	}
	return []string{"'" + r.state + "'", fmt.Sprint(r.maxAttempts), or(r.token, "7"), or(r.expiry, ts), or(r.key, key), or(r.states, "',pending,running,'")}
}

func (r jobRuleRow) String() string {
	return fmt.Sprintf("state %q, max_attempts %d, token %t, expiry %t, unique key %t, states %t", r.state, r.maxAttempts, r.token, r.expiry, r.key, r.states)
}

// jobRuleWrite is one statement of the walk over the jobs table's rules:
// row r written by hand, as an INSERT or as an UPDATE of a pending job.
type jobRuleWrite struct {
	r    jobRuleRow
	stmt string
}

// jobRuleWrites is the walk's statements on engine: every row of
// jobRuleRows as an INSERT and, with updates, also as an UPDATE of job id
// (a pending job).
func jobRuleWrites(engine string, id int64, updates bool) []jobRuleWrite {
	table, now := "alkstore.jobs", "CURRENT_TIMESTAMP"
	if engine == "lite" {
		table, now = "alk_jobs", "1"
	}
	cols := []string{"state", "max_attempts", "claim_token", "claim_expires_at", "unique_key", "unique_states"}
	var writes []jobRuleWrite
	for _, r := range jobRuleRows() {
		v := r.values(engine)
		sets := make([]string, len(cols))
		for i, col := range cols {
			sets[i] = col + " = " + v[i]
		}
		writes = append(writes, jobRuleWrite{r, fmt.Sprintf("INSERT INTO %s (queue, created_at, run_at, %s) VALUES ('walk', %s, %s, %s)", table, strings.Join(cols, ", "), now, now, strings.Join(v, ", "))})
		if updates {
			writes = append(writes, jobRuleWrite{r, fmt.Sprintf("UPDATE %s SET %s WHERE id = %d", table, strings.Join(sets, ", "), id)})
		}
	}
	return writes
}

// judge returns how the table's answer to w (n rows written, or err)
// differs from the rules (broken), or "" when it agrees: an allowed row
// refused, a row breaking a rule stored, or a refusal that is not a
// CHECK's (on PostgreSQL: not SQLSTATE 23514 naming one of the rules the
// row breaks).
func (w jobRuleWrite) judge(engine string, n int64, err error) string {
	r, verb := w.r, w.stmt[:6]
	broken := r.broken(engine)
	switch {
	case err == nil && len(broken) > 0:
		return fmt.Sprintf("%s: stored, but breaks %v (%s)", r, broken, verb)
	case err == nil && n != 1:
		return fmt.Sprintf("%s: %d rows written (%s)", r, n, verb)
	case err == nil:
		return ""
	case len(broken) == 0:
		return fmt.Sprintf("%s: refused, but breaks no rule (%s): %v", r, verb, err)
	case engine == "pg":
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" || !slices.Contains(broken, pgErr.ConstraintName) {
			return fmt.Sprintf("%s: refused with %v, want SQLSTATE 23514 naming one of %v (%s)", r, err, broken, verb)
		}
	case !strings.Contains(err.Error(), "CHECK constraint failed"):
		return fmt.Sprintf("%s: refused with %v, want a CHECK's refusal (%s)", r, err, verb)
	}
	return ""
}

// walkJobRules writes every row of jobRuleRows by hand in tx (jobRule-
// Writes), each behind a savepoint it rolls back to, and returns how the
// table's answers differ from the rules (jobRuleWrite.judge). Nothing is
// left in tx. On PostgreSQL, walkJobRulesPipelined does the same in one
// round trip.
func walkJobRules(t *testing.T, engine string, tx *sql.Tx, id int64, updates bool) (wrong []string) {
	t.Helper()
	c := ctx(t)
	for _, w := range jobRuleWrites(engine, id, updates) {
		_, err := tx.ExecContext(c, "SAVEPOINT walk")
		require.NoError(t, err)
		var n int64
		res, err := tx.ExecContext(c, w.stmt)
		if err == nil {
			n, err = res.RowsAffected()
			require.NoError(t, err)
		}
		if msg := w.judge(engine, n, err); msg != "" {
			wrong = append(wrong, msg)
		}
		_, err = tx.ExecContext(c, "ROLLBACK TO SAVEPOINT walk")
		require.NoError(t, err)
	}
	return wrong
}

// walkJobRulesPipelined is walkJobRules on PostgreSQL in the transaction
// open on conn, its statements sent at once (pgconn's pipeline mode):
// SAVEPOINT walk, then for each write the write and ROLLBACK TO SAVEPOINT
// walk, each followed by a Sync, so that a refused write (which aborts the
// transaction, and makes the server skip what follows it up to the next
// Sync) is answered on its own and the rollback after it still runs. Each
// write is one extended-protocol statement as database/sql's was; only the
// round trips go (3 a write one after the other: TestJobRulesWalkCatches-
// WeakerRules made some 15,000).
func walkJobRulesPipelined(t *testing.T, conn *pgx.Conn, id int64, updates bool) (wrong []string) {
	t.Helper()
	writes := jobRuleWrites("pg", id, updates)
	p := conn.PgConn().StartPipeline(ctx(t))
	send := func(stmt string) {
		p.SendQueryParams(stmt, nil, nil, nil, nil)
		p.SendPipelineSync()
	}
	send("SAVEPOINT walk")
	for _, w := range writes {
		send(w.stmt)
		send("ROLLBACK TO SAVEPOINT walk")
	}
	require.NoError(t, p.Flush())
	// next returns the next statement's outcome, and reads its Sync.
	next := func() (pgconn.CommandTag, error) {
		t.Helper()
		res, err := p.GetResults()
		var tag pgconn.CommandTag
		if err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			require.True(t, ok, "a statement's result, got %T", res)
			tag, err = rr.Close()
		}
		sync, serr := p.GetResults()
		require.NoError(t, serr)
		require.IsType(t, &pgconn.PipelineSync{}, sync)
		return tag, err
	}
	_, err := next()
	require.NoError(t, err)
	for _, w := range writes {
		tag, err := next()
		if msg := w.judge("pg", tag.RowsAffected(), err); msg != "" {
			wrong = append(wrong, msg)
		}
		_, err = next()
		require.NoError(t, err)
	}
	require.NoError(t, p.Close())
	return wrong
}

// requireWalkRight fails t with how many rows the walk found wrong and
// the first of them.
func requireWalkRight(t *testing.T, wrong []string) {
	t.Helper()
	if len(wrong) > 0 {
		t.Fatalf("%d writes disagree with the rules, among them:\n%s", len(wrong), strings.Join(wrong[:min(len(wrong), 12)], "\n"))
	}
}

// pendingJobForWalk enqueues one job through the store (pending, MaxAttempts
// 3) and returns its id and a database/sql handle on the database.
func pendingJobForWalk(t *testing.T, e *engineEnv) (*sql.DB, int64) {
	t.Helper()
	s := e.open(t)
	id, err := s.Queue("q").Enqueue(ctx(t), []byte("x"), store.EnqueueOpts{MaxAttempts: 3})
	require.NoError(t, err)
	return e.sqlDB(t), id
}

// TestJobRulesAllowExactlyTheirRows walks the jobs table's rules: every
// combination of the values of the six columns they read (jobRuleRows),
// written by hand as an INSERT and as an UPDATE of an enqueued job, is
// stored exactly when it breaks no rule, and refused otherwise by a CHECK
// (on PostgreSQL, SQLSTATE 23514 naming a rule it breaks). It holds
// whatever form the rules take in the schema (plain CHECKs, CHECKs casting
// to domains), so a rewrite of them for speed must pass it unchanged.
// TestJobRulesWalkCatchesWeakerRules shows it fails on rules weakened in
// each way tried.
func TestJobRulesAllowExactlyTheirRows(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		db, id := pendingJobForWalk(t, e)
		if e.name == "pg" {
			conn := pgxConn(t, e)
			tx, err := conn.Begin(ctx(t))
			require.NoError(t, err)
			defer tx.Rollback(ctx(t))
			requireWalkRight(t, walkJobRulesPipelined(t, conn, id, true))
			return
		}
		tx, err := db.BeginTx(ctx(t), nil)
		require.NoError(t, err)
		defer tx.Rollback()
		requireWalkRight(t, walkJobRules(t, e.name, tx, id, true))
	})
}

// pgxConn is a connection to e's PostgreSQL database, closed when the
// test ends.
func pgxConn(t *testing.T, e *engineEnv) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), e.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestJobRulesWalkCatchesWeakerRules: the walk of TestJobRulesAllowExactly-
// TheirRows fails when the jobs table's rules are replaced by plain CHECKs
// with one rule weakened (each in one transaction, rolled back), and passes
// on the four rules as plain CHECKs (the form of schema 00001-00010, which
// the walk's model, jobRuleRow.broken, follows). PostgreSQL only: DDL is
// transactional there, and SQLite changes a CHECK by rebuilding the table.
func TestJobRulesWalkCatchesWeakerRules(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	_, id := pendingJobForWalk(t, e)
	conn := pgxConn(t, e)
	rules := map[string]string{
		"jobs_state_check":        `state IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead')`,
		"jobs_max_attempts_check": `max_attempts > 0`,
		"jobs_check":              `(state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL)`,
		"jobs_unique_check":       `(unique_key IS NULL) = (unique_states IS NULL)`,
	}
	weaker := []struct{ what, name, check string }{
		{"the four rules as they were", "", ""},
		{"state compared without case", "jobs_state_check", `lower(state) IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead')`},
		{"state compared without trailing spaces", "jobs_state_check", `rtrim(state) IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead')`},
		{"no attempts allowed", "jobs_max_attempts_check", `max_attempts >= 0`},
		{"a claim without its expiry", "jobs_check", `(state = 'running') = (claim_token IS NOT NULL)`},
		{"running needs a claim, not the converse", "jobs_check", `state <> 'running' OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL)`},
		{"a key needs its states, not the converse", "jobs_unique_check", `unique_key IS NULL OR unique_states IS NOT NULL`},
		{"no unique rule", "jobs_unique_check", `true`},
	}
	c := ctx(t)
	for _, w := range weaker {
		t.Run(w.what, func(t *testing.T) {
			tx, err := conn.Begin(c)
			require.NoError(t, err)
			defer tx.Rollback(c)
			rows, _ := tx.Query(c, `SELECT 'DROP CONSTRAINT ' || conname FROM pg_constraint WHERE conrelid = 'alkstore.jobs'::regclass AND contype = 'c'`)
			drops, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.NotEmpty(t, drops)
			adds := drops
			for name, check := range rules {
				if name == w.name {
					check = w.check
				}
				adds = append(adds, fmt.Sprintf("ADD CONSTRAINT %s CHECK (%s)", name, check))
			}
			_, err = tx.Exec(c, "ALTER TABLE alkstore.jobs "+strings.Join(adds, ", "))
			require.NoError(t, err)
			wrong := walkJobRulesPipelined(t, conn, id, false) // the INSERTs suffice here
			if w.name == "" {
				requireWalkRight(t, wrong)
			} else {
				assert.NotEmpty(t, wrong, "the walk missed %s", w.what)
			}
		})
	}
}

// The running rule of SQLite's alk_jobs before and after schema 00035,
// as the table's stored definition spells them.
const (
	liteRunningCheckOld  = `CHECK ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))`
	liteRunningCheckNew1 = `CHECK ((claim_token IS NOT NULL AND claim_expires_at IS NOT NULL) OR state <> 'running')`
	liteRunningCheckNew2 = `CHECK (claim_token IS NULL OR claim_expires_at IS NULL OR state = 'running')`
)

// TestLiteRunningCheckMigratesBothWays: schema 00035 (SQLite's running
// rule as two CHECKs that stop at their first true term) down and up again
// on a database holding jobs in every state (at 00035: 00038 folds the
// rules into one CHECK): each way the table's
// definition holds exactly one form of the rule, PRAGMA integrity_check
// (which checks every stored row against the CHECKs) finds nothing, the
// walk of TestJobRulesAllowExactlyTheirRows passes, and the store opens and
// works the jobs left. SQLite only: PostgreSQL's 00035 is a no-op.
func TestLiteRunningCheckMigratesBothWays(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "lite")
	c := ctx(t)
	p, db, _, id := jobsInEveryState(t, e)
	_, err := p.DownTo(c, 35)
	require.NoError(t, err)
	requireForm := func(old bool) {
		t.Helper()
		var def, integrity string
		require.NoError(t, db.QueryRowContext(c, `SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'alk_jobs'`).Scan(&def))
		assert.Equal(t, old, strings.Contains(def, liteRunningCheckOld), "the old CHECK in\n%s", def)
		assert.Equal(t, !old, strings.Contains(def, liteRunningCheckNew1) && strings.Contains(def, liteRunningCheckNew2), "the two new CHECKs in\n%s", def)
		require.NoError(t, db.QueryRowContext(c, `PRAGMA integrity_check`).Scan(&integrity))
		assert.Equal(t, "ok", integrity)
		tx, err := db.BeginTx(c, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		requireWalkRight(t, walkJobRules(t, "lite", tx, id, true))
	}
	requireForm(false) // as 00035 left it
	_, err = p.DownTo(c, 34)
	require.NoError(t, err)
	requireForm(true)
	_, err = p.UpTo(c, 35)
	require.NoError(t, err)
	requireForm(false)

	q := e.open(t).Queue("q")
	claimMigratedJobs(t, c, q, id)
}

// SQLite's alk_jobs after schema 00038, as its stored definition spells
// it: the rules on the state as one CHECK, max_attempts with a default
// beside its own CHECK; and the two column definitions before it (with
// 00035's two CHECKs, liteRunningCheckNew1 and 2).
const (
	liteJobRulesCheck      = `CHECK ((claim_token IS NULL OR claim_expires_at IS NULL) AND (state = 'pending' OR state = 'completed' OR state = 'cancelled' OR state = 'expired' OR state = 'dead') OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND state = 'running'))`
	liteMaxAttemptsDefault = `max_attempts     INTEGER NOT NULL DEFAULT 25 CHECK (max_attempts > 0),`
	liteStateCheck         = `CHECK (state = 'pending' OR state = 'running' OR state = 'completed' OR state = 'cancelled' OR state = 'expired' OR state = 'dead')`
	liteMaxAttemptsCheck   = `max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),`
)

// liteExecInTx runs stmts in one transaction on db (PRAGMA writable_schema
// holds for its connection only).
func liteExecInTx(t *testing.T, db *sql.DB, stmts ...string) error {
	t.Helper()
	tx, err := db.BeginTx(ctx(t), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx(t), s); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// TestLiteJobRulesCheckMigratesBothWays: schema 00038 (SQLite's rules on
// the state as one CHECK, max_attempts DEFAULT 25) down and up again on a
// database holding jobs in every state, and each direction's statements run
// a second time: each way the table's definition holds exactly one form of
// the rules, PRAGMA integrity_check finds nothing and the walk of
// TestJobRulesAllowExactlyTheirRows passes. On a definition edited by hand
// the two edits part: where the rules are not 00035's text the CHECK stays
// as it is and the default still comes (and goes again down); where
// max_attempts is not 00001's the migration fails naming its file and
// leaves the table as it was, since a batch without options relies on the
// default. Then the store works the jobs left, and a batch without options
// gets DefaultMaxAttempts. SQLite only: PostgreSQL's 00038 is a no-op.
func TestLiteJobRulesCheckMigratesBothWays(t *testing.T) {
	parallelTest(t)
	const file = "00038_one_job_rules_check.sql"
	e := newEnv(t, "lite")
	c := ctx(t)
	p, db, fsys, id := jobsInEveryState(t, e)
	definition := func() string {
		t.Helper()
		var def string
		require.NoError(t, db.QueryRowContext(c, `SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'alk_jobs'`).Scan(&def))
		return def
	}
	requireForm := func(at38 bool) {
		t.Helper()
		def := definition()
		assert.Equal(t, at38, strings.Contains(def, liteJobRulesCheck), "00038's CHECK in\n%s", def)
		assert.Equal(t, at38, strings.Contains(def, liteMaxAttemptsDefault), "00038's default in\n%s", def)
		for _, old := range []string{liteStateCheck, liteMaxAttemptsCheck, liteRunningCheckNew1, liteRunningCheckNew2} {
			assert.Equal(t, !at38, strings.Contains(def, old), "%s in\n%s", old, def)
		}
		var integrity string
		require.NoError(t, db.QueryRowContext(c, `PRAGMA integrity_check`).Scan(&integrity))
		assert.Equal(t, "ok", integrity)
		tx, err := db.BeginTx(c, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		requireWalkRight(t, walkJobRules(t, "lite", tx, id, true))
	}
	requireForm(true) // as Open migrated it
	_, err := p.DownTo(c, 37)
	require.NoError(t, err)
	requireForm(false)
	t.Run("Down restores 00037's text", func(t *testing.T) { // byte for byte
		emptyDatabases(t)
		db37 := newEnv(t, "lite").sqlDB(t)
		p37, err := goose.NewProvider(goose.DialectSQLite3, db37, fsys,
			goose.WithTableName(schema.SQLiteVersionTable), goose.WithDisableGlobalRegistry(true))
		require.NoError(t, err)
		_, err = p37.UpTo(c, 37)
		require.NoError(t, err)
		var def37 string
		require.NoError(t, db37.QueryRowContext(c, `SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'alk_jobs'`).Scan(&def37))
		require.Equal(t, def37, definition())
	})
	require.NoError(t, liteExecInTx(t, db, gooseStatements(t, fsys, file, "Down")...)) // again
	requireForm(false)
	_, err = p.UpTo(c, 38)
	require.NoError(t, err)
	requireForm(true)
	require.NoError(t, liteExecInTx(t, db, gooseStatements(t, fsys, file, "Up")...)) // again
	requireForm(true)

	// Definitions edited by hand.
	_, err = p.DownTo(c, 37)
	require.NoError(t, err)
	edit := func(from, to string) {
		t.Helper()
		require.NoError(t, liteExecInTx(t, db, `PRAGMA writable_schema = ON`,
			fmt.Sprintf(`UPDATE sqlite_schema SET sql = replace(sql, '%s', '%s') WHERE type = 'table' AND name = 'alk_jobs'`,
				strings.ReplaceAll(from, "'", "''"), strings.ReplaceAll(to, "'", "''")),
			`PRAGMA writable_schema = RESET`, `CREATE TABLE alk_schema_cookie (x)`, `DROP TABLE alk_schema_cookie`))
	}
	// The state's rule spelled otherwise: the CHECK is left, the default comes.
	editedState := strings.Replace(liteStateCheck, "'dead')", "'dead' )", 1)
	edit(liteStateCheck, editedState)
	_, err = p.UpTo(c, 38)
	require.NoError(t, err)
	for _, s := range []string{editedState, liteRunningCheckNew1, liteRunningCheckNew2, liteMaxAttemptsDefault} {
		assert.Contains(t, definition(), s)
	}
	assert.NotContains(t, definition(), liteJobRulesCheck)
	_, err = p.DownTo(c, 37)
	require.NoError(t, err)
	assert.Contains(t, definition(), liteMaxAttemptsCheck)
	assert.Contains(t, definition(), editedState)
	edit(editedState, liteStateCheck)
	requireForm(false)

	// Half done by hand, each way: the default without the merged CHECK
	// (the Down takes it off; the Up completes it), and the merged CHECK
	// without the default (the Down restores 00037's rules).
	edit(liteMaxAttemptsCheck, liteMaxAttemptsDefault)
	require.NoError(t, liteExecInTx(t, db, gooseStatements(t, fsys, file, "Down")...))
	requireForm(false)
	edit(liteMaxAttemptsCheck, liteMaxAttemptsDefault)
	_, err = p.UpTo(c, 38)
	require.NoError(t, err)
	requireForm(true)
	edit(liteMaxAttemptsDefault, liteMaxAttemptsCheck)
	_, err = p.DownTo(c, 37)
	require.NoError(t, err)
	requireForm(false)

	// max_attempts spelled otherwise: the migration refuses it, whole.
	edit("CHECK (max_attempts > 0)", "CHECK (max_attempts >= 1)")
	before := definition()
	_, err = p.UpTo(c, 38)
	require.Error(t, err)
	assert.Contains(t, err.Error(), file)
	assert.Equal(t, before, definition())
	v, err := p.GetDBVersion(c)
	require.NoError(t, err)
	assert.EqualValues(t, 37, v)
	edit("CHECK (max_attempts >= 1)", "CHECK (max_attempts > 0)")
	_, err = p.UpTo(c, 38)
	require.NoError(t, err)
	requireForm(true)

	q := e.open(t).Queue("q")
	claimMigratedJobs(t, c, q, id)
	ids, err := q.EnqueueMany(c, make([]store.NewJob, 20))
	require.NoError(t, err)
	for _, id := range ids {
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.DefaultMaxAttempts, j.MaxAttempts, "job %d", id)
	}
}

// claimMigratedJobs claims and acks the jobs a rules migration test left
// in q: the 30 left pending and id, enqueued after them (and the 5 running
// ones, if their minute's claim ran out meanwhile), so the migrated table
// still takes claims and acks.
func claimMigratedJobs(t *testing.T, c context.Context, q *store.Queue, id int64) {
	t.Helper()
	jobs, err := q.Claim(c, "w", 100, 60e9)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(jobs), 31)
	claimed := false
	for _, j := range jobs {
		claimed = claimed || j.ID == id
		require.NoError(t, j.Ack(c))
	}
	assert.True(t, claimed, "job %d claimed", id)
}
