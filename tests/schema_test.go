package tests

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// gooseCLI runs the pinned goose CLI, as a DBA would.
func gooseCLI(t *testing.T, args ...string) {
	t.Helper()
	bin := gooseBin(t) // built before the command's deadline starts
	cmd := exec.CommandContext(ctx(t), bin, args...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "goose %v: %s", args, out)
}

// execSQL runs statements on the env's database through database/sql,
// on one pool for t (execDB).
func (e *engineEnv) execSQL(t *testing.T, stmts ...string) {
	t.Helper()
	db := e.execDB(t)
	for _, s := range stmts {
		_, err := db.ExecContext(ctx(t), s)
		require.NoError(t, err, s)
	}
}

// execDB is the pool execSQL runs t's statements on, made at its first
// call in t on the env's current database, and closed when t ends (or
// when copyEnv copies the database). A pool for each call, open until the
// test ended, cost the server a session each: 3 a round in
// TestWorkerReportsTheAcksThatCommitted/pg (18 of its 40).
func (e *engineEnv) execDB(t *testing.T) *sql.DB {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	key := execKey{t, e.dsn}
	if db := e.execDBs[key]; db != nil {
		return db
	}
	db := e.sqlDB(t)
	if e.execDBs == nil {
		e.execDBs = map[execKey]*sql.DB{}
	}
	e.execDBs[key] = db
	t.Cleanup(func() { e.closeExecDB(key) }) // before sqlDB's, which is then a no-op
	return db
}

type execKey struct {
	t   *testing.T
	dsn string
}

// closeExecDB closes the execDB of key, if open; the zero key, every one.
func (e *engineEnv) closeExecDB(key execKey) {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	for k, db := range e.execDBs {
		if key == (execKey{}) || k == key {
			_ = db.Close()
			delete(e.execDBs, k)
		}
	}
}

func (e *engineEnv) sqlDB(t *testing.T) *sql.DB {
	t.Helper()
	driver, dsn := "pgx", e.dsn
	if e.name == "lite" {
		driver, dsn = "sqlite3", "file:"+e.dsn+"?_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	// database/sql keeps 2 idle connections and closes the others as they
	// come back: tests that query from 4 handlers at once opened a session
	// for most queries (36 in TestClaimNeverTakesMoreJobsThanFreeSlots/pg).
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPlainGooseHistoryIsNamed: the schema applied with goose's default
// version table (the command without -table) is refused on open with
// ErrSchemaVersion naming the table found and the flag to use, instead of
// "database is at version 0" or migrating it a second time ("relation
// already exists"); the README's remedy then makes the database open.
func TestPlainGooseHistoryIsNamed(t *testing.T) {
	emptyDatabases(t)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		gooseBin(t) // built before this test's deadline starts
		c := ctx(t)
		versionTable, defaultTable := schema.PostgresVersionTable, "public.goose_db_version"
		if e.name == "pg" {
			gooseCLI(t, "-dir", "../schema/pg", "postgres", e.dsn, "up")
		} else {
			versionTable, defaultTable = schema.SQLiteVersionTable, "goose_db_version"
			gooseCLI(t, "-dir", "../schema/lite", "sqlite3", e.dsn, "up")
		}

		for _, opts := range [][]store.Option{{store.WithoutMigrate()}, nil, {store.WithoutMigrate()}} {
			_, err := store.Open(c, e.dsn, opts...)
			require.ErrorIs(t, err, store.ErrSchemaVersion)
			assert.Contains(t, err.Error(), "goose's default version table "+defaultTable+" exists")
			assert.Contains(t, err.Error(), "-table "+versionTable+" ")
			assert.NotContains(t, err.Error(), "already exists")
		}

		// The README's remedy: goose creates alkstore's version table, and
		// the history moves into it.
		if e.name == "pg" {
			gooseCLI(t, "-table", versionTable, "-dir", "../schema/pg", "postgres", e.dsn, "version")
		} else {
			gooseCLI(t, "-table", versionTable, "-dir", "../schema/lite", "sqlite3", e.dsn, "version")
		}
		e.execSQL(t, "INSERT INTO "+versionTable+" (version_id, is_applied) "+
			"SELECT version_id, is_applied FROM goose_db_version WHERE version_id > 0 ORDER BY id")
		for _, opts := range [][]store.Option{{store.WithoutMigrate()}, nil} {
			s, err := store.Open(c, e.dsn, opts...)
			require.NoError(t, err)
			_, err = s.Stream("x").Publish(c, []byte("x"))
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}
	})
}

