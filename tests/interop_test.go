package tests

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/examples/sqlc-shared-tx/applite"
	"github.com/alkstore/alkstore/examples/sqlc-shared-tx/apppg"
	"github.com/alkstore/alkstore/store"
)

// The application of these tests is examples/sqlc-shared-tx: its own table
// and sqlc-generated queries (apppg on Postgres, applite on SQLite), which
// must run in the same transaction as the store's writes.

// appQueries is what the tests use of the two generated packages.
type appQueries interface {
	CreateOrder(ctx context.Context, item string) (int64, error)
	CountOrders(ctx context.Context) (int64, error)
}

// appQueriesIn binds the application's sqlc queries to the driver
// transaction under tx, and checks that the other engine's accessor says no.
func appQueriesIn(t *testing.T, tx store.Tx) appQueries {
	t.Helper()
	ptx, isPg := tx.Pgx()
	stx, isLite := tx.SQL()
	require.True(t, isPg != isLite, "exactly one accessor hands out the driver transaction")
	if isPg {
		require.NotNil(t, ptx)
		return apppg.New(ptx) // a pgx.Tx is sqlc's pgx DBTX
	}
	require.NotNil(t, stx)
	return applite.New(stx) // a *sql.Tx is sqlc's database/sql DBTX
}

// createAppTable creates the application's table from the example's schema.
func createAppTable(t *testing.T, e *engineEnv, s *store.Store) {
	t.Helper()
	ddl, err := os.ReadFile("../examples/sqlc-shared-tx/schema/" + e.name + "/schema.sql")
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx(t), func(c context.Context, tx store.Tx) error {
		_, err := tx.Exec(c, string(ddl))
		return err
	}))
}

// appWorld is what a test checks after a transaction: the application's
// rows and the stream's events.
type appWorld struct{ rows, events int64 }

func observeApp(t *testing.T, s *store.Store) appWorld {
	t.Helper()
	c := ctx(t)
	var w appWorld
	require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
		var err error
		w.rows, err = appQueriesIn(t, tx).CountOrders(c)
		return err
	}))
	evs, err := s.Stream("orders").ReadSince(c, 0, 100)
	require.NoError(t, err)
	w.events = int64(len(evs))
	return w
}

// TestStoreTxHandsItsDriverTxToSqlc: the application's sqlc-generated
// queries run on the driver transaction of a store-begun Tx (Begin and
// InTx), beside a publish, and commit or roll back with it. Driver helpers
// work on it too (pgx.CollectRows, a function taking a *sql.Tx).
func TestStoreTxHandsItsDriverTxToSqlc(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createAppTable(t, e, s)
		c := ctx(t)
		orders := s.Stream("orders")

		checkout := func(tx store.Tx, item string) {
			id, err := appQueriesIn(t, tx).CreateOrder(c, item)
			require.NoError(t, err)
			require.NotZero(t, id)
			_, err = orders.PublishTx(c, tx, []byte(item))
			require.NoError(t, err)
			n, err := appQueriesIn(t, tx).CountOrders(c)
			require.NoError(t, err)
			assert.NotZero(t, n, "the transaction's own row is visible to its own queries")
		}

		// Begin, then Rollback: neither the row nor the event remains.
		tx, err := s.Begin(c)
		require.NoError(t, err)
		checkout(tx, "kettle")
		require.NoError(t, tx.Rollback(c))
		assert.Equal(t, appWorld{}, observeApp(t, s))

		// Begin, then Commit: both are there.
		tx, err = s.Begin(c)
		require.NoError(t, err)
		checkout(tx, "teapot")
		require.NoError(t, tx.Commit(c))
		assert.Equal(t, appWorld{rows: 1, events: 1}, observeApp(t, s))

		// InTx: an error rolls both back; nil commits both.
		require.ErrorIs(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			checkout(tx, "spoon")
			return errBoom
		}), errBoom)
		assert.Equal(t, appWorld{rows: 1, events: 1}, observeApp(t, s))
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			checkout(tx, "mug")
			return nil
		}))
		assert.Equal(t, appWorld{rows: 2, events: 2}, observeApp(t, s))

		// Driver helpers take the same transaction.
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			var items []string
			if ptx, ok := tx.Pgx(); ok {
				rows, err := ptx.Query(c, `SELECT item FROM sqlc_orders ORDER BY id`)
				require.NoError(t, err)
				items, err = pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
			} else {
				stx, _ := tx.SQL()
				items = sqlItems(t, c, stx)
			}
			assert.Equal(t, []string{"teapot", "mug"}, items)
			return nil
		}))
	})
}

var errBoom = errorString("boom")

type errorString string

func (e errorString) Error() string { return string(e) }

