package tests

import (
	"strconv"
	"testing"

	"github.com/alkstore/alkstore/store"
	"github.com/stretchr/testify/assert"
)

// TestCLILimitsOutOfRangeAreBadInput: a --limit the command cannot honour
// is bad input (exit 2), not a shorter page. `queues jobs --limit 20000`
// printed 10,000 jobs and no next-page hint, so the rest looked absent,
// and `streams heads --limit -1` printed an empty table and exited 0
// where `streams tail` refuses it (attack56b F5).
func TestCLILimitsOutOfRangeAreBadInput(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cliBin(t)
		s := e.open(t)
		c := ctx(t)
		_, err := s.Queue("q").Enqueue(c, []byte(`{}`), store.EnqueueOpts{})
		assert.NoError(t, err)
		over := strconv.Itoa(store.MaxJobsLimit + 1)
		r := runCLI(t, "", "--dsn", e.dsn, "queues", "jobs", "q", "--limit", over)
		assert.Equal(t, 2, r.code, "queues jobs --limit %s: %s", over, r.err)
		assert.Contains(t, r.err, "MaxJobsLimit")
		r = runCLI(t, "", "--dsn", e.dsn, "queues", "jobs", "q", "--limit", strconv.Itoa(store.MaxJobsLimit))
		assert.Equal(t, 0, r.code, r.err)
		for _, limit := range []string{"0", "-1"} {
			r := runCLI(t, "", "--dsn", e.dsn, "streams", "heads", "s", "--limit", limit)
			assert.Equal(t, 2, r.code, "streams heads --limit %s: %s", limit, r.err)
			assert.Contains(t, r.err, "--limit must be positive")
		}
	})
}
