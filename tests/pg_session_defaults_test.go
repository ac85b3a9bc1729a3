package tests

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// alterDatabase runs ALTER DATABASE <e's database> SET <setting> on
// PostgreSQL (a setting a later session takes as its default); nothing on
// SQLite.
func alterDatabase(t *testing.T, e *engineEnv, setting string) {
	t.Helper()
	if e.name != "pg" {
		return
	}
	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx(t), e.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx(t), "ALTER DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+" SET "+setting)
	require.NoError(t, err)
}

// TestStoreTransactionsAreReadCommittedWhateverTheDatabaseDefault: the
// README's engine differences say a Postgres transaction of the store's is
// READ COMMITTED, and its compacted counter (LockCompactionHeadTx, then
// PublishWithKeyTx, in InTx) counts right under concurrency. A database
// (or role) whose default_transaction_isolation is REPEATABLE READ or
// SERIALIZABLE gave those transactions, and the auto-commit claims and
// settles of WorkTx, its default: 4 incrementers × 25 failed 39-54 of the
// 100 InTx calls with SQLSTATE 40001 (attack53b F8). Now every
// transaction the store begins says READ COMMITTED, and the pool Open
// makes sets the default on each connection. SQLite runs the same body
// (its transactions are serial; there is nothing to set).
func TestStoreTransactionsAreReadCommittedWhateverTheDatabaseDefault(t *testing.T) {
	forms := []string{"repeatable read", "serializable"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		alterDatabase(t, e, "default_transaction_isolation = '"+forms[form]+"'")
		c := ctx(t)
		s := e.open(t)

		if e.name == "pg" { // every way the store begins one
			var levels []string
			level := func(ctx context.Context, tx store.Tx) error {
				var l string
				err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&l)
				levels = append(levels, l)
				return err
			}
			require.NoError(t, s.InTx(c, level))
			tx, err := s.Begin(c)
			require.NoError(t, err)
			require.NoError(t, level(c, tx))
			require.NoError(t, tx.Rollback(c))
			assert.Equal(t, []string{"read committed", "read committed"}, levels)
		}

		// The README's counter, 4 incrementers × 25.
		st := s.Stream("counters")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true}))
		key := st.Key("page-visits")
		var wg sync.WaitGroup
		var failed atomic.Int64
		var first atomic.Value
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					err := s.InTx(c, func(ctx context.Context, tx store.Tx) error {
						cur, err := key.LockCompactionHeadTx(ctx, tx)
						if err != nil {
							return err
						}
						n := 0
						if cur != nil {
							n, _ = strconv.Atoi(string(cur.Payload))
						}
						_, err = st.PublishWithKeyTx(ctx, tx, "page-visits", []byte(strconv.Itoa(n+1)))
						return err
					})
					if err != nil {
						failed.Add(1)
						first.CompareAndSwap(nil, err.Error())
					}
				}
			}()
		}
		wg.Wait()
		h, err := key.CompactionHead(c)
		require.NoError(t, err)
		assert.Zero(t, failed.Load(), "InTx calls that failed of 100 (first: %v)", first.Load())
		assert.Equal(t, "100", string(h.Payload))

		// WorkTx: claims, handlers' transactions and settles, 2 workers × 4.
		const jobs = 100
		q := s.Queue("q")
		out := s.Stream("out")
		rx, err := out.Follow(c, 0, store.SubscribeOpts{})
		require.NoError(t, err)
		var handled atomic.Int64
		wctx, stop := context.WithCancel(c)
		werrs := make(chan error, 2)
		for range 2 {
			go func() {
				werrs <- q.WorkTx(wctx, store.WorkOpts{Concurrency: 4}, func(ctx context.Context, tx store.Tx, j *store.Job) error {
					handled.Add(1)
					_, err := out.PublishTx(ctx, tx, j.Payload)
					return err
				})
			}()
		}
		for i := range jobs {
			_, err := q.Enqueue(c, []byte(fmt.Sprint(i)), store.EnqueueOpts{})
			require.NoError(t, err, "enqueue %d", i)
		}
		for i := range jobs {
			_, err := rx.Recv(c)
			require.NoError(t, err, "%d of %d jobs' outputs committed", i, jobs)
		}
		stop()
		require.NoError(t, <-werrs)
		require.NoError(t, <-werrs)
		require.Equal(t, int64(jobs), handled.Load(), "handler calls: a failed claim, handler transaction or settle makes a job run again")
	})
}

// TestIdleSessionTimeoutEndsNoConnectionOfTheStore: with
// idle_session_timeout set on the database (or role), the server ended
// the store's idle LISTEN connection over and over (SQLSTATE 57P05,
// "listen connection lost"), and a notification sent while it reconnected
// was lost: a listener missed 0-2 of 8 (attack53b F9). The store's
// connections now set it to 0. The idle spells are the condition under
// test, not a wait for something to happen: each is over twice the
// timeout, after which the server has ended an idle session that kept the
// setting. On PostgreSQL the LISTEN connection's backend must be the same
// one after them; on both engines a listener gets every notification sent
// after an idle spell, and the pool's connections serve calls.
func TestIdleSessionTimeoutEndsNoConnectionOfTheStore(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		alterDatabase(t, e, "idle_session_timeout = '300ms'")
		c := ctx(t)
		s := e.open(t)
		l, err := s.Listen(c, "ch")
		require.NoError(t, err)
		var listenPID func() int32
		if e.name == "pg" {
			admin, err := pgx.Connect(c, e.pg.AdminDSN()) // another database: no idle_session_timeout
			require.NoError(t, err)
			t.Cleanup(func() { admin.Close(context.Background()) })
			u, err := url.Parse(e.dsn)
			require.NoError(t, err)
			db := strings.TrimPrefix(u.Path, "/")
			listenPID = func() int32 {
				rows, _ := admin.Query(c, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE '%LISTEN alkstore%'`, db)
				pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
				require.NoError(t, err)
				if len(pids) != 1 {
					rows, _ := admin.Query(c, `SELECT format('%s %s %s', pid, state, query) FROM pg_stat_activity WHERE datname = $1`, db)
					all, _ := pgx.CollectRows(rows, pgx.RowTo[string])
					t.Logf("sessions: %q", all)
				}
				require.Len(t, pids, 1, "backends that last ran LISTEN alkstore (the store's LISTEN connection)")
				return pids[0]
			}
		}
		var pid int32
		if listenPID != nil {
			pid = listenPID()
		}
		const spells = 4
		for i := range spells {
			time.Sleep(700 * time.Millisecond) // idle: over twice the timeout
			if listenPID != nil {
				require.Equal(t, pid, listenPID(), "the LISTEN connection's backend after idle spell %d", i+1)
			}
			_, err := s.Stream("s").Publish(c, []byte("x"))
			require.NoError(t, err, "publish after idle spell %d", i+1)
			require.NoError(t, s.Notify(c, "ch", []byte(fmt.Sprint(i))), "notify after idle spell %d", i+1)
		}
		for i := range spells {
			rc, cancel := context.WithTimeout(c, 10*time.Second)
			n, err := l.Recv(rc)
			cancel()
			require.NoError(t, err, "notification %d", i)
			require.Equal(t, fmt.Sprint(i), string(n.Payload), "notification %d", i)
		}
	})
}
