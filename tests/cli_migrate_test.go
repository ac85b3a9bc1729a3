package tests

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIMigrateStatusFailsOnADatabaseItCannotOpen: migrate status on a
// database it cannot read (PostgreSQL: one that does not exist; SQLite: a
// directory) exits 1 with the error, the DSN's password not in it, and
// reports no migration pending: it never read the database.
func TestCLIMigrateStatusFailsOnADatabaseItCannotOpen(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cliBin(t)
		const pw = "Mq4zStatusPw"
		dsn := t.TempDir() // a directory is no SQLite database
		if e.name == "pg" {
			u, err := url.Parse(e.dsn)
			require.NoError(t, err)
			u.Path = "/no_such_database_clifix"
			u.User = url.UserPassword(u.User.Username(), pw)
			dsn = u.String()
		}
		for _, args := range [][]string{{"migrate", "status"}, {"migrate", "status", "--json"}} {
			r := runCLI(t, "", append([]string{"--dsn", dsn}, args...)...)
			assert.Equal(t, 1, r.code, "alkstore %v: %s%s", args, r.out, r.err)
			assert.Empty(t, r.out, "alkstore %v reported on a database it never read", args)
			assert.Contains(t, r.err, "alkstore: ")
			assert.NotContains(t, r.out+r.err, pw)
		}
	})
}

// TestCLIMigrateRefusesWhatOpenRefuses: a DSN Open refuses before any I/O
// (no engine's, or one that does not parse) gets the same error and exit
// code from migrate status as from every other command.
func TestCLIMigrateRefusesWhatOpenRefuses(t *testing.T) {
	parallelTest(t)
	cliBin(t)
	for _, dsn := range []string{
		"mysql://u:pw@h/db",
		"host=127.0.0.1 port=1 user=bob password='Qx7v'Wm3k' dbname=db",
		"postgres://bob:pw@127.0.0.1:99999/db",
	} {
		stats := runCLI(t, "", "--dsn", dsn, "stats")
		status := runCLI(t, "", "--dsn", dsn, "migrate", "status")
		assert.NotEqual(t, 0, stats.code, dsn)
		assert.Equal(t, stats.code, status.code, "%s: stats %q, migrate status %q", dsn, stats.err, status.err)
		assert.Equal(t, stats.err, status.err, dsn)
	}
}

// TestCLIMigrateStatusOnAMissingDatabase: migrate status on a database
// that does not exist (PostgreSQL: no such database; SQLite: no such file,
// as a path, sqlite:path or file: URI) exits 1 on both engines, saying so,
// and creates nothing. On SQLite it created an empty file, listed every
// migration pending and exited 0.
func TestCLIMigrateStatusOnAMissingDatabase(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cliBin(t)
		dir := t.TempDir()
		missing := filepath.Join(dir, "missing.db")
		dsns := []string{missing, "sqlite:" + missing, "file:" + missing + "?cache=private"}
		want := "no SQLite database at"
		if e.name == "pg" {
			u, err := url.Parse(e.dsn)
			require.NoError(t, err)
			u.Path = "/no_such_database_missing"
			dsns, want = []string{u.String()}, "no_such_database_missing"
		}
		for _, dsn := range dsns {
			r := runCLI(t, "", "--dsn", dsn, "migrate", "status")
			assert.Equal(t, 1, r.code, "%s: %s%s", dsn, r.out, r.err)
			assert.Empty(t, r.out, dsn)
			assert.Contains(t, r.err, want, dsn)
			_, err := os.Stat(missing)
			assert.True(t, errors.Is(err, fs.ErrNotExist), "migrate status on %s created the file: %v", dsn, err)
		}
		if e.name == "lite" {
			// A relative file: URI with an escape names the unescaped file,
			// as SQLite reads it: the check looked for "exists%207.db", so
			// migrate up migrated "exists 7.db" and then failed (review53a).
			for _, cmd := range []string{"up", "status"} {
				r := runCLI(t, dir, "--dsn", "file:exists%207.db", "migrate", cmd)
				assert.Equal(t, 0, r.code, "migrate %s: %s%s", cmd, r.out, r.err)
			}
			_, err := os.Stat(filepath.Join(dir, "exists 7.db"))
			assert.NoError(t, err)
		}
	})
}
