package tests

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// The head rule of the heads table, in two forms. On SQLite, and on
// PostgreSQL up to schema 00035, head_offset, schema_version and
// compaction_rank are all NULL (a headless row) or all set (a head): a
// CHECK. On PostgreSQL since 00036, schema_version and compaction_rank are
// NOT NULL (DEFAULT 0; 0 on a headless row) and head_offset NULL alone
// marks a headless row.
const (
	headRuleAllOrNone = "all or none"
	headRuleNotNull   = "not null"
)

// headRule is the form of the head rule the latest schema of engine has.
func headRule(engine string) string {
	if engine == "pg" {
		return headRuleNotNull
	}
	return headRuleAllOrNone
}

// headRuleBreaks are writes by hand that break the head rule of its form.
// %s is the table; the stream is "kv", whose key "h" has a head and key
// "l" is headless. column: the column a NOT NULL break names.
var headRuleBreaks = map[string][]struct{ what, sql, column string }{
	headRuleAllOrNone: {
		{"head without its schema version", `UPDATE %s SET schema_version = NULL WHERE stream = 'kv' AND key = 'h'`, ""},
		{"head without its rank", `UPDATE %s SET compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`, ""},
		{"headless with an offset only", `UPDATE %s SET head_offset = 1 WHERE stream = 'kv' AND key = 'l'`, ""},
		{"headless with a rank only", `UPDATE %s SET compaction_rank = 0 WHERE stream = 'kv' AND key = 'l'`, ""},
		{"head unset but for its offset", `UPDATE %s SET schema_version = NULL, compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`, ""},
		{"new row with an offset only", `INSERT INTO %s (stream, key, head_offset, created_at, updated_at) VALUES ('kv', 'n', 1, 1, 1)`, ""},
	},
	headRuleNotNull: {
		{"head without its schema version", `UPDATE %s SET schema_version = NULL WHERE stream = 'kv' AND key = 'h'`, "schema_version"},
		{"head without its rank", `UPDATE %s SET compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`, "compaction_rank"},
		{"head unset but for its offset", `UPDATE %s SET schema_version = NULL, compaction_rank = NULL WHERE stream = 'kv' AND key = 'h'`, "schema_version"},
		{"headless without its schema version", `UPDATE %s SET schema_version = NULL WHERE stream = 'kv' AND key = 'l'`, "schema_version"},
		{"headless without its rank", `UPDATE %s SET compaction_rank = NULL WHERE stream = 'kv' AND key = 'l'`, "compaction_rank"},
		{"headless taking an offset without a rank", `UPDATE %s SET head_offset = 1, compaction_rank = NULL WHERE stream = 'kv' AND key = 'l'`, "compaction_rank"},
		{"new row with an offset and no rank", `INSERT INTO %s (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at) VALUES ('kv', 'n', 1, 1, NULL, 1, 1)`, "compaction_rank"},
		{"new headless row written the old way", `INSERT INTO %s (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at) VALUES ('kv', 'n', NULL, NULL, NULL, 1, 1)`, "schema_version"},
	},
}

// headsInBothShapes leaves stream "kv" with key "h" holding a head and key
// "l" a headless row (inserted by hand without its head columns, as a DBA
// or a library before 00036 wrote a lock's row), and returns h's offset.
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

// headlessShape is what a headless row's schema_version and compaction_rank
// hold under a form of the rule: 0 and 0, or NULL and NULL.
func requireHeadlessShape(t *testing.T, rule string, version, rank sql.NullInt64, what string) {
	t.Helper()
	if rule == headRuleNotNull {
		assert.True(t, version.Valid && version.Int64 == 0 && rank.Valid && rank.Int64 == 0, "%s: a headless row holds zeros (%v, %v)", what, version, rank)
		return
	}
	assert.False(t, version.Valid || rank.Valid, "%s: a headless row holds NULLs (%v, %v)", what, version, rank)
}

