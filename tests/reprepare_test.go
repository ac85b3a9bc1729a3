package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLiteStatementsKeepTheirPlans: SQLite prepares a statement again
// before a run when its plan read the value of a bound parameter (a bare
// LIMIT ?, an equality it compares with a partial index's predicate) and
// that parameter was bound since; the driver clears every binding before
// each run, so such a statement was parsed and planned again on every call.
// ClaimableJobs was: about a fifth of a SQLite burn-down's CPU, as its LIMIT
// follows a worker's free slots. Every SQLite statement of the library runs
// twice here with other values, rebound as the driver does, and must keep
// its plan. (PostgreSQL plans a prepared statement by its own rules; the
// plan tests cover its custom and generic plans.)
func TestLiteStatementsKeepTheirPlans(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "lite" {
			return
		}
		e.open(t) // migrated
		files, err := filepath.Glob("../db/lite/*.sql.go")
		require.NoError(t, err)
		statement := regexp.MustCompile("(?s)\nconst \\w+ = `-- name: (\\w+) :\\w+\n(.*?)`\n")
		conn, err := e.sqlDB(t).Conn(ctx(t))
		require.NoError(t, err)
		defer conn.Close()
		checked := 0
		require.NoError(t, conn.Raw(func(dc any) error {
			c := dc.(interface{ Raw() *sqlite3.Conn }).Raw()
			for _, f := range files {
				src, err := os.ReadFile(f)
				require.NoError(t, err)
				for _, m := range statement.FindAllSubmatch(src, -1) {
					name := string(m[1])
					st, _, err := c.Prepare(string(m[2]))
					require.NoError(t, err, name)
					require.NoError(t, c.Exec("BEGIN"))
					for run := range 2 {
						require.NoError(t, st.ClearBindings())
						for p := 1; p <= st.BindCount(); p++ {
							require.NoError(t, st.BindInt64(p, int64(10+run)))
						}
						for st.Step() {
						}
						_ = st.Reset() // values of the wrong type may fail a write: the plan is what counts
					}
					require.NoError(t, c.Exec("ROLLBACK"))
					assert.Zero(t, st.Status(sqlite3.STMTSTATUS_REPREPARE, false),
						"%s is prepared again when its parameters are bound again: a bare LIMIT ? (cast it), or a parameter compared with a partial index's predicate", name)
					require.NoError(t, st.Close())
					checked++
				}
			}
			return nil
		}))
		assert.Greater(t, checked, 50, "too few statements found in db/lite")
	})
}
