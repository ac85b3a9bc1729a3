package tests

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIMigratePoolSettingsDSN: a DSN setting the store's pool
// (pool_max_conns, README's own keyword), in either form, works for migrate
// status and migrate up as for every other command. migrate opened it with
// database/sql's "pgx", which sent pool_max_conns to the server as a
// run-time parameter: status failed ("unrecognized configuration
// parameter"), and up migrated (through Open) and then exited 1 printing
// the status (attack56b F3).
func TestCLIMigratePoolSettingsDSN(t *testing.T) {
	emptyDatabases(t)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("pool settings are PostgreSQL's")
		}
		cliBin(t)
		dir := t.TempDir()
		u, err := url.Parse(e.dsn)
		require.NoError(t, err)
		kv := "host=" + u.Query().Get("host") + " dbname=" + strings.TrimPrefix(u.Path, "/") +
			" user=" + u.User.Username() + " pool_max_conns=4 pool_min_conns=1"
		q := u.Query()
		q.Set("pool_max_conns", "4")
		q.Set("pool_max_conn_lifetime", "1h")
		u.RawQuery = q.Encode()
		dsnURL := u.String()

		r := runCLI(t, dir, "--dsn", dsnURL, "migrate", "status")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.out, "pending")
		r = runCLI(t, dir, "--dsn", dsnURL, "migrate", "up")
		require.Equal(t, 0, r.code, r.err)
		assert.NotContains(t, r.out, "pending", "migrate up applied every migration")
		for _, d := range []string{kv, dsnURL} {
			r = runCLI(t, dir, "--dsn", d, "migrate", "status")
			require.Equal(t, 0, r.code, r.err)
			assert.NotContains(t, r.out, "pending", "the database is current")
			r = runCLI(t, dir, "--dsn", d, "migrate", "up")
			require.Equal(t, 0, r.code, r.err)
		}
	})
}
