package tests

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

const dedupMigration = "00034_id_keyed_indexes_without_dedup.sql"

// jobIndexOptions returns the storage parameters of each index of the jobs
// table that has any, and whether each index's key ends with the job's id
// (and is not unique), by index name.
func jobIndexOptions(t *testing.T, db *sql.DB) (options map[string]string, idKeyed map[string]bool) {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), `SELECT c.relname, COALESCE(a.attname = 'id' AND NOT i.indisunique, false),
			COALESCE(array_to_string(c.reloptions, ','), '')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[i.indnkeyatts - 1]
		WHERE i.indrelid = 'alkstore.jobs'::regclass`)
	require.NoError(t, err)
	defer rows.Close()
	options, idKeyed = map[string]string{}, map[string]bool{}
	for rows.Next() {
		var name, opts string
		var keyed bool
		require.NoError(t, rows.Scan(&name, &keyed, &opts))
		if opts != "" {
			options[name] = opts
		}
		if keyed {
			idKeyed[name] = true
		}
	}
	require.NoError(t, rows.Err())
	return options, idKeyed
}

// migrationPart is the statement between the StatementBegin and
// StatementEnd that follow a migration's "-- +goose Up" or "-- +goose Down".
func migrationPart(t *testing.T, fsys fs.FS, file, direction string) string {
	t.Helper()
	b, err := fs.ReadFile(fsys, file)
	require.NoError(t, err)
	_, part, ok := strings.Cut(string(b), "-- +goose "+direction+"\n")
	require.True(t, ok)
	_, part, ok = strings.Cut(part, "-- +goose StatementBegin")
	require.True(t, ok)
	part, _, ok = strings.Cut(part, "-- +goose StatementEnd")
	require.True(t, ok)
	return part
}

// TestIDKeyedJobIndexesMigrateBothWays: schema 00034 down and up again on a
// database holding jobs in every state. Up, exactly the job indexes whose
// keys end with the job's id (and are not unique) have deduplicate_items
// off: jobs_ready and jobs_listing, and any such index a later version
// adds must say what it does (this fails until it does); every other job
// index keeps the default. Down, no job index has a setting. Each way's
// statement run a second time changes nothing, and the store enqueues
// afterwards. PostgreSQL only: SQLite's 00034 is a no-op.
func TestIDKeyedJobIndexesMigrateBothWays(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	p, db, fsys, id := jobsInEveryState(t, e)
	up := func() {
		t.Helper()
		options, idKeyed := jobIndexOptions(t, db)
		assert.Equal(t, map[string]bool{"jobs_ready": true, "jobs_listing": true}, idKeyed)
		want := map[string]string{}
		for name := range idKeyed {
			want[name] = "deduplicate_items=off"
		}
		assert.Equal(t, want, options)
	}
	down := func() {
		t.Helper()
		options, _ := jobIndexOptions(t, db)
		assert.Empty(t, options)
	}
	up()

	_, err := p.DownTo(c, 33)
	require.NoError(t, err)
	down()
	e.execSQL(t, migrationPart(t, fsys, dedupMigration, "Down"))
	down()

	_, err = p.Up(c)
	require.NoError(t, err)
	up()
	e.execSQL(t, migrationPart(t, fsys, dedupMigration, "Up"))
	up()

	s := e.open(t)
	n, err := s.Queue("q").Enqueue(c, []byte("y"), store.EnqueueOpts{})
	require.NoError(t, err)
	assert.Greater(t, n, id)
}

// TestIDKeyedIndexMigrationHoldsUpNoJobWrite: while schema 00034's ALTER
// INDEX waits for its lock (another session's DDL on jobs_ready holds it
// open), the application's enqueues, claims and acks of a store opened
// before go on: none of them waits behind the migration (each would show
// the migration among what blocks it). The migration sets a lock timeout
// of at most 10 s in the statement that waits, before its ALTER INDEX, and
// once the holder ends, an Open migrates (after giving up at its lock
// timeout if the holder outlasted it, which a loaded machine may make
// happen). PostgreSQL only.
func TestIDKeyedIndexMigrationHoldsUpNoJobWrite(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s := e.open(t) // the application's store, opened before the migration
	q := s.Queue("q")
	_, err := q.EnqueueMany(c, make([]store.NewJob, 10))
	require.NoError(t, err)
	db := e.sqlDB(t)
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(c, 33)
	require.NoError(t, err)

	// Another session's DDL on jobs_ready, left open: it holds the lock the
	// migration's ALTER INDEX needs (SHARE UPDATE EXCLUSIVE on the index).
	holder, err := e.pool(t).Begin(c)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.Background()) }()
	_, err = holder.Exec(c, `ALTER INDEX alkstore.jobs_ready SET (fillfactor = 90)`)
	require.NoError(t, err)

	opened := make(chan error, 1)
	go func() {
		m, err := store.Open(c, e.dsn)
		if err == nil {
			err = m.Close()
		}
		opened <- err
	}()
	admin := e.pool(t)
	var migrator int
	var query string
	require.Eventually(t, func() bool {
		err := admin.QueryRow(c, `SELECT pid, query FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%deduplicate_items%'`).Scan(&migrator, &query)
		return err == nil
	}, time.Minute, time.Millisecond, "the migration waits for the holder")
	m := regexp.MustCompile(`set_config\('lock_timeout', '(\d+)s', true\)`).FindStringSubmatchIndex(query)
	require.NotNil(t, m, "the waiting statement sets a lock timeout: %s", query)
	assert.Less(t, m[0], strings.Index(query, "ALTER INDEX"), "the lock timeout comes before the ALTER INDEX")
	secs, err := strconv.Atoi(query[m[2]:m[3]])
	require.NoError(t, err)
	assert.LessOrEqual(t, secs, 10, "at most 10 s")

	// The application writes jobs while the migration waits; a write that
	// queued behind it would name it among the pids blocking it.
	wrote := make(chan error, 1)
	go func() {
		wrote <- func() error {
			if _, err := q.EnqueueMany(c, make([]store.NewJob, 3)); err != nil {
				return err
			}
			if _, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{}); err != nil {
				return err
			}
			jobs, err := q.Claim(c, "w", 5, time.Minute)
			if err != nil {
				return err
			}
			if len(jobs) != 5 {
				return errors.New("claimed fewer than 5 jobs")
			}
			_, err = q.AckMany(c, jobs)
			return err
		}()
	}()
	for done := false; !done; {
		select {
		case err := <-wrote:
			require.NoError(t, err)
			done = true
		default:
			var behind bool
			require.NoError(t, admin.QueryRow(c, `SELECT EXISTS (SELECT FROM pg_stat_activity
				WHERE $1 = ANY (pg_blocking_pids(pid)))`, migrator).Scan(&behind))
			require.False(t, behind, "a job write waits behind the migration")
			time.Sleep(time.Millisecond)
		}
	}

	require.NoError(t, holder.Rollback(c))
	if err := <-opened; err != nil { // gave up at its lock timeout (a slow machine)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55P03", pgErr.Code, "%v", err)
		m, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		require.NoError(t, m.Close())
	}
	options, _ := jobIndexOptions(t, db)
	assert.Equal(t, map[string]string{"jobs_ready": "deduplicate_items=off", "jobs_listing": "deduplicate_items=off"}, options)
}
