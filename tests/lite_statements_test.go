package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	litedb "github.com/alkstore/alkstore/db/lite"
)

// TestLiteEveryStatementParses: every generated SQLite statement parses
// against the schema Open migrates to. The store's Open no longer checks
// this (litedriver.PrepareOnFirstRun: a statement is parsed on its first
// run), so a query that does not fit the schema, and that no other test
// runs, would otherwise first fail in a user's process.
func TestLiteEveryStatementParses(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "lite")
	require.NoError(t, e.open(t).Close())
	q, err := litedb.Prepare(ctx(t), e.sqlDB(t))
	require.NoError(t, err)
	require.NoError(t, q.Close())
}
