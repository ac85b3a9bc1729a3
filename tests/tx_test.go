package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/syncbuf"
	"github.com/alkstore/alkstore/store"
)

// Business SQL that reads the same on both engines.
const (
	createOrders = `CREATE TABLE orders (id BIGINT PRIMARY KEY, note TEXT NOT NULL)`
	insertOrder  = `INSERT INTO orders (id, note) VALUES ($1, $2)`
	countOrders  = `SELECT count(*) FROM orders WHERE id = $1`
)

func createOrdersTable(t *testing.T, s *store.Store) {
	t.Helper()
	require.NoError(t, s.InTx(ctx(t), func(c context.Context, tx store.Tx) error {
		_, err := tx.Exec(c, createOrders)
		return err
	}))
}

// world is what a test checks after a transaction: is the order row there,
// how many events does the stream hold, what offset is saved.
type world struct {
	order  bool
	events int
	offset int64
}

func observe(t *testing.T, s *store.Store, orderID int64) world {
	t.Helper()
	c := ctx(t)
	var w world
	require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
		var n int
		err := tx.QueryRow(c, countOrders, orderID).Scan(&n)
		w.order = n == 1
		return err
	}))
	evs, err := s.Stream("orders").ReadSince(c, 0, 100)
	require.NoError(t, err)
	w.events = len(evs)
	w.offset, err = s.Stream("orders").Offset(c, "billing")
	require.NoError(t, err)
	return w
}

// writeAll writes the business row, an event and an offset in tx.
func writeAll(c context.Context, s *store.Store, tx store.Tx, orderID int64) error {
	if _, err := tx.Exec(c, insertOrder, orderID, "order"); err != nil {
		return err
	}
	off, err := s.Stream("orders").PublishTx(c, tx, []byte("order placed"))
	if err != nil {
		return err
	}
	return s.Stream("orders").SaveOffsetTx(c, tx, "billing", off)
}

func TestTxCommitsOrDiscardsEverythingTogether(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createOrdersTable(t, s)
		c := ctx(t)
		nothing := world{}

		// A returned error rolls back.
		boom := errors.New("boom")
		err := s.InTx(c, func(c context.Context, tx store.Tx) error {
			require.NoError(t, writeAll(c, s, tx, 1))
			return boom
		})
		require.ErrorIs(t, err, boom)
		assert.Equal(t, nothing, observe(t, s, 1))

		// A panic rolls back and still propagates.
		require.PanicsWithValue(t, "kaboom", func() {
			_ = s.InTx(c, func(c context.Context, tx store.Tx) error {
				require.NoError(t, writeAll(c, s, tx, 2))
				panic("kaboom")
			})
		})
		assert.Equal(t, nothing, observe(t, s, 2))

		// A cancelled context rolls back.
		cc, cancel := context.WithCancel(c)
		err = s.InTx(cc, func(c context.Context, tx store.Tx) error {
			require.NoError(t, writeAll(c, s, tx, 3))
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, nothing, observe(t, s, 3))

		// An explicit Rollback.
		tx, err := s.Begin(c)
		require.NoError(t, err)
		require.NoError(t, writeAll(c, s, tx, 4))
		require.NoError(t, tx.Rollback(c))
		assert.Equal(t, nothing, observe(t, s, 4))

		// Commit: all of it.
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			return writeAll(c, s, tx, 5)
		}))
		w := observe(t, s, 5)
		assert.True(t, w.order)
		assert.Equal(t, 1, w.events)
		assert.NotZero(t, w.offset)
	})
}

func TestTxReadsItsOwnWrites(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("orders")
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)

		k := "order-9"
		off, err := st.PublishWithKeyTx(c, tx, k, []byte("mine"))
		require.NoError(t, err)
		more, err := st.PublishManyTx(c, tx, []store.Message{{Payload: []byte("m1")}, {Payload: []byte("m2")}})
		require.NoError(t, err)
		require.NoError(t, st.SaveOffsetTx(c, tx, "billing", off))

		evs, err := st.ReadSinceTx(c, tx, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, append([]int64{off}, more...), offsets(evs), "the tx sees what it published")
		require.NotNil(t, evs[0].Key)
		assert.Equal(t, k, *evs[0].Key)
		got, err := st.OffsetTx(c, tx, "billing")
		require.NoError(t, err)
		assert.Equal(t, off, got)
		evs, err = st.ReadFromConsumerTx(c, tx, "billing", 10)
		require.NoError(t, err)
		assert.Equal(t, more, offsets(evs))

		// Nobody else sees any of it before commit.
		outside, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, outside)
		got, err = st.Offset(c, "billing")
		require.NoError(t, err)
		assert.Zero(t, got)

		require.NoError(t, tx.Commit(c))
		require.Eventually(t, func() bool {
			outside, err = st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			return len(outside) == 3
		}, 30*time.Second, time.Millisecond)
	})
}

