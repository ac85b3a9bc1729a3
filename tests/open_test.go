package tests

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

func TestOpenForms(t *testing.T) {
	parallelTest(t)
	c := ctx(t)
	dir := t.TempDir()
	for _, dsn := range []string{
		filepath.Join(dir, "plain.db"),
		"sqlite:" + filepath.Join(dir, "prefixed.db"),
		"file:" + filepath.Join(dir, "uri.db") + "?cache=private",
		filepath.Join(dir, "with space.db"),
	} {
		s, err := store.Open(c, dsn)
		require.NoError(t, err, dsn)
		assert.Equal(t, "lite", s.Engine())
		_, err = s.Stream("x").Publish(c, []byte("x"))
		require.NoError(t, err, dsn)
		require.NoError(t, s.Close())
	}

	pgDSN := newEnv(t, "pg").dsn
	for _, dsn := range []string{pgDSN, "postgresql://" + strings.TrimPrefix(pgDSN, "postgres://")} {
		s, err := store.Open(c, dsn)
		require.NoError(t, err, dsn)
		assert.Equal(t, "pg", s.Engine())
		_, err = s.Stream("x").Publish(c, []byte("x"))
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}

	for _, dsn := range []string{"", "mysql://u@h/db", "host=localhost dbname", ":memory:"} {
		_, err := store.Open(c, dsn)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%q", dsn)
	}
}

// TestOpenRefusesEveryInMemoryForm: an SQLite database each connection
// has to itself (in memory, or temporary: an empty name) is refused with
// ErrInvalidArgument before any I/O (a cancelled context does not get to
// say so), read from the URI as SQLite reads it. Before session 60 only
// ":memory:" and a "mode=memory" substring were: "file::memory:" and
// "file::memory:?cache=shared" opened, took writes through the writer and
// failed every read ("no such table": attack60 F1), while a real file
// named "mode=memory.db" was refused. Files whose names merely contain
// "memory" open and read back what was written.
func TestOpenRefusesEveryInMemoryForm(t *testing.T) {
	parallelTest(t)
	dir := t.TempDir()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, dsn := range []string{
		":memory:", "sqlite::memory:", "sqlite:",
		"file::memory:", "file::memory:?cache=shared", "sqlite:file::memory:?cache=shared",
		"file:%3Amemory%3A", "file::memory:%00.db", "file://localhost", "file:?cache=shared", "file:",
		"file:" + filepath.Join(dir, "a.db") + "?mode=memory", "file:" + filepath.Join(dir, "b.db") + "?cache=shared&mode=memory",
		"file:" + filepath.Join(dir, "c.db") + "?mode=%6Demory", "file:" + filepath.Join(dir, "d.db") + "?mode=rwc&mode=memory",
	} {
		_, err := store.Open(cancelled, dsn)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%q", dsn)
		require.ErrorContains(t, err, "SQLite needs a file", "%q", dsn)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused DSN created nothing")

	c := ctx(t)
	for _, dsn := range []string{
		filepath.Join(dir, "memory.db"),
		filepath.Join(dir, "mode=memory.db"),
		"sqlite:" + filepath.Join(dir, ":memory:"),
		"file:" + filepath.Join(dir, "mode=memory-uri.db"),
		"file:" + filepath.Join(dir, "in-memory.db") + "?mode=rwc",
		"sqlite:file:" + filepath.Join(dir, "memory-shared.db") + "?cache=shared",
		"file:" + filepath.Join(dir, "p.db") + "?memory=mode",
	} {
		s, err := store.Open(c, dsn)
		require.NoError(t, err, dsn)
		q := s.Queue("q")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err, dsn)
		j, err := q.Job(c, id)
		require.NoError(t, err, "%s: read back", dsn)
		assert.Equal(t, []byte("x"), j.Payload, dsn)
		require.NoError(t, s.Close())
	}
}

