package tests

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// jobRuleBreaks are writes by hand (a DBA's, an application's SQL) that
// break one of the rules the jobs table's CHECKs hold, each with the
// constraint PostgreSQL names: an unknown state, no attempts allowed, a
// running job without a claim, a pending job holding a claim, a unique key
// without its states (PostgreSQL only). %s is the table, %d a job id.
var jobRuleBreaks = []struct{ what, sql, constraint string }{
	{"unknown state on insert", `INSERT INTO %s (queue, state, max_attempts, created_at, run_at) VALUES ('q', 'bogus', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)`, "jobs_state_check"},
	{"unknown state on update", `UPDATE %s SET state = 'Pending' WHERE id = %d`, "jobs_state_check"},
	{"no attempts allowed", `UPDATE %s SET max_attempts = 0 WHERE id = %d`, "jobs_max_attempts_check"},
	{"running without a claim", `UPDATE %s SET state = 'running' WHERE id = %d`, "jobs_check"},
	{"pending holding a claim", `UPDATE %s SET claim_token = 7, claim_expires_at = CURRENT_TIMESTAMP WHERE id = %d`, "jobs_check"},
	{"unique key without its states", `UPDATE %s SET unique_key = 'k'::bytea WHERE id = %d`, "jobs_unique_check"}, // PostgreSQL only
}

// requireJobRulesHold runs jobRuleBreaks against job id: each is refused
// (on PostgreSQL with SQLSTATE 23514 and its constraint's name in the
// error), and the job is left as it was.
func requireJobRulesHold(t *testing.T, engine string, db *sql.DB, id int64) {
	t.Helper()
	table := "alk_jobs"
	if engine == "pg" {
		table = "alkstore.jobs"
	}
	for _, b := range jobRuleBreaks {
		q := b.sql
		if engine == "lite" && strings.Contains(q, "::bytea") {
			continue // SQLite's unique columns (00010) have no CHECK
		}
		var err error
		if b.sql[0] == 'I' {
			_, err = db.ExecContext(ctx(t), fmt.Sprintf(q, table))
		} else {
			_, err = db.ExecContext(ctx(t), fmt.Sprintf(q, table, id))
		}
		require.Error(t, err, b.what)
		if engine == "pg" {
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%s: %v", b.what, err)
			assert.Equal(t, "23514", pgErr.Code, "%s: %v", b.what, err)
			assert.Equal(t, b.constraint, pgErr.ConstraintName, "%s: %v", b.what, err)
			assert.Contains(t, err.Error(), `violates check constraint "`+b.constraint+`"`, b.what)
		} else {
			assert.Contains(t, err.Error(), "CHECK constraint failed", b.what)
		}
	}
	var state string
	var attempts int
	require.NoError(t, db.QueryRowContext(ctx(t), fmt.Sprintf(`SELECT state, max_attempts FROM %s WHERE id = %d`, table, id)).Scan(&state, &attempts))
	assert.Equal(t, "pending", state)
	assert.Equal(t, 3, attempts)
}

// TestJobRulesRefuseRowsWrittenByHand: the jobs table still refuses a row
// that breaks any of its four rules when the row is written by hand, each
// refusal naming its rule (schema 00027 moved PostgreSQL's state rule into a
// domain the CHECK casts to, and 00030 all four rules into one domain the
// table's one CHECK casts the row to: same rules, same SQLSTATE, same
// constraint names).
func TestJobRulesRefuseRowsWrittenByHand(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		id, err := s.Queue("q").Enqueue(ctx(t), []byte("x"), store.EnqueueOpts{MaxAttempts: 3})
		require.NoError(t, err)
		requireJobRulesHold(t, e.name, e.sqlDB(t), id)
	})
}

// jobsInEveryState opens a fresh store on e, leaves jobs of queue "q"
// pending, running, completed, dead... and one pending job (its id
// returned) with MaxAttempts 3, closes the store, and returns a goose
// provider over the schema for the database.
func jobsInEveryState(t *testing.T, e *engineEnv) (*goose.Provider, *sql.DB, fs.FS, int64) {
	t.Helper()
	c := ctx(t)
	s := e.open(t)
	q := s.Queue("q")
	_, err := q.EnqueueMany(c, make([]store.NewJob, 50))
	require.NoError(t, err)
	jobs, err := q.Claim(c, "w", 20, 60e9)
	require.NoError(t, err)
	for i, j := range jobs {
		switch i % 4 {
		case 0:
			require.NoError(t, j.Ack(c))
		case 1:
			require.NoError(t, j.Fail(c, "boom"))
		case 2:
			require.NoError(t, q.Cancel(c, j.ID))
		}
	}
	id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 3}) // stays pending
	require.NoError(t, err)
	require.NoError(t, s.Close())

	db := e.sqlDB(t)
	dialect, table, files := goose.DialectPostgres, schema.PostgresVersionTable, schema.Postgres
	if e.name == "lite" {
		dialect, table, files = goose.DialectSQLite3, schema.SQLiteVersionTable, schema.SQLite
	}
	fsys, err := files()
	require.NoError(t, err)
	p, err := goose.NewProvider(dialect, db, fsys, goose.WithTableName(table), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p, db, fsys, id
}

// firstStep is the first statement of a NO TRANSACTION migration's Up (the
// DO block between its first StatementBegin and StatementEnd).
func firstStep(t *testing.T, fsys fs.FS, file string) string {
	t.Helper()
	up, err := fs.ReadFile(fsys, file)
	require.NoError(t, err)
	_, first, ok := strings.Cut(string(up), "-- +goose StatementBegin")
	require.True(t, ok)
	first, _, ok = strings.Cut(first, "-- +goose StatementEnd")
	require.True(t, ok)
	return first
}

