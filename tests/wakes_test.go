package tests

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Wakes and reads inside transactions.

// longPoll is a safety poll no test below waits for: a delivery well before
// it can only come from a wake.
const longPoll = time.Minute

// TestRecoveryAfterAnOutageIsPrompt: the forwarder's LISTEN connection is
// terminated and no new connection can be made for 2.6 s (long enough for
// an uncapped reconnect backoff to reach seconds). A publish and an enqueue
// from another store during the outage reach this store's receiver and
// worker within the documented bound after the database comes back (outage
// + at most 1 s), far before their safety poll.
//
// Postgres only: SQLite has no connection to lose; its watcher polls the
// file.
func TestRecoveryAfterAnOutageIsPrompt(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	var down atomic.Bool
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "outage-test"
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if down.Load() {
			return errors.New("outage: the database refuses connections")
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(c, cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := store.OpenPool(c, pool)
	require.NoError(t, err)
	defer s.Close()
	other := e.open(t)

	r, err := s.Stream("o").Subscribe(c, "c", store.SubscribeOpts{SafetyPoll: longPoll})
	require.NoError(t, err)
	defer r.Close()
	handled := make(chan int64, 4)
	runWork(t, s.Queue("o"), store.WorkOpts{PollInterval: longPoll}, func(_ context.Context, j *store.Job) error {
		handled <- j.ID
		return nil
	})
	live := publishN(t, other.Stream("o"), 1)
	require.Equal(t, live, recvN(t, r, 1), "live delivery through the forwarder")

	admin, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	defer admin.Close(c)

	// The outage: every connection of this store's pool dies (the LISTEN one
	// among them), and new ones fail until it ends.
	const outage = 2600 * time.Millisecond
	down.Store(true)
	var killed int
	require.NoError(t, admin.QueryRow(c, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'outage-test'`).Scan(&killed))
	require.NotZero(t, killed)
	gap := publishN(t, other.Stream("o"), 1) // commits while nobody listens
	job, err := other.Queue("o").Enqueue(c, nil, store.EnqueueOpts{})
	require.NoError(t, err)
	time.Sleep(outage)
	down.Store(false)
	back := time.Now()

	for { // a read that needed a new connection during the outage surfaces its error once
		ev, err := r.Recv(c)
		if err == nil {
			assert.Equal(t, gap[0], ev.Offset, "the reconnect wake re-reads what the outage hid")
			break
		}
		require.ErrorContains(t, err, "outage")
	}
	select {
	case id := <-handled:
		assert.Equal(t, job, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not wake after the outage")
	}
	took := time.Since(back)
	t.Logf("delivered %v after the database came back", took)
	assert.Less(t, took, time.Second, "recovery takes the outage plus at most a second")
}