// sqlItems is a database/sql helper of the application's.
func sqlItems(t *testing.T, c context.Context, stx *sql.Tx) []string {
	rows, err := stx.QueryContext(c, `SELECT item FROM sqlc_orders ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var items []string
	for rows.Next() {
		var it string
		require.NoError(t, rows.Scan(&it))
		items = append(items, it)
	}
	require.NoError(t, rows.Err())
	return items
}

// TestAdoptFailsAtOnce: adopting a nil transaction, one of the other engine,
// or on a closed store fails at the Adopt call, not at the first use of the
// Tx it returned.
func TestAdoptFailsAtOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		var wrongEngine, nilTx func() (store.Tx, error)
		if e.name == "pg" {
			wrongEngine = func() (store.Tx, error) { return s.AdoptSQL(new(sql.Tx)) }
			nilTx = func() (store.Tx, error) { return s.AdoptPgx(nil) }
		} else {
			wrongEngine = func() (store.Tx, error) { return s.AdoptPgx(fakePgxTx{}) }
			nilTx = func() (store.Tx, error) { return s.AdoptSQL(nil) }
		}
		for what, adopt := range map[string]func() (store.Tx, error){"wrong engine": wrongEngine, "nil": nilTx} {
			_, err := adopt()
			require.ErrorIs(t, err, store.ErrInvalidArgument, what)
			assert.Contains(t, err.Error(), "adopt", what)
		}

		require.NoError(t, s.Close())
		var err error
		if e.name == "pg" {
			ptx, berr := e.pool(t).Begin(ctx(t))
			require.NoError(t, berr)
			defer ptx.Rollback(context.Background())
			_, err = s.AdoptPgx(ptx)
		} else {
			db, oerr := sql.Open("sqlite3", "file:"+e.dsn)
			require.NoError(t, oerr)
			defer db.Close()
			stx, berr := db.Begin()
			require.NoError(t, berr)
			defer stx.Rollback()
			_, err = s.AdoptSQL(stx)
		}
		require.ErrorIs(t, err, store.ErrClosed)
	})
}

// fakePgxTx is a non-nil pgx.Tx for the SQLite store to refuse; it is
// never used.
type fakePgxTx struct{ pgx.Tx }

// adoptedTx begins a transaction with the application's own driver and
// returns it adopted, with the application's commit and rollback.
func adoptedTx(t *testing.T, e *engineEnv, s *store.Store) (tx store.Tx, commit, rollback func() error) {
	t.Helper()
	c := ctx(t)
	if e.name == "pg" {
		ptx, err := e.pool(t).Begin(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ptx.Rollback(context.Background()) })
		tx, err := s.AdoptPgx(ptx)
		require.NoError(t, err)
		got, ok := tx.Pgx()
		require.True(t, ok)
		require.Equal(t, ptx, got, "Pgx hands back the adopted transaction")
		return tx, func() error { return ptx.Commit(c) }, func() error { return ptx.Rollback(c) }
	}
	db, err := sql.Open("sqlite3", "file:"+e.dsn+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	stx, err := db.BeginTx(c, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stx.Rollback() })
	tx, err = s.AdoptSQL(stx)
	require.NoError(t, err)
	got, ok := tx.SQL()
	require.True(t, ok)
	require.Same(t, stx, got, "SQL hands back the adopted transaction")
	return tx, stx.Commit, stx.Rollback
}

// TestAdoptedTxIsEndedByItsOwner: Commit and Rollback on an adopted Tx
// change nothing and say so (ErrInvalidArgument); the transaction stays
// open for both the store and the application's sqlc queries until the
// application ends it, which decides for both; after that the adopted Tx
// reports ErrTxDone.
func TestAdoptedTxIsEndedByItsOwner(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createAppTable(t, e, s)
		c := ctx(t)
		orders := s.Stream("orders")

		write := func(tx store.Tx, item string) {
			_, err := appQueriesIn(t, tx).CreateOrder(c, item)
			require.NoError(t, err)
			_, err = orders.PublishTx(c, tx, []byte(item))
			require.NoError(t, err)
		}

		for _, end := range []string{"commit", "rollback"} {
			tx, commit, rollback := adoptedTx(t, e, s)
			write(tx, "before "+end)
			require.ErrorIs(t, tx.Commit(c), store.ErrInvalidArgument, "the store does not commit what it adopted")
			require.ErrorIs(t, tx.Rollback(c), store.ErrInvalidArgument, "nor roll it back")
			write(tx, "after "+end) // still open
			if end == "commit" {
				require.NoError(t, commit())
			} else {
				require.NoError(t, rollback())
			}
			_, err := orders.PublishTx(c, tx, []byte("late"))
			require.ErrorIs(t, err, store.ErrTxDone, "the owner ended it")
		}
		assert.Equal(t, appWorld{rows: 2, events: 2}, observeApp(t, s), "the committed transaction's writes, both of them; nothing of the rolled-back one")
	})
}

// TestDriverTxEndedBehindTheStore: a store-begun transaction whose driver
// transaction the caller ended directly is reported by Tx.Commit as
// ErrTxDone (the store cannot tell whether it committed), Rollback stays a
// no-op, and the store works on.
func TestDriverTxEndedBehindTheStore(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = s.Stream("orders").PublishTx(c, tx, []byte("x"))
		require.NoError(t, err)
		if ptx, ok := tx.Pgx(); ok {
			require.NoError(t, ptx.Rollback(c))
		} else {
			stx, _ := tx.SQL()
			require.NoError(t, stx.Rollback())
		}
		err = tx.Commit(c)
		require.ErrorIs(t, err, store.ErrTxDone)
		assert.Contains(t, err.Error(), "directly")
		require.NoError(t, tx.Rollback(c))

		_, err = s.Stream("orders").Publish(c, []byte("y")) // the writer slot / connection is free
		require.NoError(t, err)
	})
}
