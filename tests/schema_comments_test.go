package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJobCommentsDescribeFinalStates: the COMMENT ON text of the jobs table
// (what a DBA reads with \d+) says what the library does since jobs got
// their final states: an expired job ends expired, not dead, and
// last_error also says "expired" or "cancelled". PostgreSQL only: SQLite
// has no COMMENT ON (its 00014 is a no-op).
func TestJobCommentsDescribeFinalStates(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	e.open(t).Close()
	pool := e.pool(t)
	comment := func(col string) string {
		var d string
		q := `SELECT col_description('alkstore.jobs'::regclass, (SELECT attnum FROM pg_attribute WHERE attrelid = 'alkstore.jobs'::regclass AND attname = $1))`
		if col == "" {
			q = `SELECT obj_description('alkstore.jobs'::regclass, 'pg_class') WHERE $1 = ''`
		}
		require.NoError(t, pool.QueryRow(c, q, col).Scan(&d), col)
		return d
	}
	table, expires, lastError := comment(""), comment("expires_at"), comment("last_error")
	assert.Contains(t, table, "completed, cancelled, expired, dead")
	assert.NotContains(t, expires, "dead")
	assert.Contains(t, expires, "ends expired")
	assert.Contains(t, lastError, "'cancelled'")
}
