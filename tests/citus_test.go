package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Citus-only statements (docs/design/citus.md): these tests run in `make
// test-citus`, whose databases have schema-based sharding on, and which sets
// ALK_CITUS_REQUIRED so that they fail there rather than skip; elsewhere
// they skip, saying why.
const (
	citusVersion        = `SELECT COALESCE((SELECT extversion FROM pg_extension WHERE extname = 'citus'), '')`
	citusSchemaIsShared = `SELECT count(*) FROM pg_dist_schema WHERE schemaid = to_regnamespace($1)`
	citusAppSchema      = `CREATE SCHEMA citus_app`
	citusAppTable       = `CREATE TABLE citus_app.orders (id bigint PRIMARY KEY, note text NOT NULL)`
	citusAppInsert      = `INSERT INTO citus_app.orders (id, note) VALUES ($1, 'order')`
	citusAppCount       = `SELECT count(*) FROM citus_app.orders WHERE id = $1`
	citusAlkstoreSchema = `CREATE SCHEMA alkstore`
	citusMarkerTables   = `SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = to_regclass('alkstore.citus_commit_marker')`
)

// citusEnv is a fresh database of the Citus cluster, or skips the test.
func citusEnv(t *testing.T) (*engineEnv, *pgxpool.Pool) {
	t.Helper()
	e := newEnv(t, "pg")
	pool := e.pool(t)
	var v string
	require.NoError(t, pool.QueryRow(ctx(t), citusVersion).Scan(&v))
	if v == "" {
		require.Empty(t, os.Getenv("ALK_CITUS_REQUIRED"), "ALK_CITUS_REQUIRED is set (make test-citus) but the database has no Citus")
		t.Skip("no Citus extension in the test database: `make test-citus` runs this against a Citus cluster")
	}
	return e, pool
}

func distributedSchema(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx(t), citusSchemaIsShared, name).Scan(&n))
	return n == 1
}

// With schema-based sharding on, alkstore stays regular tables on the
// coordinator, and a business row in a distributed schema (on a worker)
// commits or rolls back with its event and offset (a two-phase commit
// across the coordinator and the worker).
func TestCitusBusinessRowsOnAWorkerCommitWithEvents(t *testing.T) {
	e, pool := citusEnv(t)
	s := e.open(t)
	c := ctx(t)
	_, err := pool.Exec(c, citusAppSchema)
	require.NoError(t, err)
	_, err = pool.Exec(c, citusAppTable)
	require.NoError(t, err)
	require.True(t, distributedSchema(t, pool, "citus_app"), "the application's schema is distributed")
	require.False(t, distributedSchema(t, pool, "alkstore"), "alkstore stays on the coordinator")

	write := func(id int64) pgx.Tx {
		ptx, err := pool.Begin(c)
		require.NoError(t, err)
		tx, err := s.AdoptPgx(ptx)
		require.NoError(t, err)
		_, err = tx.Exec(c, citusAppInsert, id)
		require.NoError(t, err)
		off, err := s.Stream("orders").PublishTx(c, tx, []byte("order placed"))
		require.NoError(t, err)
		require.NoError(t, s.Stream("orders").SaveOffsetTx(c, tx, "billing", off))
		return ptx
	}
	count := func(id int64) int {
		var n int
		require.NoError(t, pool.QueryRow(c, citusAppCount, id).Scan(&n))
		return n
	}

	require.NoError(t, write(1).Rollback(c))
	assert.Zero(t, count(1))
	evs, err := s.Stream("orders").ReadSince(c, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, evs)

	require.NoError(t, write(2).Commit(c))
	assert.Equal(t, 1, count(2))
	require.Eventually(t, func() bool {
		evs, err = s.Stream("orders").ReadSince(c, 0, 10)
		return err == nil && len(evs) == 1
	}, 30*time.Second, time.Millisecond)
	off, err := s.Stream("orders").Offset(c, "billing")
	require.NoError(t, err)
	assert.Equal(t, evs[0].Offset, off)
}

// An alkstore schema Citus has distributed (created while schema-based
// sharding was on, as an Open before this check did) is refused with a
// clear error instead of being migrated into a mode whose horizon is wrong.
func TestCitusRefusesADistributedAlkstoreSchema(t *testing.T) {
	emptyDatabases(t)
	e, pool := citusEnv(t)
	_, err := pool.Exec(ctx(t), citusAlkstoreSchema)
	require.NoError(t, err)
	require.True(t, distributedSchema(t, pool, "alkstore"))
	_, err = store.Open(ctx(t), e.dsn)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorContains(t, err, "DROP SCHEMA alkstore CASCADE")
	var opErr *store.OpError
	assert.ErrorAs(t, err, &opErr)
}

