package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// TestLiteJobWritesBuildNoStateTables: the finished-jobs indexes used to
// be partial on state IN (four final states), and SQLite built a table of
// those four strings for every row it wrote to alk_jobs (each enqueue;
// each claim, ack and retry twice, for the old row and the new), though
// pending and running rows never enter those indexes (00015). An IN of two
// constants at most is two comparisons. The CHECK on state, an IN of its
// six states, built a table of them for each written row too, a third of
// the CPU of each job of an EnqueueMany (00021 makes it six comparisons):
// no table of states at all, final or any other.
func TestLiteJobWritesBuildNoStateTables(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "lite" {
			return // PostgreSQL tests an IN list against an array, with no table
		}
		e.open(t) // migrated
		db := e.sqlDB(t)
		final := []string{"cancelled", "completed", "dead", "expired"}
		states := []string{"cancelled", "completed", "dead", "expired", "pending", "running"}
		for _, name := range []string{"EnqueueJob", "EnqueueJobs", "EnqueueJobsAlike", "AckJob", "RetryJob", "BuryJob", "ClaimJobs"} {
			sqlText, params := generatedQuery(t, "lite", name)
			args := make([]any, len(params))
			for i := range args {
				args[i] = 1
			}
			rows, err := db.QueryContext(ctx(t), "EXPLAIN "+sqlText, args...)
			require.NoError(t, err, name)
			// The strings each ephemeral table is filled with.
			var tables [][]string
			filling := false
			for rows.Next() {
				var addr, p1, p2, p3, p5 int64
				var opcode string
				var p4, comment any
				require.NoError(t, rows.Scan(&addr, &opcode, &p1, &p2, &p3, &p4, &p5, &comment))
				switch {
				case opcode == "OpenEphemeral":
					tables, filling = append(tables, nil), true
				case filling && opcode == "String8":
					tables[len(tables)-1] = append(tables[len(tables)-1], fmt.Sprint(p4))
				case filling && (opcode == "MakeRecord" || opcode == "IdxInsert"):
				default:
					filling = false
				}
			}
			require.NoError(t, rows.Err())
			for _, strs := range tables {
				slices.Sort(strs)
				assert.NotEqual(t, final, strs, "%s builds a table of the final states for every row it writes", name)
				assert.NotEqual(t, states, strs, "%s builds a table of the states for every row it writes (the CHECK on state)", name)
			}
		}
	})
}
