package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/internal/wake"
)

// TestForwarderLeavesOutOwnStreamWakes: on a store that opened its pool,
// the forwarder leaves out a stream's wake sent by one of the pool's
// connections (the store woke its subscribers in process when that write
// committed), and forwards everything else: the same wake from another
// connection (another process), and its own wakes of other topics. The
// forwarder handles NOTIFYs one by one in the order they were sent, so once
// a later one arrived, an earlier one left out never will.
func TestForwarderLeavesOutOwnStreamWakes(t *testing.T) {
	srv, err := pgtest.StartForTests()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := srv.NewDatabase(ctx)
	require.NoError(t, err)
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	defer s.Close()
	e := s.eng.(*pgEngine)
	require.NotNil(t, e.own)

	subA, subB, subQ := s.subscribe(streamTopic("a")), s.subscribe(streamTopic("b")), s.subscribe(queueTopic("q"))
	require.NoError(t, s.feedReady(ctx))
	other, err := pgx.Connect(ctx, dsn) // another process's connection
	require.NoError(t, err)
	defer other.Close(ctx)
	own := func(payload string) { require.NoError(t, pgdb.New(e.pool).Notify(ctx, payload)) }
	foreign := func(payload string) { require.NoError(t, pgdb.New(other).Notify(ctx, payload)) }
	woken := func(sub *wake.Sub) bool {
		select {
		case <-sub.C():
			return true
		case <-time.After(30 * time.Second):
			return false
		}
	}
	quiet := func(sub *wake.Sub) bool {
		select {
		case <-sub.C():
			return false
		default:
			return true
		}
	}

	// The forwarder wakes everyone once it listens: past a first wake it
	// forwarded, that is done; then empty every subscription.
	foreign(wake.EncodeWake(streamTopic("b")))
	require.True(t, woken(subB))
	for _, sub := range []*wake.Sub{subA, subB, subQ} {
		select {
		case <-sub.C():
		default:
		}
	}

	own(wake.EncodeWake(streamTopic("a")))
	own(wake.EncodeWake(queueTopic("q")))
	foreign(wake.EncodeWake(streamTopic("b")))
	require.True(t, woken(subQ), "a queue's wake from the store's own pool is forwarded")
	require.True(t, woken(subB), "a stream's wake from another connection is forwarded")
	require.True(t, quiet(subA), "a stream's wake from the store's own pool is left out")

	foreign(wake.EncodeWake(streamTopic("a")))
	require.True(t, woken(subA), "the same wake from another connection is forwarded")

	// The forwarder's own connection left the pool: its pid is not the
	// pool's any more.
	e.own.mu.Lock()
	n := len(e.own.pids)
	e.own.mu.Unlock()
	require.Equal(t, int(e.pool.Stat().TotalConns()), n, "the pool's connections, not the forwarder's")
}
