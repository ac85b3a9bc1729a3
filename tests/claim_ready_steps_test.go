package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestLiteClaimReadsReadyRowsOnce: ClaimableReadyJobs, a SQLite claim's
// read, hands each ready row to the claim as it reads it. Written with its
// ready side first, as a subquery with a LIMIT of its own, SQLite ran that
// side as a co-routine and copied every row, column by column, into the
// statement's result: about 33 VM steps a row against 19 (a claim's
// statements and its ack 79.1k -> 75.6k instructions a job, callgrind).
// SQLite only: PostgreSQL claims in one statement.
func TestLiteClaimReadsReadyRowsOnce(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "lite")
	s := e.open(t)
	c := ctx(t)
	jobs := make([]store.NewJob, 1000) // one priority, more ready jobs than the claim takes
	for i := range jobs {
		jobs[i].Payload = []byte(`{"n":1}`)
	}
	_, err := s.Queue("steps").EnqueueMany(c, jobs)
	require.NoError(t, err)

	conn, err := e.sqlDB(t).Conn(c)
	require.NoError(t, err)
	defer conn.Close()
	sqlText, params := generatedQuery(t, "lite", "ClaimableReadyJobs")
	args := map[string]any{"queue": "steps", "now": time.Now().Add(time.Hour).UnixMicro(), "maxjobs": 100}
	vals := make([]any, len(params))
	for i, p := range params {
		v, ok := args[p]
		require.True(t, ok, "no value for parameter %s", p)
		vals[i] = v
	}
	r := runLite(t, conn, "ClaimableReadyJobs", sqlText, params, vals, map[string]bool{})
	require.Equal(t, 100, r.rows)
	t.Logf("%d VM steps for %d rows", r.steps, r.rows)
	// 19 a row and about 100 for the statement now; 33 a row with the copy.
	assert.LessOrEqual(t, r.steps, int64(25*r.rows+300), "ClaimableReadyJobs copies its ready rows")
}