func TestFinishedTxRefusesWork(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("x")
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(c))
		require.NoError(t, tx.Rollback(c), "Rollback after Commit is a no-op")
		require.ErrorIs(t, tx.Commit(c), store.ErrTxDone)
		_, err = st.PublishTx(c, tx, []byte("late"))
		require.ErrorIs(t, err, store.ErrTxDone)
		_, err = st.ReadSinceTx(c, tx, 0, 1)
		require.ErrorIs(t, err, store.ErrTxDone)
		_, err = tx.Exec(c, "SELECT 1")
		require.ErrorIs(t, err, store.ErrTxDone)
		require.ErrorIs(t, tx.QueryRow(c, "SELECT 1").Scan(new(int)), store.ErrTxDone)

		var zero store.Tx
		_, err = st.PublishTx(c, zero, nil)
		require.ErrorIs(t, err, store.ErrTxDone)

		// A tx from another store is refused.
		other := newEnv(t, e.name).open(t)
		otx, err := other.Begin(c)
		require.NoError(t, err)
		defer otx.Rollback(c)
		_, err = st.PublishTx(c, otx, nil)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	})
}

func TestTxQueryRows(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createOrdersTable(t, s)
		c := ctx(t)
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			for i := int64(1); i <= 3; i++ {
				n, err := tx.Exec(c, insertOrder, i, fmt.Sprint("note ", i))
				require.NoError(t, err)
				assert.EqualValues(t, 1, n)
			}
			rows, err := tx.Query(c, `SELECT id, note FROM orders ORDER BY id`)
			require.NoError(t, err)
			defer rows.Close()
			var ids []int64
			for rows.Next() {
				var id int64
				var note string
				require.NoError(t, rows.Scan(&id, &note))
				ids = append(ids, id)
			}
			require.NoError(t, rows.Err())
			assert.Equal(t, []int64{1, 2, 3}, ids)
			err = tx.QueryRow(c, `SELECT note FROM orders WHERE id = $1`, 99).Scan(new(string))
			require.ErrorIs(t, err, store.ErrNotFound)
			return nil
		}))
	})
}

// abandon begins a transaction, writes, and drops the handle without ending
// it. noinline keeps the Tx from outliving the call.
//
//go:noinline
func abandon(t *testing.T, s *store.Store, c context.Context) {
	tx, err := s.Begin(c)
	require.NoError(t, err)
	_, err = s.Stream("leaks").PublishTx(c, tx, []byte("dropped"))
	require.NoError(t, err)
}

