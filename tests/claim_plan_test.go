package tests

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestClaimKeepsItsGenericPlanPostgres: PostgreSQL's plan cache keeps
// ClaimJobs's generic plan once it has planned the statement five times,
// instead of planning it again for every claim (0.6 ms, as long as the
// claim itself; issue 18). The cache chooses the generic plan only when it
// costs no more than the custom plans did, so the statement must not let a
// custom plan see the values that make it look cheaper (the LIMIT, the
// queue, now). A busy queue beside a small one, with statistics, is where
// the custom plan looked cheapest. Postgres only: SQLite has no plan cache
// of this kind (TestLiteStatementsKeepTheirPlans is its side).
func TestClaimKeepsItsGenericPlanPostgres(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.MaxConns = 1 // every claim on the one connection whose statements are read below
	pool, err := pgxpool.NewWithConfig(c, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := store.OpenPool(c, pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	jobs := make([]store.NewJob, 1000)
	for i := range jobs {
		jobs[i].Payload = []byte(`{}`)
	}
	busy := s.Queue("busy")
	for range 5 {
		_, err = busy.EnqueueMany(c, jobs)
		require.NoError(t, err)
	}
	_, err = s.Queue("small").EnqueueMany(c, jobs[:10])
	require.NoError(t, err)
	_, err = pool.Exec(c, "ANALYZE alkstore.jobs")
	require.NoError(t, err)

	const claims = 12
	for range claims {
		got, err := busy.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, got, 10)
	}
	var generic, custom int64
	require.NoError(t, pool.QueryRow(c, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '-- name: ClaimJobs %'`).Scan(&generic, &custom))
	assert.LessOrEqual(t, custom, int64(5), "custom plans of ClaimJobs (the cache tries five before it compares)")
	assert.Equal(t, int64(claims), generic+custom)
}
