package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSerialIDsDiffer pins the README's engine-differences row on BIGSERIAL:
// Postgres fills a bigserial column; SQLite accepts the type name but
// assigns ids only to a column declared INTEGER PRIMARY KEY, so INSERT ...
// RETURNING id gives NULL there (scanning it into an int64 fails).
func TestSerialIDsDiffer(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)
		_, err = tx.Exec(c, "CREATE TABLE app_serial (id BIGSERIAL PRIMARY KEY, name text NOT NULL)")
		require.NoError(t, err)
		var id *int64
		require.NoError(t, tx.QueryRow(c, "INSERT INTO app_serial (name) VALUES ($1) RETURNING id", "a").Scan(&id))
		if e.name == "pg" {
			require.NotNil(t, id)
			assert.Positive(t, *id)
			return
		}
		assert.Nil(t, id, "SQLite: BIGSERIAL is not an id column")
		var n int64
		assert.Error(t, tx.QueryRow(c, "INSERT INTO app_serial (name) VALUES ($1) RETURNING id", "b").Scan(&n), "NULL into an int64")

		_, err = tx.Exec(c, "CREATE TABLE app_rowid (id INTEGER PRIMARY KEY, name text NOT NULL)")
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(c, "INSERT INTO app_rowid (name) VALUES ($1) RETURNING id", "a").Scan(&n))
		assert.Positive(t, n, "INTEGER PRIMARY KEY is SQLite's id column")
	})
}