// TestOpenFileURIWithAFragmentKeepsTheStoresSettings: SQLite ignores a
// "file:" URI's fragment, and the store appended its own parameters (WAL,
// the busy timeout) after it, where they were ignored too: the database
// opened in rollback-journal mode, whose readers block the writer.
func TestOpenFileURIWithAFragmentKeepsTheStoresSettings(t *testing.T) {
	parallelTest(t)
	dir := t.TempDir()
	c := ctx(t)
	for _, name := range []string{"a.db?cache=private#frag", "b.db#frag"} {
		s, err := store.Open(c, "file:"+filepath.Join(dir, name))
		require.NoError(t, err, name)
		_, err = s.Queue("q").Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err, name)
		file, _, _ := strings.Cut(name, "?")
		file, _, _ = strings.Cut(file, "#")
		_, err = os.Stat(filepath.Join(dir, file+"-wal"))
		assert.NoError(t, err, "%s: opened in WAL mode", name)
		require.NoError(t, s.Close())
	}
}

func TestOpenPoolLeavesThePoolOpen(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	pool := e.pool(t)
	s, err := store.OpenPool(c, pool)
	require.NoError(t, err)
	_, err = s.Stream("x").Publish(c, []byte("x"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, pool.Ping(c), "Close must leave the application's pool open")
	var n int
	require.NoError(t, pool.QueryRow(c, "SELECT count(*) FROM alkstore.events").Scan(&n))
	assert.Equal(t, 1, n)
}

func TestPasswordNeverLeaks(t *testing.T) {
	c := ctx(t)
	const pw = "s3cr3t-Pa55word"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, dsn := range []string{
		"postgres://alice:" + pw + "@/nodb?host=/nonexistent-alkstore-socket-dir&connect_timeout=1",
		"postgres://alice:" + pw + "@localhost:notaport/db",
		"postgresql://alice:" + pw + "@127.0.0.1:1/db?connect_timeout=1",
	} {
		_, err := store.Open(c, dsn, store.WithLogger(logger))
		require.Error(t, err)
		assert.NotContains(t, err.Error(), pw)
		assert.Contains(t, err.Error(), "alkstore: open")
	}
	assert.NotContains(t, logs.String(), pw)
}

func TestSchemaVersionWithoutMigrate(t *testing.T) {
	emptyDatabases(t)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		_, err := store.Open(c, e.dsn, store.WithoutMigrate())
		require.ErrorIs(t, err, store.ErrSchemaVersion, "an empty database is behind")

		e.open(t).Close() // auto-migrate
		s, err := store.Open(c, e.dsn, store.WithoutMigrate())
		require.NoError(t, err, "a migrated database passes the check")
		require.NoError(t, s.Close())
	})
}

// TestSchemaVersionErrorSaysWhichSideIsBehind: WithoutMigrate's refusal
// of a schema at another version says whether the database is newer (a
// newer alkstore migrated it: upgrade this one) or older (apply the
// migrations), and still matches ErrSchemaVersion. It said "database is at
// version 51, this library needs 50" for both, and an operator told the
// schema mismatched migrated a database that was already ahead.
func TestSchemaVersionErrorSaysWhichSideIsBehind(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		e.open(t).Close() // auto-migrate
		table := schema.SQLiteVersionTable
		if e.name == "pg" {
			table = schema.PostgresVersionTable
		}
		var want int64
		require.NoError(t, e.execDB(t).QueryRowContext(c, "SELECT max(version_id) FROM "+table).Scan(&want))

		e.execSQL(t, fmt.Sprintf("INSERT INTO %s (version_id, is_applied) VALUES (%d, true)", table, want+1))
		_, err := store.Open(c, e.dsn, store.WithoutMigrate())
		require.ErrorIs(t, err, store.ErrSchemaVersion)
		assert.Contains(t, err.Error(), fmt.Sprintf("the database is at version %d, newer than this library (%d)", want+1, want))
		assert.Contains(t, err.Error(), "upgrade alkstore")
		assert.NotContains(t, err.Error(), "apply")
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err, "an auto-migrating Open accepts a newer schema")
		require.NoError(t, s.Close())

		e.execSQL(t, fmt.Sprintf("DELETE FROM %s WHERE version_id >= %d", table, want))
		var have int64
		require.NoError(t, e.execDB(t).QueryRowContext(c, "SELECT max(version_id) FROM "+table).Scan(&have))
		_, err = store.Open(c, e.dsn, store.WithoutMigrate())
		require.ErrorIs(t, err, store.ErrSchemaVersion)
		assert.Contains(t, err.Error(), fmt.Sprintf("the database is at version %d, older than this library (%d)", have, want))
		assert.Contains(t, err.Error(), "apply the migrations with goose -table "+table)
		assert.NotContains(t, err.Error(), "upgrade")
	})
}