// TestLeastPrivilegeRoleOpensCurrentDatabase: a role with only the
// privileges the library's statements use (no CREATE on the database, DML on
// alkstore's tables, SELECT on its version table) opens a database an owner
// migrated, auto-migration on or off, and uses it. SQLite has no roles: a
// file's permissions are all or nothing, so only PostgreSQL can show it.
func TestLeastPrivilegeRoleOpensCurrentDatabase(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	e.open(t).Close() // the owner migrates

	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	dbName := strings.TrimPrefix(u.Path, "/")
	role := dbName + "_app"
	admin, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"REVOKE ALL ON DATABASE " + dbName + " FROM PUBLIC",
		"GRANT CONNECT ON DATABASE " + dbName + " TO " + role,
		"GRANT USAGE ON SCHEMA alkstore TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA alkstore TO " + role,
		"REVOKE INSERT, UPDATE, DELETE ON " + schema.PostgresVersionTable + " FROM " + role,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA alkstore TO " + role,
	} {
		_, err := admin.Exec(c, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_, _ = admin.Exec(bg, "DROP OWNED BY "+role)
		_, _ = admin.Exec(bg, "DROP ROLE "+role)
	})
	u.User = url.User(role)
	app := u.String()

	// The role really is least-privileged: it cannot create the schema.
	conn, err := pgx.Connect(c, app)
	require.NoError(t, err)
	_, err = conn.Exec(c, "CREATE SCHEMA IF NOT EXISTS alkstore")
	require.ErrorContains(t, err, "permission denied")
	require.NoError(t, conn.Close(c))

	for _, opts := range [][]store.Option{nil, {store.WithoutMigrate()}} {
		s, err := store.Open(c, app, opts...)
		require.NoError(t, err)
		exerciseStore(t, s, fmt.Sprint(len(opts)))
		require.NoError(t, s.Close())
	}
}

// TestSettledCandidateMigrationGrantsQuotedRoles: migration 00050 grants
// settled_candidate to the roles holding alkstore.events, whatever their
// names: one that must be quoted for a hyphen ("<db>-app") or upper case
// ("App<db>") gets SELECT and UPDATE, like a plain one, and one holding
// only SELECT gets only SELECT. 00050 quoted regrole's text, an identifier
// already quoted, a second time, and failed on such a role ("role
// ""x-app"" does not exist"), rolled back, and so did every auto-migrating
// Open after it (attack56b F2). The hyphenated role then opens the store
// and uses it. PostgreSQL only: SQLite's 00050 is a no-op.
func TestSettledCandidateMigrationGrantsQuotedRoles(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	e.open(t).Close()
	db := e.sqlDB(t)
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(c, 49)
	require.NoError(t, err)

	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	dbName := strings.TrimPrefix(u.Path, "/")
	hyphen, upper, reader := dbName+"-app", "App"+dbName, dbName+"_reader"
	q := func(role string) string { return pgx.Identifier{role}.Sanitize() }
	var stmts []string
	for _, role := range []string{hyphen, upper, reader} {
		stmts = append(stmts, "CREATE ROLE "+q(role)+" LOGIN", "GRANT USAGE ON SCHEMA alkstore TO "+q(role))
		t.Cleanup(func() {
			_, _ = db.ExecContext(context.Background(), "DROP OWNED BY "+q(role))
			_, _ = db.ExecContext(context.Background(), "DROP ROLE "+q(role))
		})
	}
	for _, role := range []string{hyphen, upper} {
		stmts = append(stmts,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA alkstore TO "+q(role),
			"GRANT USAGE ON ALL SEQUENCES IN SCHEMA alkstore TO "+q(role))
	}
	stmts = append(stmts, "GRANT SELECT ON alkstore.events TO "+q(reader))
	for _, stmt := range stmts {
		_, err := db.ExecContext(c, stmt)
		require.NoError(t, err, stmt)
	}

	_, err = p.UpTo(c, 50)
	require.NoError(t, err)
	for role, want := range map[string][2]bool{hyphen: {true, true}, upper: {true, true}, reader: {true, false}} {
		var sel, upd bool
		require.NoError(t, db.QueryRowContext(c, `SELECT
			has_table_privilege($1::text::regrole, 'alkstore.settled_candidate', 'SELECT'),
			has_table_privilege($1::text::regrole, 'alkstore.settled_candidate', 'UPDATE')`, q(role)).Scan(&sel, &upd))
		assert.Equal(t, want, [2]bool{sel, upd}, "%s: SELECT, UPDATE on settled_candidate", role)
	}

	e.open(t).Close() // the owner migrates to the latest
	u.User = url.User(hyphen)
	s, err := store.Open(c, u.String(), store.WithoutMigrate())
	require.NoError(t, err)
	exerciseStore(t, s, "quoted")
	require.NoError(t, s.Close())
}

