package tests

import (
	"context"
	"database/sql"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

const (
	stallWarning  = "stream delivery is held back"
	stallRecovery = "stream delivery resumed"
)

// A long write transaction in ANOTHER database of the same server holds
// Postgres stream delivery back (transaction ids are cluster-wide): Stats
// names it and says how far delivery trails, the store logs exactly one
// warning naming it however many reads see the stall, and one line when
// the horizon moves again. On SQLite another database's writer holds
// nothing back: no lag, no holder, no log line.
func TestHorizonStallIsVisible(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		var logs syncBuffer
		s := e.open(t, store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			store.WithHorizonStallWarning(50*time.Millisecond))
		st := s.Stream("held")
		first, err := st.Publish(c, []byte("before"))
		require.NoError(t, err)
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{first}, offsets(evs), "nothing holds the horizon yet")

		// The other database's write transaction, held open.
		holderPID, holderDB, commit := otherDatabaseWriter(t, e)
		second, err := st.Publish(c, []byte("while held"))
		require.NoError(t, err)

		stats, err := s.Stats(c)
		require.NoError(t, err)
		hz := stats.Horizon
		assert.Equal(t, second, hz.Head)
		if e.name == "lite" {
			assert.Equal(t, second, hz.Settled)
			assert.Zero(t, hz.Lag)
			assert.Zero(t, hz.Waiting)
			assert.Nil(t, hz.Holder)
			evs, err := st.ReadSince(c, first, 10)
			require.NoError(t, err)
			assert.Equal(t, []int64{second}, offsets(evs), "delivered at once")
			commit()
			assert.NotContains(t, logs.String(), stallWarning)
			assert.NotContains(t, logs.String(), stallRecovery)
			return
		}
		assert.Equal(t, first, hz.Settled)
		assert.Equal(t, second-first, hz.Lag)
		require.NotNil(t, hz.Holder)
		assert.Equal(t, holderPID, hz.Holder.PID)
		assert.Equal(t, holderDB, hz.Holder.Database)
		assert.Equal(t, "idle in transaction", hz.Holder.State)
		assert.Positive(t, hz.Holder.Age)
		assert.False(t, hz.Holder.QueryStart.IsZero())

		// Reads see the stall until the warning is logged (after 50 ms of
		// standing still), and many more after it: one warning all the same.
		for !strings.Contains(logs.String(), stallWarning) {
			evs, err := st.ReadSince(c, first, 10)
			require.NoError(t, err)
			require.Empty(t, evs, "the event waits above the horizon")
			require.NoError(t, c.Err())
			time.Sleep(5 * time.Millisecond)
		}
		for range 20 {
			_, err := st.ReadSince(c, first, 10)
			require.NoError(t, err)
		}
		stats, err = s.Stats(c)
		require.NoError(t, err)
		assert.Positive(t, stats.Horizon.Waiting)
		warning := logLines(logs.String(), stallWarning)
		require.Len(t, warning, 1, logs.String())
		assert.Contains(t, warning[0], "level=WARN")
		assert.Contains(t, warning[0], "pid="+strconv.Itoa(holderPID))
		assert.Contains(t, warning[0], "database="+holderDB)
		assert.NotContains(t, logs.String(), stallRecovery)

		commit()
		for {
			evs, err := st.ReadSince(c, first, 10)
			require.NoError(t, err)
			if len(evs) > 0 {
				assert.Equal(t, []int64{second}, offsets(evs))
				break
			}
			require.NoError(t, c.Err())
			time.Sleep(5 * time.Millisecond)
		}
		for range 5 {
			_, err := st.ReadSince(c, first, 10)
			require.NoError(t, err)
		}
		stats, err = s.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, stats.Horizon.Lag)
		assert.Nil(t, stats.Horizon.Holder)
		assert.Len(t, logLines(logs.String(), stallWarning), 1, logs.String())
		recovery := logLines(logs.String(), stallRecovery)
		require.Len(t, recovery, 1, logs.String())
		assert.Contains(t, recovery[0], "level=INFO")
	})
}

// otherDatabaseWriter opens a write transaction in another database of the
// engine's server (another file on SQLite) and holds it until commit.
func otherDatabaseWriter(t *testing.T, e *engineEnv) (pid int, database string, commit func()) {
	t.Helper()
	c := ctx(t)
	if e.name == "lite" {
		db, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "other.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		tx, err := db.BeginTx(c, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(c, "CREATE TABLE app (x INTEGER)")
		require.NoError(t, err)
		return 0, "", func() { require.NoError(t, tx.Commit()) }
	}
	dsn, err := e.pg.NewDatabase(c) // the same server: its horizon is cluster-wide
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	conn, err := pgx.Connect(c, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.NoError(t, conn.QueryRow(c, "SELECT pg_backend_pid()").Scan(&pid))
	tx, err := conn.Begin(c)
	require.NoError(t, err)
	_, err = tx.Exec(c, "CREATE TABLE app (x integer)") // takes a transaction id
	require.NoError(t, err)
	return pid, strings.TrimPrefix(u.Path, "/"), func() { require.NoError(t, tx.Commit(c)) }
}

func logLines(logs, substr string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}