func TestAbandonedTransactionsReleaseEverything(t *testing.T) {
	eachEngineAlone(t, func(t *testing.T, e *engineEnv) { // alone: it forces GCs (process-wide) and the slot must be free within 2 s
		var logs syncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		var s *store.Store
		var pool *pgxpool.Pool
		c := ctx(t)
		if e.name == "pg" {
			pool = e.pool(t)
			var err error
			s, err = store.OpenPool(c, pool, store.WithLogger(logger))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
		} else {
			s = e.open(t, store.WithLogger(logger))
		}
		st := s.Stream("leaks")
		write := func(c context.Context, tx store.Tx) error {
			_, err := st.PublishTx(c, tx, []byte("abandoned"))
			return err
		}
		const rounds = 250
		for i := 0; i < rounds; i++ {
			// error
			require.Error(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
				require.NoError(t, write(c, tx))
				return errors.New("give up")
			}))
			// panic
			func() {
				defer func() { require.NotNil(t, recover()) }()
				_ = s.InTx(c, func(c context.Context, tx store.Tx) error {
					require.NoError(t, write(c, tx))
					panic("give up")
				})
			}()
			// cancel
			cc, cancel := context.WithCancel(c)
			require.ErrorIs(t, s.InTx(cc, func(c context.Context, tx store.Tx) error {
				require.NoError(t, write(c, tx))
				cancel()
				return nil
			}), context.Canceled)
			// dropped handle: the next Begin needs the connection back, which
			// only the cleanup can return.
			abandon(t, s, c)
			runtime.GC()
		}
		runtime.GC()

		// Every connection is back and idle; the writer slot is free at once.
		if pool != nil {
			require.Eventually(t, func() bool { runtime.GC(); return pool.Stat().AcquiredConns() == 0 },
				30*time.Second, 5*time.Millisecond)
		}
		quick, cancel := context.WithTimeout(c, 2*time.Second)
		defer cancel()
		_, err := st.Publish(quick, []byte("after"))
		require.NoError(t, err)
		var evs []store.Event
		require.Eventually(t, func() bool { // the horizon may lag a concurrent transaction for a moment
			evs, err = st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			return len(evs) > 0
		}, 30*time.Second, time.Millisecond)
		require.Len(t, evs, 1, "no abandoned event survived")

		require.Eventually(t, func() bool {
			runtime.GC()
			return strings.Count(logs.String(), "unreachable while open") == rounds
		}, 30*time.Second, 5*time.Millisecond, "every dropped transaction is reported")
	})
}

func TestConcurrentWritersNeverSeeBusy(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("busy")
		c := ctx(t)
		const writers, each = 8, 100
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					payload := []byte(fmt.Sprintf("%d-%d", w, i))
					var err error
					switch i % 3 {
					case 0:
						_, err = st.Publish(c, payload)
					case 1:
						err = s.InTx(c, func(c context.Context, tx store.Tx) error {
							_, err := st.PublishTx(c, tx, payload)
							return err
						})
					case 2:
						err = s.InTx(c, func(c context.Context, tx store.Tx) error {
							if _, err := st.PublishTx(c, tx, payload); err != nil {
								return err
							}
							return st.SaveOffsetTx(c, tx, fmt.Sprint("w", w), int64(i))
						})
					}
					if err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("writer error: %v", err)
		}
		var evs []store.Event
		require.Eventually(t, func() bool {
			var err error
			evs, err = st.ReadSince(c, 0, writers*each+1)
			require.NoError(t, err)
			return len(evs) == writers*each
		}, 30*time.Second, time.Millisecond)
		seen := map[string]bool{}
		for _, ev := range evs {
			seen[string(ev.Payload)] = true
		}
		assert.Len(t, seen, writers*each, "every write is present")
	})
}

func TestAdoptedTransactions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createOrdersTable(t, s)
		c := ctx(t)

		// begin starts a transaction the way the application would, with its
		// own driver, and returns it adopted plus its commit and rollback.
		var begin func() (store.Tx, func() error, func() error)
		switch e.name {
		case "pg":
			pool := e.pool(t)
			begin = func() (store.Tx, func() error, func() error) {
				ptx, err := pool.Begin(c)
				require.NoError(t, err)
				tx, err := s.AdoptPgx(ptx)
				require.NoError(t, err)
				return tx, func() error { return ptx.Commit(c) }, func() error { return ptx.Rollback(c) }
			}
		case "lite":
			db, err := sql.Open("sqlite3", "file:"+e.dsn+"?_pragma=busy_timeout(10000)")
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			begin = func() (store.Tx, func() error, func() error) {
				stx, err := db.BeginTx(c, nil)
				require.NoError(t, err)
				tx, err := s.AdoptSQL(stx)
				require.NoError(t, err)
				return tx, stx.Commit, stx.Rollback
			}
		}

		tx, _, rollback := begin()
		require.NoError(t, writeAll(c, s, tx, 10))
		require.NoError(t, rollback())
		assert.Equal(t, world{}, observe(t, s, 10))

		tx, commit, _ := begin()
		require.NoError(t, writeAll(c, s, tx, 11))
		require.NoError(t, commit())
		var w world
		require.Eventually(t, func() bool { w = observe(t, s, 11); return w.events == 1 }, 30*time.Second, time.Millisecond)
		assert.True(t, w.order)
		assert.NotZero(t, w.offset)
	})
}

// syncBuffer is a bytes.Buffer safe for the store's goroutines' log writes.
type syncBuffer = syncbuf.Buffer