// examples/citus-tenants on the cluster: two tenants' business schemas on
// different workers, each order's row, event and job committed together.
func TestCitusTenantsExample(t *testing.T) {
	e, _ := citusEnv(t)
	out, err := exec.CommandContext(ctx(t), "go", "run", "../examples/citus-tenants", e.dsn).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var ports []string
	for _, line := range strings.Split(string(out), "\n") {
		if _, port, ok := strings.Cut(line, "orders on the worker at port "); ok {
			ports = append(ports, port)
		}
	}
	require.Len(t, ports, 2, "%s", out)
	assert.NotEqual(t, ports[0], ports[1], "the tenants are on different workers")
	assert.Contains(t, string(out), "shop_eu: 3 orders committed, 3 events, 3 invoice jobs run")
	assert.Contains(t, string(out), "shop_us: 3 orders committed, 3 events, 3 invoice jobs run")
}

// A business row on a worker and alkstore's rows on the coordinator commit
// in two phases (PREPARE TRANSACTION on the worker, recorded on the
// coordinator, then COMMIT PREPARED), through InTx, an adopted transaction
// and a WorkTx handler alike: Citus alone commits such a transaction in one phase,
// the worker first, so a coordinator failing between the two commits (or a
// worker's lost COMMIT answer) would keep the row and lose its event or
// job. Without an alkstore statement the transaction stays one-phase, as
// Citus makes it; a read-only adopted transaction reads as before.
func TestCitusBusinessTransactionsCommitInTwoPhases(t *testing.T) {
	e, admin := citusEnv(t)
	c := ctx(t)
	_, err := admin.Exec(c, citusAppSchema)
	require.NoError(t, err)
	_, err = admin.Exec(c, citusAppTable)
	require.NoError(t, err)

	var mu sync.Mutex
	var remote []string // the commands the coordinator sent the workers
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["citus.log_remote_commands"] = "on"
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		remote = append(remote, n.Message)
		mu.Unlock()
	}
	pool, err := pgxpool.NewWithConfig(c, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := store.OpenPool(c, pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	twoPhase := func() bool {
		mu.Lock()
		defer mu.Unlock()
		prepared := slices.ContainsFunc(remote, func(m string) bool { return strings.Contains(m, "PREPARE TRANSACTION") })
		remote = nil
		return prepared
	}
	twoPhase() // Open's own DDL

	require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
		if _, err := tx.Exec(c, citusAppInsert, 1); err != nil {
			return err
		}
		_, err := s.Stream("orders").PublishTx(c, tx, []byte("1"))
		return err
	}))
	assert.True(t, twoPhase(), "InTx: business row and event")

	ptx, err := pool.Begin(c)
	require.NoError(t, err)
	tx, err := s.AdoptPgx(ptx)
	require.NoError(t, err)
	_, err = s.Queue("mail").EnqueueTx(c, tx, []byte("2"), store.EnqueueOpts{})
	require.NoError(t, err)
	_, err = ptx.Exec(c, citusAppInsert, 2)
	require.NoError(t, err)
	require.NoError(t, ptx.Commit(c))
	assert.True(t, twoPhase(), "adopted: job, then business row")

	// A WorkTx handler's business row commits with the job's completion.
	wctx, stop := context.WithCancel(c)
	var ran atomic.Bool
	_, err = s.Queue("rows").Enqueue(c, []byte("4"), store.EnqueueOpts{})
	require.NoError(t, err)
	twoPhase()
	err = s.Queue("rows").WorkTx(wctx, store.WorkOpts{Concurrency: 1}, func(c context.Context, tx store.Tx, _ *store.Job) error {
		defer stop()
		ran.Store(true)
		_, err := tx.Exec(c, citusAppInsert, 4)
		return err
	})
	require.True(t, err == nil || errors.Is(err, context.Canceled), "WorkTx: %v", err)
	require.True(t, ran.Load())
	assert.True(t, twoPhase(), "WorkTx: business row and the job's ack")

	_, err = pool.Exec(c, citusAppInsert, 3)
	require.NoError(t, err)
	assert.False(t, twoPhase(), "a business row alone: Citus's one phase")

	ro, err := pool.BeginTx(c, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = ro.Rollback(c) }()
	rtx, err := s.AdoptPgx(ro)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		evs, err := s.Stream("orders").ReadSinceTx(c, rtx, 0, 10)
		require.NoError(t, err)
		return len(evs) == 1
	}, 30*time.Second, time.Millisecond, "a read-only adopted transaction reads")

	for id := int64(1); id <= 4; id++ {
		var n int
		require.NoError(t, admin.QueryRow(c, citusAppCount, id).Scan(&n))
		assert.Equal(t, 1, n, "order %d", id)
	}
}

// Stores opening a fresh Citus database at once each find or create the
// commit marker, made a Citus local table once. (A smoke test of concurrent
// Opens: it does not force them into the marker step together, so it
// passes without the advisory lock that serializes that step too.)
func TestCitusConcurrentOpensShareOneMarker(t *testing.T) {
	e, pool := citusEnv(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := store.Open(ctx(t), e.dsn)
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx(t), citusMarkerTables).Scan(&n))
	assert.Equal(t, 1, n, "alkstore.citus_commit_marker in Citus's metadata")
}
