package tests

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// applyVersions builds a database by applying exactly the given schema
// versions, in that order, as goose would have on main at some commit.
func applyVersions(t *testing.T, e *engineEnv, versions ...int64) {
	t.Helper()
	c := ctx(t)
	db := e.sqlDB(t)
	files, table, dialect := schema.Postgres, schema.PostgresVersionTable, goose.DialectPostgres
	if e.name == "lite" {
		files, table, dialect = schema.SQLite, schema.SQLiteVersionTable, goose.DialectSQLite3
	} else {
		bootstrap, err := schema.PostgresBootstrap()
		require.NoError(t, err)
		_, err = db.ExecContext(c, bootstrap)
		require.NoError(t, err)
	}
	fsys, err := files()
	require.NoError(t, err)
	p, err := goose.NewProvider(dialect, db, fsys, goose.WithTableName(table), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	for _, v := range versions {
		_, err := p.ApplyVersion(c, v, true)
		require.NoError(t, err, "version %d", v)
	}
	require.NoError(t, db.Close())
}

// schemaLayout is every table's columns (by name, not position: a late
// migration appends its columns elsewhere), index and constraint.
func schemaLayout(t *testing.T, e *engineEnv) []string {
	t.Helper()
	db := e.sqlDB(t)
	q := `SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
		FROM information_schema.columns WHERE table_schema = 'alkstore'
		UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'alkstore'
		UNION ALL SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = 'alkstore'::regnamespace
		ORDER BY 1`
	if e.name == "lite" {
		q = `SELECT 'column ' || m.name || '.' || c.name || ' ' || c.type || ' ' || c."notnull" || ' ' || COALESCE(c.dflt_value, '')
			FROM sqlite_master m, pragma_table_info(m.name) c WHERE m.type = 'table'
			UNION ALL SELECT 'index ' || sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL
			ORDER BY 1`
	}
	return queryStrings(t, db, q)
}

func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestOpenDatabasesMigratedAsMainLanded: 00010 reached main before 00007,
// 00009 and 00008, so a database opened by main in between records 10
// without them. Each such database opens with auto-migration, ends with
// the layout of a fresh one, and works; opened without auto-migration it is
// refused with ErrSchemaVersion naming the missing versions.
func TestOpenDatabasesMigratedAsMainLanded(t *testing.T) {
	emptyDatabases(t)
	landed := [][]int64{ // what main produced at 5ac31c7, c955cc4, bea05a6
		{1, 2, 3, 4, 5, 6, 10},
		{1, 2, 3, 4, 5, 6, 10, 7},
		{1, 2, 3, 4, 5, 6, 10, 7, 9},
	}
	eachEngine(t, func(t *testing.T, fresh *engineEnv) {
		fresh.open(t).Close()
		want := schemaLayout(t, fresh)
		for _, versions := range landed {
			t.Run(fmt.Sprint(versions[len(versions)-1]), func(t *testing.T) {
				e := newEnv(t, fresh.name)
				applyVersions(t, e, versions...)
				_, err := store.Open(ctx(t), e.dsn, store.WithoutMigrate())
				require.ErrorIs(t, err, store.ErrSchemaVersion)
				assert.Contains(t, err.Error(), "8", "names a missing version")
				s := e.open(t)
				exerciseStore(t, s, "landed")
				assert.Equal(t, want, schemaLayout(t, e))
			})
		}
	})
}

// TestOpenRefusesUnknownMissingVersion: a lower version missing that main
// never produced out of order (here 00005, below a recorded 00006) is not
// applied late: Open refuses with ErrSchemaVersion naming it.
func TestOpenRefusesUnknownMissingVersion(t *testing.T) {
	emptyDatabases(t)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		applyVersions(t, e, 1, 2, 3, 4, 6)
		_, err := store.Open(ctx(t), e.dsn)
		require.ErrorIs(t, err, store.ErrSchemaVersion)
		assert.Contains(t, err.Error(), "5")
	})
}