// TestGooseCLIAppliesSchema: a DBA applies schema/ with the stock goose CLI,
// and the library then opens the database without migrating.
func TestGooseCLIAppliesSchema(t *testing.T) {
	emptyDatabases(t)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		bin := gooseBin(t) // built before this test's deadline starts
		c := ctx(t)
		var args []string
		switch e.name {
		case "pg":
			// The DBA's first step: psql -f schema/pg/bootstrap/00000_schema.sql
			bootstrap, err := schema.PostgresBootstrap()
			require.NoError(t, err)
			conn, err := pgx.Connect(c, e.dsn)
			require.NoError(t, err)
			_, err = conn.Exec(c, bootstrap)
			require.NoError(t, err)
			require.NoError(t, conn.Close(c))
			args = []string{"-table", schema.PostgresVersionTable, "-dir", "../schema/pg", "postgres", e.dsn, "up"}
		case "lite":
			args = []string{"-table", schema.SQLiteVersionTable, "-dir", "../schema/lite", "sqlite3", e.dsn, "up"}
		}
		cmd := exec.CommandContext(c, bin, args...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "goose: %s", out)

		s, err := store.Open(c, e.dsn, store.WithoutMigrate())
		require.NoError(t, err)
		_, err = s.Stream("x").Publish(c, []byte("x"))
		require.NoError(t, err)
		require.NoError(t, s.Close())
	})
}

func TestClosedStoreFailsEveryCall(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("events")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(c))
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "Close is idempotent")

		calls := map[string]func() error{
			"publish":            func() error { _, err := st.Publish(c, nil); return err },
			"publish with key":   func() error { _, err := st.PublishWithKey(c, "k", nil); return err },
			"publish many":       func() error { _, err := st.PublishMany(c, []store.Message{{}}); return err },
			"read since":         func() error { _, err := st.ReadSince(c, 0, 10); return err },
			"read since limit 0": func() error { _, err := st.ReadSince(c, 0, 0); return err },
			"read from consumer": func() error { _, err := st.ReadFromConsumer(c, "c", 10); return err },
			"save offset":        func() error { return st.SaveOffset(c, "c", 1) },
			"get offset":         func() error { _, err := st.Offset(c, "c"); return err },
			"trim":               func() error { _, err := st.TrimTo(c, 1); return err },
			"begin":              func() error { _, err := s.Begin(c); return err },
			"in tx":              func() error { return s.InTx(c, func(context.Context, store.Tx) error { return nil }) },
		}
		for name, call := range calls {
			require.ErrorIs(t, call(), store.ErrClosed, name)
		}
	})
}

// TestNotFoundSaysNothingOfTheDriver: a job or schedule that does not exist
// is ErrNotFound with the operation and the name, and nothing of the
// driver's "no rows" text (it stays reachable with errors.Is).
func TestNotFoundSaysNothingOfTheDriver(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		_, err := s.Job(c, 999)
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, "alkstore: job: job 999: not found", err.Error())
		assert.ErrorIs(t, err, sql.ErrNoRows)
		_, err = s.Schedule("nosuch").Info(c)
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, `alkstore: schedule info "nosuch": not found`, err.Error())
		err = s.Schedule("nosuch").Resume(c)
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, `alkstore: resume schedule "nosuch": not found`, err.Error())
		_, err = s.Schedule("nosuch").Trigger(c)
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, `alkstore: trigger schedule "nosuch": not found`, err.Error())
	})
}
