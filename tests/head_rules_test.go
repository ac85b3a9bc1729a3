package tests

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// headRuleBreaks are writes by hand that break the head rule of the heads
// table (head_offset, schema_version and compaction_rank are all NULL, a
// headless row, or all set, a head). %s is the table; the stream is "kv",
// whose key "h" has a head and key "l" is headless.
var headRuleBreaks = []struct{ what, sql string }{
	{"head without its schema version", `UPDATE %s SET schema_version = NULL WHERE stream = 'kv' AND key = 'h'`},
	{"head without its rank", `UPDATE %s SET compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`},
	{"headless with an offset only", `UPDATE %s SET head_offset = 1 WHERE stream = 'kv' AND key = 'l'`},
	{"headless with a rank only", `UPDATE %s SET compaction_rank = 0 WHERE stream = 'kv' AND key = 'l'`},
	{"head unset but for its offset", `UPDATE %s SET schema_version = NULL, compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`},
	{"new row with an offset only", `INSERT INTO %s (stream, key, head_offset, created_at, updated_at) VALUES ('kv', 'n', 1, 1, 1)`},
}

// headsInBothShapes leaves stream "kv" with key "h" holding a head and key
// "l" a headless row (inserted by hand, as a lock does), and returns h's
// offset.
func headsInBothShapes(t *testing.T, e *engineEnv, s *store.Store, db *sql.DB) int64 {
	t.Helper()
	off, err := s.Stream("kv").PublishWithKey(ctx(t), "h", []byte("v"))
	require.NoError(t, err)
	table, now := headTable(e.name), "1"
	if e.name == "pg" {
		now = "now()"
	}
	_, err = db.ExecContext(ctx(t), fmt.Sprintf(`INSERT INTO %s (stream, key, created_at, updated_at) VALUES ('kv', 'l', %s, %s)`, table, now, now))
	require.NoError(t, err)
	return off
}

func headTable(engine string) string {
	if engine == "pg" {
		return "alkstore.compaction_heads"
	}
	return "alk_compaction_heads"
}

// requireHeadRulesHold runs headRuleBreaks: each is refused (on PostgreSQL
// with SQLSTATE 23514 and the rule's name, compaction_heads_check), and
// both rows are left as they were; a headless row may still take a head
// (all three set), and a head may become headless (all three cleared).
func requireHeadRulesHold(t *testing.T, engine string, db *sql.DB, off int64) {
	t.Helper()
	table := headTable(engine)
	for _, b := range headRuleBreaks {
		q := b.sql
		if engine == "pg" {
			q = pgTimes(q)
		}
		_, err := db.ExecContext(ctx(t), fmt.Sprintf(q, table))
		require.Error(t, err, b.what)
		if engine == "pg" {
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%s: %v", b.what, err)
			assert.Equal(t, "23514", pgErr.Code, "%s: %v", b.what, err)
			assert.Equal(t, "compaction_heads_check", pgErr.ConstraintName, "%s: %v", b.what, err)
		} else {
			assert.Contains(t, err.Error(), "CHECK constraint failed", b.what)
		}
	}
	var head, version, rank sql.NullInt64
	require.NoError(t, db.QueryRowContext(ctx(t), fmt.Sprintf(`SELECT head_offset, schema_version, compaction_rank FROM %s WHERE stream = 'kv' AND key = 'h'`, table)).
		Scan(&head, &version, &rank))
	assert.Equal(t, off, head.Int64)
	assert.True(t, version.Valid && rank.Valid)
	require.NoError(t, db.QueryRowContext(ctx(t), fmt.Sprintf(`SELECT head_offset, schema_version, compaction_rank FROM %s WHERE stream = 'kv' AND key = 'l'`, table)).
		Scan(&head, &version, &rank))
	assert.False(t, head.Valid || version.Valid || rank.Valid, "l stays headless")

	tx, err := db.BeginTx(ctx(t), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx(t), fmt.Sprintf(`UPDATE %s SET head_offset = %d, schema_version = 1, compaction_rank = 0 WHERE stream = 'kv' AND key = 'l'`, table, off))
	require.NoError(t, err, "a headless row takes a head")
	_, err = tx.ExecContext(ctx(t), fmt.Sprintf(`UPDATE %s SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`, table))
	require.NoError(t, err, "a head becomes headless")
}

