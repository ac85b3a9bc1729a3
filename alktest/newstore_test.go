package alktest_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

// testDatabases counts the databases NewStore created on the test server.
func testDatabases(t *testing.T) int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgServer.AdminDSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname LIKE 'alktest\\_%'").Scan(&n))
	return n
}

func TestNewStore(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			dsn := ""
			if engine == "pg" {
				dsn = pgServer.AdminDSN()
			}
			before := 0
			if engine == "pg" {
				before = testDatabases(t)
			}
			var path string
			t.Run("isolated", func(t *testing.T) {
				a, b := alktest.NewStore(t, dsn), alktest.NewStore(t, dsn)
				assert.Equal(t, engine, a.Engine())
				q := a.JobQueue[welcome]("mail")
				_, err := q.Enqueue(ctx, welcome{User: 1}, store.EnqueueOpts{})
				require.NoError(t, err)
				alktest.RequireEnqueued(ctx, t, q, nil)
				alktest.RequireNotEnqueued(ctx, t, b.JobQueue[welcome]("mail"), nil)
				if engine == "pg" {
					assert.Equal(t, before+2, testDatabases(t))
				}
				path = t.TempDir()
			})
			if engine == "pg" {
				assert.Equal(t, before, testDatabases(t), "the test's databases are dropped when it ends")
			} else {
				assert.NoDirExists(t, path, "the test's files are removed when it ends")
			}
		})
	}
	t.Run("pg key=value DSN", func(t *testing.T) {
		needPG(t)
		u, err := url.Parse(pgServer.AdminDSN())
		require.NoError(t, err)
		host := u.Query().Get("host")
		if host == "" {
			host = u.Hostname()
		}
		before := testDatabases(t)
		s := alktest.NewStore(t, "host="+host+" user="+u.User.Username()+" dbname=postgres")
		assert.Equal(t, "pg", s.Engine())
		assert.Equal(t, before+1, testDatabases(t), "a fresh database")
		_, err = s.Queue("q").Enqueue(context.Background(), nil, store.EnqueueOpts{})
		require.NoError(t, err)
		alktest.RequireNotEnqueued(context.Background(), t, alktest.NewStore(t, pgServer.AdminDSN()).JobQueue[welcome]("q"), nil)
	})
	msg := failed(func(tb testing.TB) { alktest.NewStore(tb, "some/file.db") })
	assert.Contains(t, msg, "PostgreSQL DSN")
}

// TestNewStorePoolSettingsDSN: a server DSN setting the store's pool
// (pool_max_conns, README's own keyword), in either form, as an
// application's own DSN may: NewStore creates the test's database, opens
// the store with the pool settings, and drops the database at the end.
// NewStore connected with pgx.Connect, which sent pool_max_conns to the
// server as a run-time parameter, and failed ("unrecognized configuration
// parameter", attack56b F3).
func TestNewStorePoolSettingsDSN(t *testing.T) {
	needPG(t)
	u, err := url.Parse(pgServer.AdminDSN())
	require.NoError(t, err)
	host := u.Query().Get("host")
	if host == "" {
		host = u.Hostname()
	}
	q := u.Query()
	q.Set("pool_max_conns", "3")
	u.RawQuery = q.Encode()
	for form, dsn := range map[string]string{
		"url":       u.String(),
		"key=value": "host=" + host + " user=" + u.User.Username() + " dbname=postgres pool_max_conns=3",
	} {
		t.Run(form, func(t *testing.T) {
			before := testDatabases(t)
			t.Run("store", func(t *testing.T) {
				s := alktest.NewStore(t, dsn)
				assert.Equal(t, before+1, testDatabases(t), "a fresh database")
				_, err := s.Queue("q").Enqueue(context.Background(), nil, store.EnqueueOpts{})
				require.NoError(t, err)
			})
			assert.Equal(t, before, testDatabases(t), "the test's database is dropped when it ends")
		})
	}
}
