package tests

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIMigrateKeyValueDSN: the key=value DSN Open reads as PostgreSQL
// is PostgreSQL for migrate up and status too (never an SQLite file of
// that name, password included, in the working directory).
func TestCLIMigrateKeyValueDSN(t *testing.T) {
	emptyDatabases(t)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("the key=value DSN form is PostgreSQL's")
		}
		cliBin(t)
		dir := t.TempDir()
		u, err := url.Parse(e.dsn)
		require.NoError(t, err)
		kv := "host=" + u.Query().Get("host") + " dbname=" + strings.TrimPrefix(u.Path, "/") +
			" user=" + u.User.Username() + " password=kvS3cretPw"

		r := runCLI(t, dir, "--dsn", kv, "migrate", "status")
		require.Equal(t, 0, r.code, r.err)
		assert.NotContains(t, r.out, "applied", "a new database: every migration pending")
		assert.Contains(t, r.out, "pending")

		r = runCLI(t, dir, "--dsn", kv, "migrate", "up")
		require.Equal(t, 0, r.code, r.err)
		assert.NotContains(t, r.out, "pending", "migrate up applied every migration")
		r = runCLI(t, dir, "--dsn", kv, "migrate", "status")
		require.Equal(t, 0, r.code, r.err)
		assert.NotContains(t, r.out, "pending", "the database is current")
		assert.Contains(t, r.out, "applied")

		// the form most operators pass: a TCP host, where nothing listens
		r = runCLI(t, dir, "--dsn", "host=127.0.0.1 port=1 dbname=app user=bob password=kvS3cretPw connect_timeout=1", "migrate", "status")
		assert.Equal(t, 1, r.code, "%s%s", r.out, r.err)
		assert.NotContains(t, r.out+r.err, "kvS3cretPw")

		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		assert.Empty(t, names, "migrate must create no file in the working directory")
	})
}