// exerciseStore publishes, reads, saves an offset, writes a key, enqueues,
// claims and acks, and fires a schedule.
func exerciseStore(t *testing.T, s *store.Store, tag string) {
	t.Helper()
	c := ctx(t)
	st := s.Stream("ex-" + tag)
	hs := map[string]string{"tag": tag}
	off, err := st.PublishMessage(c, store.Message{Payload: []byte("a"), Headers: hs})
	require.NoError(t, err)
	evs, err := st.ReadSince(c, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{off}, offsets(evs))
	assert.Equal(t, hs, evs[0].Headers)
	require.NoError(t, st.SaveOffset(c, "c", off))
	_, err = st.PublishWithKey(c, "k", []byte("v"))
	require.NoError(t, err)
	h, err := st.Key("k").CompactionHead(c)
	require.NoError(t, err)
	assert.Equal(t, []byte("v"), h.Payload)

	q := s.Queue("ex-" + tag)
	_, err = q.Enqueue(c, []byte("job"), store.EnqueueOpts{Headers: hs})
	require.NoError(t, err)
	jobs, err := q.Claim(c, "w", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	assert.Equal(t, hs, jobs[0].Headers)
	require.NoError(t, jobs[0].Ack(c))

	require.NoError(t, s.Schedule("ex-"+tag).Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: "ex-" + tag}))
	_, err = s.Scheduler("w", store.SchedulerOpts{}).RunOnce(c)
	require.NoError(t, err)
}

// TestCommentsOnEveryTableAndColumn: a DBA reading \d+ learns what each of
// alkstore's tables and columns is for. PostgreSQL only: SQLite has no
// COMMENT ON (its 00004 is a no-op; the migration files are its notes).
func TestCommentsOnEveryTableAndColumn(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	e.open(t).Close()
	pool := e.pool(t)
	rows, err := pool.Query(c, `
		SELECT c.relname, COALESCE(a.attname, ''), d.description IS NOT NULL
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'alkstore'
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_description d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass
		     AND d.objsubid = COALESCE(a.attnum, 0)
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname <> 'goose_db_version' AND a.attnum IS NOT NULL
		UNION ALL
		SELECT c.relname, '', obj_description(c.oid, 'pg_class') IS NOT NULL
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'alkstore'
		WHERE c.relkind IN ('r', 'p', 'S') AND NOT c.relispartition AND c.relname NOT LIKE 'goose_db_version%'`)
	require.NoError(t, err)
	var missing []string
	seen := 0
	for rows.Next() {
		var rel, col string
		var ok bool
		require.NoError(t, rows.Scan(&rel, &col, &ok))
		seen++
		if !ok {
			missing = append(missing, strings.TrimSuffix(rel+"."+col, "."))
		}
	}
	require.NoError(t, rows.Err())
	assert.Greater(t, seen, 60)
	assert.Empty(t, missing, "objects without COMMENT ON")
}

