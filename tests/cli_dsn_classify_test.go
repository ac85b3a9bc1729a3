package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIDSNFileNameWithAnEqualsSign: an SQLite file name holding '='
// ("data=1.db", "v=2 backup.db") is a file name, as "sqlite:data=1.db"
// is; it was read as a PostgreSQL key=value DSN (any "word=" at the start
// made one) and refused. A DSN is key=value when its first setting names
// a libpq or pgx keyword ("host=", "dbname=", "application_name="), or
// more settings follow it: those still go to PostgreSQL, malformed ones
// refused as bad input.
func TestCLIDSNFileNameWithAnEqualsSign(t *testing.T) {
	parallelTest(t)
	cliBin(t)
	for _, name := range []string{"data=1.db", "v=2 backup.db", "Host=x.db"} {
		dir := t.TempDir()
		up := runCLI(t, dir, "--dsn", name, "migrate", "up")
		require.Equal(t, 0, up.code, "migrate up on %q: %s", name, up.err)
		_, err := os.Stat(filepath.Join(dir, name))
		assert.NoError(t, err, "migrate up on %q made no such file", name)
		st := runCLI(t, dir, "--dsn", name, "stats")
		assert.Equal(t, 0, st.code, "stats on %q: %s", name, st.err)
	}
	for _, dsn := range []string{
		"host=127.0.0.1 port=1 dbname=x.db connect_timeout=1",
		"application_name=x host=127.0.0.1 port=1 connect_timeout=1",
		"dbname = x.db host=127.0.0.1 port=1 connect_timeout=1",
		// A first key not on the keyword list, with settings after it: a
		// run-time parameter and pgxpool's pool_ping_timeout were read as
		// file names (migrate up made a file named after the DSN).
		"work_mem=64MB host=127.0.0.1 port=1 connect_timeout=1",
		"pool_ping_timeout=5s host=127.0.0.1 port=1 connect_timeout=1",
	} {
		dir := t.TempDir()
		r := runCLI(t, dir, "--dsn", dsn, "stats")
		assert.Equal(t, 1, r.code, dsn)
		assert.Contains(t, r.err, "failed to connect", dsn)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries, "%q made a file", dsn)
	}
	r := runCLI(t, "", "--dsn", "host=127.0.0.1 dbname", "stats")
	assert.Equal(t, 2, r.code, "a key=value DSN that does not parse: %s", r.err)
}