// requireHeadRulesHold runs the breaks of rule: each is refused (on
// PostgreSQL: all or none with SQLSTATE 23514 and the rule's name,
// compaction_heads_check; not null with 23502 naming the table and the
// column), and both rows are left as they were; a headless row may still
// take a head, and a head may become headless.
func requireHeadRulesHold(t *testing.T, engine, rule string, db *sql.DB, off int64) {
	t.Helper()
	table := headTable(engine)
	for _, b := range headRuleBreaks[rule] {
		q := b.sql
		if engine == "pg" {
			q = pgTimes(q)
		}
		_, err := db.ExecContext(ctx(t), fmt.Sprintf(q, table))
		require.Error(t, err, b.what)
		if engine != "pg" {
			assert.Contains(t, err.Error(), "CHECK constraint failed", b.what)
			continue
		}
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", b.what, err)
		if rule == headRuleAllOrNone {
			assert.Equal(t, "23514", pgErr.Code, "%s: %v", b.what, err)
			assert.Equal(t, "compaction_heads_check", pgErr.ConstraintName, "%s: %v", b.what, err)
			continue
		}
		assert.Equal(t, "23502", pgErr.Code, "%s: %v", b.what, err)
		assert.Equal(t, "compaction_heads", pgErr.TableName, "%s: %v", b.what, err)
		assert.Equal(t, b.column, pgErr.ColumnName, "%s: %v", b.what, err)
		assert.Contains(t, err.Error(), `of relation "compaction_heads" violates not-null constraint`, b.what)
	}
	var head, version, rank sql.NullInt64
	require.NoError(t, db.QueryRowContext(ctx(t), fmt.Sprintf(`SELECT head_offset, schema_version, compaction_rank FROM %s WHERE stream = 'kv' AND key = 'h'`, table)).
		Scan(&head, &version, &rank))
	assert.Equal(t, off, head.Int64)
	assert.True(t, version.Valid && rank.Valid)
	require.NoError(t, db.QueryRowContext(ctx(t), fmt.Sprintf(`SELECT head_offset, schema_version, compaction_rank FROM %s WHERE stream = 'kv' AND key = 'l'`, table)).
		Scan(&head, &version, &rank))
	assert.False(t, head.Valid, "l stays headless")
	requireHeadlessShape(t, rule, version, rank, "l")

	unset := "NULL"
	if rule == headRuleNotNull {
		unset = "0"
	}
	tx, err := db.BeginTx(ctx(t), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx(t), fmt.Sprintf(`UPDATE %s SET head_offset = %d, schema_version = 1, compaction_rank = 0 WHERE stream = 'kv' AND key = 'l'`, table, off))
	require.NoError(t, err, "a headless row takes a head")
	_, err = tx.ExecContext(ctx(t), fmt.Sprintf(`UPDATE %s SET head_offset = NULL, schema_version = %s, compaction_rank = %s WHERE stream = 'kv' AND key = 'h'`, table, unset, unset))
	require.NoError(t, err, "a head becomes headless")
}

// pgTimes gives a break's integer times PostgreSQL's type.
func pgTimes(q string) string {
	return strings.ReplaceAll(q, "1, 1)", "now(), now())")
}

// TestHeadRulesRefuseRowsWrittenByHand: the heads table refuses a row that
// breaks the head rule when the row is written by hand: on SQLite one whose
// head columns are neither all NULL (headless) nor all set (a head); on
// PostgreSQL (schema 00036) one without its schema_version or its rank, a
// headless row's included, with a not-null error naming the column.
func TestHeadRulesRefuseRowsWrittenByHand(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		db := e.sqlDB(t)
		off := headsInBothShapes(t, e, s, db)
		requireHeadRulesHold(t, e.name, headRule(e.name), db, off)
	})
}