// TestMigrateHoldingData: a database migrated to each earlier version, with
// rows written after each version as that version's library wrote them,
// opens with auto-migration and its data is intact and usable.
//
// One database climbs the versions, seeded after each, and each from-N
// subtest opens a copy of it as it stood at N: what building it again from
// an empty database made, without applying and seeding versions 1 to N
// once more for every N (half of the migrations this test ran). Where
// databases cannot be copied (ALK_PG_CREATEDB), each subtest builds its own.
func TestMigrateHoldingData(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the engines share nothing, as in eachEngine
			files := schema.Postgres
			if name == "lite" {
				files = schema.SQLite
			}
			fsys, err := files()
			require.NoError(t, err)
			versions := sourceVersions(t, fsys)
			chain := newEnv(t, name)
			copies := name == "lite" || chain.pg.CopiesDatabases()
			var want seeded
			for i, from := range versions[:len(versions)-1] {
				var at seeded // what the database holds at from
				if copies {
					climbSeeded(t, chain, fsys, versions[i:i+1], i == 0, &want)
					at = want.clone()
				}
				t.Run(fmt.Sprintf("from-%d", from), func(t *testing.T) {
					var e *engineEnv
					if copies {
						e = copyEnv(t, chain)
					} else {
						e = newEnv(t, name)
						climbSeeded(t, e, fsys, versions[:i+1], true, &at)
					}
					s := e.open(t) // auto-migrate to the latest
					checkSeeded(t, s, at)
					exerciseStore(t, s, "after")
				})
			}
		})
	}
}

