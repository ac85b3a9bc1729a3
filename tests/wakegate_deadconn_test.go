package tests

import (
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
)

// TestTrailingWakeOutlivesDeadPooledConnections: the store's pooled
// connections are terminated (a server restart, a failover, an
// administrator's pg_terminate_backend) between a burst's last publish and
// its trailing wake. The pool hands out a connection used within the last
// second without pinging it, so the trailing NOTIFY met a dead one, failed
// and was dropped: a receiver in another process heard of the burst's
// last events only at its safety poll (the fourteenth wave's review: 6 of
// 15 rounds). The send hook terminates every backend of the database but
// the test's own and the other process's LISTEN connection just before the
// trailing NOTIFY goes out, waiting for each to exit; the NOTIFY must still
// reach the listener.
func TestTrailingWakeOutlivesDeadPooledConnections(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	a := e.open(t)
	for round := range 3 {
		name := "gate-dead-conns-" + string(rune('a'+round))
		topic := "s:" + name
		st := a.Stream(name)
		defer wake.SetGateWindow(topic, 200*time.Millisecond)()
		l := listenWakes(t, e, topic)
		admin, err := pgx.Connect(c, e.dsn)
		require.NoError(t, err)
		defer admin.Close(c)
		var once sync.Once
		killed := make(chan int64, 1)
		defer wake.SetSendHook(topic, func() {
			once.Do(func() {
				var n int64
				err := admin.QueryRow(c, `SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity
					WHERE datname = current_database() AND backend_type = 'client backend'
					  AND pid <> pg_backend_pid() AND pid <> $1`, l.conn.PgConn().PID()).Scan(&n)
				if err != nil {
					n = -1
				}
				killed <- n
			})
		})()

		_, err = st.Publish(c, []byte("p1")) // opens the window: notifies
		require.NoError(t, err)
		_, err = st.Publish(c, []byte("p2")) // inside it: owed a trailing wake
		require.NoError(t, err)
		require.True(t, l.next(t, 10*time.Second), "round %d: p1's NOTIFY", round)
		select {
		case n := <-killed:
			require.Positive(t, n, "round %d: no pooled connection terminated", round)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the trailing wake never went out", round)
		}
		require.True(t, l.next(t, 10*time.Second), "round %d: the trailing wake was lost to a dead pooled connection", round)
	}
}