// TestHeadlessRowsTheLibraryWritesHaveOneShape: every statement that makes
// a key's row headless (a lock of a new key, a trim, retention) leaves it
// in the shape the engine's head rule gives headless rows (PostgreSQL:
// head_offset NULL, schema_version and compaction_rank 0; SQLite: all three
// NULL), and the key reads as having no value until it takes one again.
func TestHeadlessRowsTheLibraryWritesHaveOneShape(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		db := e.sqlDB(t)
		table := headTable(e.name)
		shape := func(stream, key, what string) {
			t.Helper()
			var head, version, rank sql.NullInt64
			q := fmt.Sprintf(`SELECT head_offset, schema_version, compaction_rank FROM %s WHERE stream = $1 AND key = $2`, table)
			if e.name == "lite" {
				q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
			}
			require.NoError(t, db.QueryRowContext(c, q, stream, key).Scan(&head, &version, &rank), what)
			assert.False(t, head.Valid, "%s: headless", what)
			requireHeadlessShape(t, headRule(e.name), version, rank, what)
			_, err := s.Stream(stream).Key(key).CompactionHead(c)
			require.ErrorIs(t, err, store.ErrNotFound, what)
		}

		// A lock of a key that has no row yet.
		require.NoError(t, s.InTx(c, func(c2 context.Context, tx store.Tx) error {
			h, err := s.Stream("locks").Key("new").LockCompactionHeadTx(c2, tx)
			assert.Nil(t, h)
			return err
		}))
		shape("locks", "new", "locked")

		// A trim of a stream that is not compacted deletes the head's event.
		st := s.Stream("trimmed")
		head, err := st.PublishWithKey(c, "k", []byte("v"))
		require.NoError(t, err)
		n, err := st.TrimTo(c, head)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		shape("trimmed", "k", "trimmed")

		// Retention of a stream that is not compacted, run by a store whose
		// clock is past it.
		rt := s.Stream("retained")
		require.NoError(t, rt.Configure(c, store.StreamConfig{Retention: time.Hour}))
		_, err = rt.PublishWithKey(c, "k", []byte("v"))
		require.NoError(t, err)
		later := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		n, err = later.Maintenance().ApplyRetention(c, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		shape("retained", "k", "retained")

		// Each headless row takes a head again, by the winner rule.
		for _, sk := range [][2]string{{"locks", "new"}, {"trimmed", "k"}, {"retained", "k"}} {
			off, err := s.Stream(sk[0]).PublishWithKey(c, sk[1], []byte("again"))
			require.NoError(t, err)
			h, err := s.Stream(sk[0]).Key(sk[1]).CompactionHead(c)
			require.NoError(t, err, sk)
			assert.Equal(t, off, h.Offset, sk)
			assert.Equal(t, "again", string(h.Payload), sk)
		}
	})
}