// climbSeeded applies versions, in order, to e's database (empty when
// first: on PostgreSQL the bootstrap runs first), with goose as a DBA
// would, seeding after each; it closes its connections, so the database
// can be copied.
func climbSeeded(t *testing.T, e *engineEnv, fsys fs.FS, versions []int64, first bool, w *seeded) {
	t.Helper()
	c := ctx(t)
	table, dialect := schema.PostgresVersionTable, goose.DialectPostgres
	if e.name == "lite" {
		table, dialect = schema.SQLiteVersionTable, goose.DialectSQLite3
	}
	db := e.sqlDB(t)
	if first && e.name == "pg" {
		bootstrap, err := schema.PostgresBootstrap()
		require.NoError(t, err)
		_, err = db.ExecContext(c, bootstrap)
		require.NoError(t, err)
	}
	p, err := goose.NewProvider(dialect, db, fsys, goose.WithTableName(table), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	for _, v := range versions {
		_, err := p.UpTo(c, v)
		require.NoError(t, err)
		have, err := p.GetDBVersion(c)
		require.NoError(t, err)
		require.Equal(t, v, have)
		seed(t, e, db, v, w)
	}
	require.NoError(t, db.Close())
}

// copyEnv is a copy of e's database, whose connections are all closed.
func copyEnv(t *testing.T, e *engineEnv) *engineEnv {
	t.Helper()
	e.closeExecDB(execKey{}) // a copy's template has no session
	if e.name == "pg" {
		e.closePlan()
		dsn, err := e.pg.NewDatabaseFrom(ctx(t), e.dsn)
		require.NoError(t, err)
		return &engineEnv{name: e.name, dsn: dsn, pg: e.pg}
	}
	cp := &engineEnv{name: e.name, dsn: filepath.Join(t.TempDir(), "alk.db")}
	copySQLite(t, e.dsn, cp.dsn)
	return cp
}

func sourceVersions(t *testing.T, fsys fs.FS) []int64 {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectSQLite3, &sql.DB{}, fsys, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	var vs []int64
	for _, s := range p.ListSources() {
		vs = append(vs, s.Version)
	}
	require.GreaterOrEqual(t, len(vs), 4)
	return vs
}

// seeded is what seed wrote, for checkSeeded.
type seeded struct {
	events    [][]byte          // stream "data", in offset order
	heads     map[string]string // key of stream "kv" -> payload; "" for no value
	jobs      []string          // pending jobs of queue "jobs"
	dead      int               // dead jobs of queue "jobs"
	schedules []string          // schedules, each due
	offset    int               // index in events of consumer "c"'s saved offset
	group     bool              // stream "data" has group "g", its partition 0 committed through its first event
}

// clone is a copy of w that later seeds do not change.
func (w seeded) clone() seeded {
	c := w
	c.events = slices.Clone(w.events)
	c.heads = maps.Clone(w.heads)
	c.jobs = slices.Clone(w.jobs)
	c.schedules = slices.Clone(w.schedules)
	return c
}

// seed writes rows into the tables version v has, as the library of that
// version wrote them. Each version's statements are frozen with it: a later
// schema change adds a case here, never edits one.
func seed(t *testing.T, e *engineEnv, db *sql.DB, v int64, w *seeded) {
	t.Helper()
	c := ctx(t)
	if w.heads == nil {
		w.heads = map[string]string{}
	}
	exec := func(q string, args ...any) int64 {
		t.Helper()
		var id int64
		if strings.Contains(q, "RETURNING") {
			require.NoError(t, db.QueryRowContext(c, q, args...).Scan(&id), q)
		} else {
			_, err := db.ExecContext(c, q, args...)
			require.NoError(t, err, q)
		}
		return id
	}
	now := time.Now()
	tag := fmt.Sprint(v)
	pg := e.name == "pg"
	finishedAt := "died_at" // 00006 renamed it
	if v >= 6 {
		finishedAt = "finished_at"
	}

	// Every version has events, keyed heads, offsets and jobs.
	event := func(stream string, key *string, payload []byte) int64 {
		if pg {
			return exec(`INSERT INTO alkstore.events (id, stream, key, payload, txid)
				VALUES (nextval('alkstore.event_offset_seq'), $1, $2, $3, pg_current_xact_id()) RETURNING id`, stream, key, payload)
		}
		return exec(`INSERT INTO alk_events (stream, key, payload) VALUES (?, ?, ?) RETURNING id`, stream, key, payload)
	}
	head := func(key string, off int64) {
		if pg {
			exec(`INSERT INTO alkstore.compaction_heads (stream, key, head_offset, schema_version, compaction_rank)
				VALUES ('kv', $1, $2, 0, 0)
				ON CONFLICT (stream, key) DO UPDATE SET head_offset = excluded.head_offset, updated_at = now()`, key, off)
			return
		}
		exec(`INSERT INTO alk_compaction_heads (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at)
			VALUES ('kv', ?, ?, 0, 0, ?, ?)
			ON CONFLICT (stream, key) DO UPDATE SET head_offset = excluded.head_offset, updated_at = excluded.updated_at`,
			key, off, now.UnixMicro(), now.UnixMicro())
	}
	for i := range 2 {
		p := []byte(fmt.Sprintf("v%s-e%d", tag, i))
		event("data", nil, p)
		w.events = append(w.events, p)
	}
	key := "k" + tag
	head(key, event("kv", &key, []byte("old-"+key)))
	head(key, event("kv", &key, []byte("new-"+key)))
	w.heads[key] = "new-" + key
	// Before 00003, trims deleted head events and left their heads behind
	// (00003 makes such heads headless).
	if v < 3 {
		gone := "gone" + tag
		off := event("kv", &gone, []byte("x"))
		head(gone, off)
		if pg {
			exec(`DELETE FROM alkstore.events WHERE id = $1`, off)
		} else {
			exec(`DELETE FROM alk_events WHERE id = ?`, off)
		}
		w.heads[gone] = ""
	}
	// A lock's headless row, as the library wrote it: from 00031 with
	// headless_at; from 00036 on PostgreSQL with schema_version and
	// compaction_rank 0. (Headless rows of every version before come from
	// the trims above, which 00003 unheads.)
	if v >= 31 {
		lock := "lock" + tag
		switch {
		case pg && v >= 36:
			exec(`INSERT INTO alkstore.compaction_heads (stream, key, schema_version, compaction_rank, created_at, updated_at, headless_at)
				VALUES ('kv', $1, 0, 0, now(), now(), now())`, lock)
		case pg:
			exec(`INSERT INTO alkstore.compaction_heads (stream, key, created_at, updated_at, headless_at)
				VALUES ('kv', $1, now(), now(), now())`, lock)
		default:
			exec(`INSERT INTO alk_compaction_heads (stream, key, created_at, updated_at) VALUES ('kv', ?, ?, ?)`,
				lock, now.UnixMicro(), now.UnixMicro())
		}
		w.heads[lock] = ""
	}
	if pg {
		exec(`INSERT INTO alkstore.consumer_offsets (stream, consumer, committed_offset)
			SELECT 'data', 'c', max(id) FROM alkstore.events WHERE stream = 'data'
			ON CONFLICT (stream, consumer) DO UPDATE SET committed_offset = excluded.committed_offset`)
		exec(`INSERT INTO alkstore.streams (name, compacted) VALUES ('kv', true) ON CONFLICT DO NOTHING`)
		exec(`INSERT INTO alkstore.jobs (queue, payload, max_attempts, run_at) VALUES ('jobs', $1, 3, now() - interval '1 second')`, []byte("job"+tag))
		exec(`INSERT INTO alkstore.jobs (queue, payload, max_attempts, run_at, state, attempts, `+finishedAt+`, last_error)
			VALUES ('jobs', $1, 1, now(), 'dead', 1, now(), 'boom')`, []byte("dead"+tag))
	} else {
		exec(`INSERT INTO alk_consumer_offsets (stream, consumer, committed_offset)
			SELECT 'data', 'c', max(id) FROM alk_events WHERE stream = 'data'
			ON CONFLICT (stream, consumer) DO UPDATE SET committed_offset = excluded.committed_offset`)
		exec(`INSERT INTO alk_streams (name, compacted) VALUES ('kv', 1) ON CONFLICT DO NOTHING`)
		exec(`INSERT INTO alk_jobs (queue, payload, max_attempts, created_at, run_at) VALUES ('jobs', ?, 3, ?, ?)`,
			[]byte("job"+tag), now.UnixMicro(), now.Add(-time.Second).UnixMicro())
		exec(`INSERT INTO alk_jobs (queue, payload, max_attempts, created_at, run_at, state, attempts, `+finishedAt+`, last_error)
			VALUES ('jobs', ?, 1, ?, ?, 'dead', 1, ?, 'boom')`, []byte("dead"+tag), now.UnixMicro(), now.UnixMicro(), now.UnixMicro())
	}
	w.offset = len(w.events) - 1
	w.jobs = append(w.jobs, "job"+tag)
	w.dead++

	// 00002 added schedules and leases.
	if v >= 2 {
		name := "sched" + tag
		if pg {
			exec(`INSERT INTO alkstore.schedules (name, spec, tz, queue, payload, priority, max_attempts, next_fire_at, created_at, updated_at)
				VALUES ($1, '@every 3600s', 'UTC', 'fired', $2, 0, 3, now() - interval '1 second', now(), now())`, name, []byte(name))
		} else {
			exec(`INSERT INTO alk_schedules (name, spec, tz, queue, payload, priority, max_attempts, next_fire_at, created_at, updated_at)
				VALUES (?, '@every 3600s', 'UTC', 'fired', ?, 0, 3, ?, ?, ?)`,
				name, []byte(name), now.Add(-time.Second).UnixMicro(), now.UnixMicro(), now.UnixMicro())
		}
		w.schedules = append(w.schedules, name)
	}

	// 00018 added consumer groups: "data"'s group "g" of 2 partitions,
	// the first event's (unkeyed: store.GroupPartition, computed here)
	// committed through it, the other held by a member whose lease ran out.
	if v >= 18 && !w.group {
		var first int64
		events := "alk_events"
		if pg {
			events = "alkstore.events"
		}
		require.NoError(t, db.QueryRowContext(c, `SELECT min(id) FROM `+events+` WHERE stream = 'data'`).Scan(&first))
		part := store.GroupPartition(store.Event{Offset: first}, 2)
		if pg {
			exec(`INSERT INTO alkstore.consumer_groups (stream, grp, partitions, created_at) VALUES ('data', 'g', 2, now())`)
			exec(`INSERT INTO alkstore.group_partitions (stream, grp, part, committed_offset, updated_at)
				VALUES ('data', 'g', $1, $2, now())`, part, first)
			exec(`INSERT INTO alkstore.group_partitions (stream, grp, part, owner, token, lease_expires_at, updated_at)
				VALUES ('data', 'g', $1, 'gone', 3, now() - interval '1 minute', now())`, 1-part)
			exec(`INSERT INTO alkstore.group_members (stream, grp, member, joined_at, expires_at)
				VALUES ('data', 'g', 'gone', now() - interval '1 hour', now() - interval '1 minute')`)
		} else {
			exec(`INSERT INTO alk_consumer_groups (stream, grp, partitions, created_at) VALUES ('data', 'g', 2, ?)`, now.UnixMicro())
			exec(`INSERT INTO alk_group_partitions (stream, grp, part, committed_offset, updated_at)
				VALUES ('data', 'g', ?, ?, ?)`, part, first, now.UnixMicro())
			exec(`INSERT INTO alk_group_partitions (stream, grp, part, owner, token, lease_expires_at, updated_at)
				VALUES ('data', 'g', ?, 'gone', 3, ?, ?)`, 1-part,
				now.Add(-time.Minute).UnixMicro(), now.UnixMicro())
			exec(`INSERT INTO alk_group_members (stream, grp, member, joined_at, expires_at)
				VALUES ('data', 'g', 'gone', ?, ?)`, now.Add(-time.Hour).UnixMicro(), now.Add(-time.Minute).UnixMicro())
		}
		w.group = true
	}
}

// checkSeeded reads back what seed wrote through the library, and uses it.
func checkSeeded(t *testing.T, s *store.Store, w seeded) {
	t.Helper()
	c := ctx(t)
	evs, err := s.Stream("data").ReadSince(c, 0, 100)
	require.NoError(t, err)
	require.Len(t, evs, len(w.events))
	for i, ev := range evs {
		assert.Equal(t, w.events[i], ev.Payload)
		assert.Nil(t, ev.Headers, "an event written before headers existed has none")
	}
	got, err := s.Stream("data").Offset(c, "c")
	require.NoError(t, err)
	assert.Equal(t, evs[w.offset].Offset, got)
	next, err := s.Stream("data").Publish(c, []byte("after"))
	require.NoError(t, err)
	assert.Greater(t, next, evs[len(evs)-1].Offset, "offsets continue after the migrated ones")

	kv := s.Stream("kv")
	for key, want := range w.heads {
		h, err := kv.Key(key).CompactionHead(c)
		if want == "" {
			require.ErrorIs(t, err, store.ErrNotFound, key)
			// A headless row locks as headless and takes a head.
			require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
				h, err := kv.Key(key).LockCompactionHeadTx(c, tx)
				assert.Nil(t, h, key)
				if err != nil {
					return err
				}
				_, err = kv.PublishWithKeyTx(c, tx, key, []byte("revived-"+key))
				return err
			}), key)
			h, err = kv.Key(key).CompactionHead(c)
			require.NoError(t, err, key)
			assert.Equal(t, "revived-"+key, string(h.Payload), key)
			continue
		}
		require.NoError(t, err, key)
		assert.Equal(t, want, string(h.Payload), key)
	}
	_, err = kv.PublishWithKey(c, "k1", []byte("newest"))
	require.NoError(t, err)
	h, err := kv.Key("k1").CompactionHead(c)
	require.NoError(t, err)
	assert.Equal(t, "newest", string(h.Payload))

	q := s.Queue("jobs")
	stats, err := q.Stats(c)
	require.NoError(t, err)
	assert.EqualValues(t, w.dead, stats.Dead)
	jobs, err := q.Claim(c, "w", 100, time.Minute)
	require.NoError(t, err)
	var payloads []string
	for _, j := range jobs {
		payloads = append(payloads, string(j.Payload))
		assert.Nil(t, j.Headers, "a job written before headers existed has none")
		require.NoError(t, j.Ack(c))
	}
	assert.ElementsMatch(t, w.jobs, payloads)

	list, err := s.Schedules(c)
	require.NoError(t, err)
	var names []string
	for _, sc := range list {
		names = append(names, sc.Name)
		assert.Nil(t, sc.Headers, "a schedule written before headers existed has none")
	}
	assert.ElementsMatch(t, w.schedules, names)
	fired, err := s.Scheduler("w", store.SchedulerOpts{}).RunOnce(c)
	require.NoError(t, err)
	assert.Equal(t, len(w.schedules), fired)
	jobs, err = s.Queue("fired").Claim(c, "w", 100, time.Minute)
	require.NoError(t, err)
	assert.Len(t, jobs, len(w.schedules))

	if w.group {
		g := s.Stream("data").Group("g")
		gs, err := g.Stats(c)
		require.NoError(t, err)
		require.Equal(t, 2, gs.Partitions)
		assert.Empty(t, gs.Members, "the seeded member's lease ran out")
		assert.Equal(t, evs[0].Offset, gs.Assignment[store.GroupPartition(evs[0], 2)].Committed)
		m, err := g.Join(c, store.GroupOpts{})
		require.NoError(t, err)
		defer m.Close()
		// The first event's partition resumes after its committed offset;
		// the other, whose owner is gone, from the start.
		var got []int64
		for range len(evs) {
			ev, err := m.Recv(c)
			require.NoError(t, err)
			got = append(got, ev.Offset)
		}
		assert.NotContains(t, got, evs[0].Offset)
		assert.Equal(t, []int{0, 1}, m.Partitions())
	}
}