// jobChecks returns the validated CHECK constraints of the jobs table, by
// name, each with its definition; an unvalidated one fails the test.
func jobChecks(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), `SELECT conname, pg_get_constraintdef(oid), convalidated FROM pg_constraint
		WHERE conrelid = 'alkstore.jobs'::regclass AND contype = 'c'`)
	require.NoError(t, err)
	defer rows.Close()
	checks := map[string]string{}
	for rows.Next() {
		var name, def string
		var valid bool
		require.NoError(t, rows.Scan(&name, &def, &valid))
		assert.True(t, valid, "%s validated", name)
		checks[name] = def
	}
	require.NoError(t, rows.Err())
	return checks
}

// TestJobStateCheckMigratesBothWays: schema 00027 down and up again on a
// database holding jobs in every state: each way the CHECK ends validated,
// keeps its name, and refuses what it refused; applying the up migration's
// first step again after it ran (a VALIDATE that failed, then goose run
// again) succeeds. PostgreSQL only: SQLite's 00027 is a no-op. It starts
// from version 29 (00030 moved the rules again).
func TestJobStateCheckMigratesBothWays(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	p, db, fsys, id := jobsInEveryState(t, e)
	_, err := p.DownTo(c, 29)
	require.NoError(t, err)
	checkDef := func(want string) {
		t.Helper()
		assert.Contains(t, jobChecks(t, db)["jobs_state_check"], want)
	}
	checkDef("alkstore.job_state")
	requireJobRulesHold(t, "pg", db, id)

	_, err = p.DownTo(c, 24)
	require.NoError(t, err)
	checkDef("'pending'::text, 'running'::text")
	var domains int
	require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FROM pg_type WHERE typname = 'job_state'`).Scan(&domains))
	assert.Zero(t, domains, "down drops the domain")
	requireJobRulesHold(t, "pg", db, id)

	_, err = p.UpTo(c, 29)
	require.NoError(t, err)
	checkDef("alkstore.job_state")
	requireJobRulesHold(t, "pg", db, id)

	// The up migration's first step, run again, then its VALIDATE.
	e.execSQL(t, firstStep(t, fsys, "00027_cheaper_job_checks.sql"), `ALTER TABLE alkstore.jobs VALIDATE CONSTRAINT jobs_state_check`)
	checkDef("alkstore.job_state")
	requireJobRulesHold(t, "pg", db, id)

	s := e.open(t)
	n, err := s.Queue("q").Enqueue(c, []byte("y"), store.EnqueueOpts{})
	require.NoError(t, err)
	assert.Greater(t, n, id)
}

// TestJobRulesMigrateBothWays: schema 00030 (the four rules of a job row in
// one domain, alkstore.job_rules, which the table's one CHECK casts the row
// to; and 00029's jobs_expirable_by_time dropped) down and up again on a
// database holding jobs in every state: up, the table has that one CHECK,
// validated, and no such index; down, 00027's four CHECKs come back
// validated with the state domain, the new types are gone and the index is
// back; each way every rule refuses what it refused, naming its rule.
// Applying the up migration's first step again after it ran succeeds.
// PostgreSQL only: SQLite's 00030 is a no-op.
func TestJobRulesMigrateBothWays(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	p, db, fsys, id := jobsInEveryState(t, e)
	types := func() (n int) {
		t.Helper()
		require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
			WHERE n.nspname = 'alkstore' AND t.typname IN ('job_rules', 'job_rules_row')`).Scan(&n))
		return n
	}
	byTime := func() (n int) { // 00029's index, valid
		t.Helper()
		require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FROM pg_index
			WHERE indexrelid = to_regclass('alkstore.jobs_expirable_by_time') AND indisvalid`).Scan(&n))
		return n
	}
	up := func() {
		t.Helper()
		assert.Zero(t, byTime(), "up drops jobs_expirable_by_time")
		checks := jobChecks(t, db)
		assert.Len(t, checks, 1, "%v", checks)
		assert.Contains(t, checks["jobs_rules_check"], "::alkstore.job_rules")
		assert.Equal(t, 2, types())
		requireJobRulesHold(t, "pg", db, id)
	}
	up()

	_, err := p.DownTo(c, 29)
	require.NoError(t, err)
	checks := jobChecks(t, db)
	assert.Len(t, checks, 4, "%v", checks)
	assert.Contains(t, checks["jobs_state_check"], "alkstore.job_state")
	for _, name := range []string{"jobs_max_attempts_check", "jobs_check", "jobs_unique_check"} {
		assert.Contains(t, checks, name)
	}
	assert.Zero(t, types(), "down drops the rules' domain and type")
	assert.Equal(t, 1, byTime(), "down builds jobs_expirable_by_time again")
	requireJobRulesHold(t, "pg", db, id)

	_, err = p.Up(c)
	require.NoError(t, err)
	up()

	// The up migration's first step, run again, then its VALIDATE.
	e.execSQL(t, firstStep(t, fsys, "00030_cheaper_job_writes.sql"), `ALTER TABLE alkstore.jobs VALIDATE CONSTRAINT jobs_rules_check`)
	up()

	s := e.open(t)
	n, err := s.Queue("q").Enqueue(c, []byte("y"), store.EnqueueOpts{})
	require.NoError(t, err)
	assert.Greater(t, n, id)
}