// pgTimes gives a break's integer times PostgreSQL's type.
func pgTimes(q string) string {
	return strings.ReplaceAll(q, "1, 1, 1)", "1, now(), now())")
}

// TestHeadRulesRefuseRowsWrittenByHand: the heads table refuses a row whose
// head columns are neither all NULL (headless) nor all set (a head), when
// the row is written by hand (schema 00033 moved PostgreSQL's rule from a
// table CHECK into a domain the table's one CHECK casts to: same rule, same
// SQLSTATE, same constraint name).
func TestHeadRulesRefuseRowsWrittenByHand(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		db := e.sqlDB(t)
		off := headsInBothShapes(t, e, s, db)
		requireHeadRulesHold(t, e.name, db, off)
	})
}

// TestHeadRulesMigrateBothWays: schema 00033 down and up again on a
// database holding a head and a headless row: up, the heads table has one
// CHECK, validated, casting to alkstore.head_nulls, and fillfactor 50;
// down, 00001's CHECK comes back validated under its name, the domain and
// the fillfactor go; each way the rule refuses what it refused. Applying
// the up migration's first step again after it ran succeeds, and keyed
// publishes go on. PostgreSQL only: SQLite's 00033 is a no-op.
func TestHeadRulesMigrateBothWays(t *testing.T) {
	emptyDatabases(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s := e.open(t)
	db := e.sqlDB(t)
	off := headsInBothShapes(t, e, s, db)
	require.NoError(t, s.Close())
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)

	checks := func() map[string]string {
		t.Helper()
		rows, err := db.QueryContext(c, `SELECT conname, pg_get_constraintdef(oid), convalidated FROM pg_constraint
			WHERE conrelid = 'alkstore.compaction_heads'::regclass AND contype = 'c'`)
		require.NoError(t, err)
		defer rows.Close()
		m := map[string]string{}
		for rows.Next() {
			var name, def string
			var valid bool
			require.NoError(t, rows.Scan(&name, &def, &valid))
			assert.True(t, valid, "%s validated", name)
			m[name] = def
		}
		require.NoError(t, rows.Err())
		return m
	}
	shape := func() (domains int, options string) {
		t.Helper()
		require.NoError(t, db.QueryRowContext(c, `SELECT (SELECT count(*) FROM pg_type WHERE typname = 'head_nulls'),
			COALESCE((SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'alkstore.compaction_heads'::regclass), '')`).
			Scan(&domains, &options))
		return
	}
	up := func() {
		t.Helper()
		m := checks()
		assert.Len(t, m, 1, "%v", m)
		assert.Contains(t, m["compaction_heads_rules_check"], "::alkstore.head_nulls")
		domains, options := shape()
		assert.Equal(t, 1, domains)
		assert.Equal(t, "fillfactor=50", options)
		requireHeadRulesHold(t, "pg", db, off)
	}
	up()

	_, err = p.DownTo(c, 32)
	require.NoError(t, err)
	m := checks()
	assert.Len(t, m, 1, "%v", m)
	assert.Contains(t, m["compaction_heads_check"], "(head_offset IS NULL) = (schema_version IS NULL)")
	domains, options := shape()
	assert.Zero(t, domains, "down drops the domain")
	assert.Empty(t, options, "down resets the fillfactor")
	requireHeadRulesHold(t, "pg", db, off)

	_, err = p.Up(c)
	require.NoError(t, err)
	up()

	// The up migration's first step, run again, then its VALIDATE.
	e.execSQL(t, firstStep(t, fsys, "00033_cheaper_head_writes.sql"),
		`ALTER TABLE alkstore.compaction_heads VALIDATE CONSTRAINT compaction_heads_rules_check`)
	up()

	s = e.open(t)
	next, err := s.Stream("kv").PublishWithKey(c, "h", []byte("w"))
	require.NoError(t, err)
	h, err := s.Stream("kv").Key("h").CompactionHead(c)
	require.NoError(t, err)
	assert.Equal(t, next, h.Offset)
}
