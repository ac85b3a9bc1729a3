package tests

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestGroupClaimLandingAfterItsLeaseWarns: a claim that lands after its
// own lease ran out (statements slow next to LeaseTTL) holds nothing; the
// member says so, once a minute at most, counting the ones it held back,
// as it does for a lease that lapsed between heartbeats. Forced by the
// statement hook: each claim of the member's first step moves the store's
// clock a lease on before the claim returns, the fourth a minute on.
// Before, nothing was logged (only the heartbeats' lapse had a warning).
func TestGroupClaimLandingAfterItsLeaseWarns(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const ttl, parts = 150 * time.Millisecond, 4
		clock := newStandingClock()
		var armed atomic.Bool
		var claims atomic.Int32
		hook := func(name string) {
			if name != "ClaimGroupPartition" || !armed.Load() {
				return
			}
			if claims.Add(1) == parts {
				clock.advance(time.Minute)
				armed.Store(false) // the claims after the first step land in time
			} else {
				clock.advance(ttl)
			}
		}
		var logs syncBuffer
		s := e.openHooked(t, hook, store.WithClock(clock.now), store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		_, m, off := joinRound(t, s, 0, parts, ttl)
		armed.Store(true)
		rc, cancel := context.WithTimeout(c, 20*time.Second)
		defer cancel()
		ev, err := m.Recv(rc) // the late claims hold nothing; the member claims again, in time
		require.NoError(t, err)
		assert.Equal(t, off, ev.Offset)
		require.NoError(t, m.Commit(c, ev))
		require.NoError(t, m.Leave(c))

		require.Equal(t, int32(parts), claims.Load(), "the first step claimed every partition, each late")
		lines := logLines(logs.String(), "claim landed after its lease ran out")
		require.Len(t, lines, 2, "one line at the first late claim, one a minute later: %s", logs.String())
		assert.Contains(t, lines[0], "partition=0")
		assert.Contains(t, lines[0], "suppressed=0")
		assert.Contains(t, lines[0], "late=0s", "the clock moved a lease on: the claim landed as its lease ran out")
		assert.Contains(t, lines[1], "partition=3")
		assert.Contains(t, lines[1], "suppressed=2", "the second and third late claims were held back and counted")
		assert.Contains(t, lines[0], "group=s0/g")
		assert.Contains(t, lines[0], "member="+m.ID())
	})
}

// TestGroupHeartbeatFailuresLoggedOnceAMinute: a heartbeat that fails (a
// database that is down fails every beat of every member) is logged once
// a minute at most per member, and the next line counts the failures held
// back. Forced: an application's trigger fails every renewal of the
// group's partitions, and each beat's first statement (the member's row,
// which succeeds) moves the store's clock 10 s on through the statement
// hook, so consecutive failures are 10 s apart however fast the beats run:
// the first is logged, the next five are held back, the seventh is logged
// saying so. Before, each failure was logged.
func TestGroupHeartbeatFailuresLoggedOnceAMinute(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const ttl, parts = 300 * time.Millisecond, 2
		clock := newStandingClock()
		var armed atomic.Bool
		hook := func(name string) {
			if name == "UpsertGroupMember" && armed.Load() {
				clock.advance(10 * time.Second)
			}
		}
		logs := signalledBuffer{wrote: make(chan struct{}, 1)}
		s := e.openHooked(t, hook, store.WithClock(clock.now), store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		_, m, off := joinRound(t, s, 0, parts, ttl)
		ev, err := m.Recv(c) // the member holds its partitions: its renewals update their rows
		require.NoError(t, err)
		require.Equal(t, off, ev.Offset)
		require.NoError(t, m.Commit(c, ev))
		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION public.test_fail_renewal() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN RAISE EXCEPTION 'test: renewals fail'; END $$`,
				`CREATE TRIGGER test_fail_renewal BEFORE UPDATE ON alkstore.group_partitions FOR EACH ROW EXECUTE FUNCTION public.test_fail_renewal()`)
		} else {
			e.execSQL(t, `CREATE TRIGGER test_fail_renewal BEFORE UPDATE ON alk_group_partitions
					BEGIN SELECT RAISE(ABORT, 'test: renewals fail'); END`)
		}
		armed.Store(true)
		const msg = "heartbeat failed"
		for timeout := time.After(20 * time.Second); len(logLines(logs.String(), msg)) < 2; {
			select {
			case <-logs.wrote:
			case <-timeout:
				t.Fatalf("a second line never came: %s", logs.String())
			}
		}
		armed.Store(false)
		lines := logLines(logs.String(), msg)
		require.Len(t, lines, 2, "one line at the first failure, one a minute later: %s", logs.String())
		assert.Contains(t, lines[0], "suppressed=0")
		assert.Contains(t, lines[0], "test: renewals fail")
		assert.Contains(t, lines[0], "member="+m.ID())
		assert.Contains(t, lines[1], "suppressed=5", "the failures 10-50 s after the first were held back and counted")
		if e.name == "pg" {
			e.execSQL(t, `DROP TRIGGER test_fail_renewal ON alkstore.group_partitions`)
		} else {
			e.execSQL(t, `DROP TRIGGER test_fail_renewal`)
		}
		require.NoError(t, m.Close())
	})
}

// signalledBuffer is a syncBuffer that signals on wrote after each write.
type signalledBuffer struct {
	syncBuffer
	wrote chan struct{} // buffered, 1
}

func (b *signalledBuffer) Write(p []byte) (int, error) {
	n, err := b.syncBuffer.Write(p)
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}