// gooseStatements are the statements of one direction ("Up" or "Down") of
// a goose file, as goose runs them outside a transaction: each
// StatementBegin/StatementEnd block, and each other statement up to the
// line that ends with its semicolon.
func gooseStatements(t *testing.T, fsys fs.FS, file, direction string) []string {
	t.Helper()
	text, err := fs.ReadFile(fsys, file)
	require.NoError(t, err)
	var out []string
	var cur strings.Builder
	in, block := false, false
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	for sc.Scan() {
		line := sc.Text()
		switch strings.TrimSpace(line) {
		case "-- +goose Up", "-- +goose Down":
			in = strings.TrimSpace(line) == "-- +goose "+direction
			continue
		case "-- +goose StatementBegin":
			block = true
			continue
		case "-- +goose StatementEnd":
			block = false
			if in {
				out = append(out, cur.String())
			}
			cur.Reset()
			continue
		}
		if !in || (!block && (strings.HasPrefix(line, "--") || strings.TrimSpace(line) == "")) {
			continue
		}
		cur.WriteString(line + "\n")
		if !block && strings.HasSuffix(strings.TrimSpace(line), ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out)
	return out
}

// manyHeads writes, by hand as a library at the database's version would,
// 1,500 heads and 1,500 headless rows of stream "many", alternating in key
// order, so that the migration's walk meets both in each of its batches
// of 1,000 rows. headless is what a headless row holds in schema_version
// and compaction_rank ("NULL" or "0").
func manyHeads(t *testing.T, db *sql.DB, headless string) {
	t.Helper()
	_, err := db.ExecContext(ctx(t), fmt.Sprintf(`INSERT INTO alkstore.compaction_heads
		(stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at)
		SELECT 'many', 'm' || lpad(g::text, 5, '0'),
		       CASE WHEN g %% 2 = 0 THEN 1000000 + g END,
		       CASE WHEN g %% 2 = 0 THEN 2 ELSE %[1]s END,
		       CASE WHEN g %% 2 = 0 THEN g %% 3 ELSE %[1]s END,
		       now(), now(), CASE WHEN g %% 2 = 1 THEN now() END
		FROM generate_series(1, 3000) g`, headless))
	require.NoError(t, err)
}

// requireManyHeads checks that manyHeads's rows are all there, the heads
// untouched and every headless row in the shape of rule.
func requireManyHeads(t *testing.T, db *sql.DB, rule string) {
	t.Helper()
	var heads, headsIntact, headless, headlessShaped int
	cond := "schema_version IS NULL AND compaction_rank IS NULL"
	if rule == headRuleNotNull {
		cond = "schema_version = 0 AND compaction_rank = 0"
	}
	require.NoError(t, db.QueryRowContext(ctx(t), `SELECT
		count(*) FILTER (WHERE head_offset IS NOT NULL),
		count(*) FILTER (WHERE head_offset = 1000000 + substr(key, 2)::int AND schema_version = 2 AND compaction_rank = substr(key, 2)::int % 3),
		count(*) FILTER (WHERE head_offset IS NULL),
		count(*) FILTER (WHERE head_offset IS NULL AND `+cond+`)
		FROM alkstore.compaction_heads WHERE stream = 'many'`).Scan(&heads, &headsIntact, &headless, &headlessShaped))
	assert.Equal(t, 1500, heads)
	assert.Equal(t, 1500, headsIntact, "heads untouched")
	assert.Equal(t, 1500, headless)
	assert.Equal(t, 1500, headlessShaped, "every headless row in the shape of %s", rule)
}

// headsTableShape reads what the migrations 00033 and 00036 change on the
// heads table: its CHECKs (by name, with their definitions; each must be
// validated), which of schema_version and compaction_rank are NOT NULL
// and their defaults, whether the domain alkstore.head_nulls exists, the
// table's options and its comment.
type headsShape struct {
	checks   map[string]string
	notNull  []string
	defaults []string
	domains  int
	options  string
	comment  string
}

func headsTableShape(t *testing.T, db *sql.DB) headsShape {
	t.Helper()
	c := ctx(t)
	sh := headsShape{checks: map[string]string{}}
	rows, err := db.QueryContext(c, `SELECT conname, pg_get_constraintdef(oid), convalidated FROM pg_constraint
		WHERE conrelid = 'alkstore.compaction_heads'::regclass AND contype = 'c'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name, def string
		var valid bool
		require.NoError(t, rows.Scan(&name, &def, &valid))
		assert.True(t, valid, "%s validated", name)
		sh.checks[name] = def
	}
	require.NoError(t, rows.Err())
	require.NoError(t, db.QueryRowContext(c, `SELECT (SELECT count(*) FROM pg_type WHERE typname = 'head_nulls'),
		COALESCE((SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'alkstore.compaction_heads'::regclass), ''),
		obj_description('alkstore.compaction_heads'::regclass, 'pg_class')`).Scan(&sh.domains, &sh.options, &sh.comment))
	var notNull, defaults string
	require.NoError(t, db.QueryRowContext(c, `SELECT
		COALESCE((SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		          WHERE attrelid = 'alkstore.compaction_heads'::regclass AND attname IN ('schema_version', 'compaction_rank') AND attnotnull), ''),
		COALESCE((SELECT string_agg(a.attname || '=' || pg_get_expr(d.adbin, d.adrelid), ',' ORDER BY a.attnum)
		          FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
		          WHERE d.adrelid = 'alkstore.compaction_heads'::regclass AND a.attname IN ('schema_version', 'compaction_rank')), '')`).
		Scan(&notNull, &defaults))
	if notNull != "" {
		sh.notNull = strings.Split(notNull, ",")
	}
	if defaults != "" {
		sh.defaults = strings.Split(defaults, ",")
	}
	return sh
}

// requireHeadsAt36 checks the heads table as 00036 leaves it: no CHECK,
// the two columns NOT NULL DEFAULT 0, no domain, 00033's fillfactor.
func requireHeadsAt36(t *testing.T, db *sql.DB) {
	t.Helper()
	sh := headsTableShape(t, db)
	assert.Empty(t, sh.checks)
	assert.Equal(t, []string{"schema_version", "compaction_rank"}, sh.notNull)
	assert.Equal(t, []string{"schema_version=0", "compaction_rank=0"}, sh.defaults)
	assert.Zero(t, sh.domains, "no domain alkstore.head_nulls")
	assert.Equal(t, "fillfactor=50", sh.options)
	assert.Contains(t, sh.comment, "headless (head_offset NULL, schema_version and compaction_rank 0)")
}

// requireHeadsAt35 checks the heads table as 00033 made it and 00035
// has it: one CHECK casting to alkstore.head_nulls, nullable columns
// without defaults, fillfactor 50, 00004's comment.
func requireHeadsAt35(t *testing.T, db *sql.DB) {
	t.Helper()
	sh := headsTableShape(t, db)
	assert.Len(t, sh.checks, 1, "%v", sh.checks)
	assert.Contains(t, sh.checks["compaction_heads_rules_check"], "::alkstore.head_nulls")
	assert.Empty(t, sh.notNull)
	assert.Empty(t, sh.defaults)
	assert.Equal(t, 1, sh.domains)
	assert.Equal(t, "fillfactor=50", sh.options)
	assert.Contains(t, sh.comment, "headless (head columns NULL)")
}

// TestHeadRulesMigrateBothWays: schemas 00036 and 00033 down and up again
// on a database holding heads and headless rows (3,000 of them besides
// "kv"'s two, more than one batch of 00036's walk). At 00036 the heads
// table has no CHECK, schema_version and compaction_rank are NOT NULL
// DEFAULT 0 and every headless row holds zeros; down to 00035 00033's
// CHECK and domain are back, validated, and every headless row holds NULLs
// again; down to 00032 00001's CHECK comes back and the domain and the
// fillfactor go; each way the rule of that version refuses what it
// refused, and no head changes. Each direction of 00036 run again after it
// ran succeeds and changes nothing, and keyed publishes go on.
// PostgreSQL only: SQLite's 00036 and 00033 are no-ops.
func TestHeadRulesMigrateBothWays(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s := e.open(t)
	db := e.sqlDB(t)
	off := headsInBothShapes(t, e, s, db)
	manyHeads(t, db, "0")
	require.NoError(t, s.Close())
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	const file = "00036_head_columns_not_null.sql"
	at36 := func() {
		t.Helper()
		requireHeadsAt36(t, db)
		requireManyHeads(t, db, headRuleNotNull)
		requireHeadRulesHold(t, "pg", headRuleNotNull, db, off)
	}
	at35 := func() {
		t.Helper()
		requireHeadsAt35(t, db)
		requireManyHeads(t, db, headRuleAllOrNone)
		requireHeadRulesHold(t, "pg", headRuleAllOrNone, db, off)
	}
	at36()

	_, err = p.DownTo(c, 35)
	require.NoError(t, err)
	at35()
	e.execSQL(t, gooseStatements(t, fsys, file, "Down")...) // again
	at35()

	_, err = p.DownTo(c, 32)
	require.NoError(t, err)
	sh := headsTableShape(t, db)
	assert.Len(t, sh.checks, 1, "%v", sh.checks)
	assert.Contains(t, sh.checks["compaction_heads_check"], "(head_offset IS NULL) = (schema_version IS NULL)")
	assert.Zero(t, sh.domains, "down drops the domain")
	assert.Empty(t, sh.options, "down resets the fillfactor")
	requireManyHeads(t, db, headRuleAllOrNone)
	requireHeadRulesHold(t, "pg", headRuleAllOrNone, db, off)

	_, err = p.UpTo(c, 35)
	require.NoError(t, err)
	at35()
	// The up migration's first step of 00033 run again, then its VALIDATE.
	e.execSQL(t, firstStep(t, fsys, "00033_cheaper_head_writes.sql"),
		`ALTER TABLE alkstore.compaction_heads VALIDATE CONSTRAINT compaction_heads_rules_check`)
	at35()

	_, err = p.Up(c)
	require.NoError(t, err)
	at36()
	e.execSQL(t, gooseStatements(t, fsys, file, "Up")...) // again
	at36()

	s = e.open(t)
	for _, key := range []string{"h", "l"} {
		next, err := s.Stream("kv").PublishWithKey(c, key, []byte("w"))
		require.NoError(t, err)
		h, err := s.Stream("kv").Key(key).CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, next, h.Offset)
	}
	require.NoError(t, s.InTx(c, func(c2 context.Context, tx store.Tx) error {
		h, err := s.Stream("many").Key("m00001").LockCompactionHeadTx(c2, tx)
		assert.Nil(t, h, "a migrated headless row locks as headless")
		return err
	}))
	next, err := s.Stream("many").PublishWithKey(c, "m00001", []byte("w"))
	require.NoError(t, err)
	h, err := s.Stream("many").Key("m00001").CompactionHead(c)
	require.NoError(t, err)
	assert.Equal(t, next, h.Offset, "a migrated headless row takes a head")
}

// TestHeadColumnsMigrationSkipsHeldRows: 00036's walk over the headless
// rows skips a row a transaction holds (a lock of the key, a publish in
// flight) instead of waiting for it with the rest of its batch held, and
// the pass after it, once the row is free, gives it its zeros. Run step by
// step from 00035 on a database holding headless rows, with one of them
// locked FOR UPDATE by another connection during the walk. Fails with a
// lock timeout after 10 s when the walk waits for held rows.
func TestHeadColumnsMigrationSkipsHeldRows(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s := e.open(t)
	db := e.sqlDB(t)
	headsInBothShapes(t, e, s, db)
	manyHeads(t, db, "0")
	require.NoError(t, s.Close())
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(c, 35)
	require.NoError(t, err)
	requireManyHeads(t, db, headRuleAllOrNone)

	steps := gooseStatements(t, fsys, "00036_head_columns_not_null.sql", "Up")
	require.Len(t, steps, 6)
	e.execSQL(t, steps[0]) // the defaults, the CHECK dropped
	holder, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	defer holder.Close(c)
	tx, err := holder.Begin(c)
	require.NoError(t, err)
	// m00003: headless, in the walk's first batch, among rows it updates.
	_, err = tx.Exec(c, `SELECT 1 FROM alkstore.compaction_heads WHERE stream = 'many' AND key = 'm00003' FOR UPDATE`)
	require.NoError(t, err)
	e.execSQL(t, steps[1]) // the walk: does not wait for m00003
	var held, others sql.NullInt64
	require.NoError(t, db.QueryRowContext(c, `SELECT
		(SELECT count(*) FROM alkstore.compaction_heads WHERE stream = 'many' AND key = 'm00003' AND schema_version IS NULL),
		(SELECT count(*) FROM alkstore.compaction_heads WHERE head_offset IS NULL AND schema_version = 0 AND compaction_rank = 0)`).
		Scan(&held, &others))
	assert.EqualValues(t, 1, held.Int64, "the held row is skipped")
	assert.EqualValues(t, 1500, others.Int64, "every other headless row has its zeros (1,499 of many's and kv's l)")
	require.NoError(t, tx.Rollback(c))
	e.execSQL(t, steps[2:]...)
	requireHeadsAt36(t, db)
	requireManyHeads(t, db, headRuleNotNull)
	// goose still records 00035: Open runs the whole of 00036 again.
	s = e.open(t)
	require.NoError(t, s.Close())
	requireHeadsAt36(t, db)
}
