package tests

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/store"
)

const lapseLine = "lease lapsed between heartbeats"

// waitLogLine waits for a line of logs holding substr and returns it.
func waitLogLine(t *testing.T, logs *signalledBuffer, substr string) string {
	t.Helper()
	for timeout := time.After(time.Minute); ; {
		if lines := logLines(logs.String(), substr); len(lines) > 0 {
			return lines[0]
		}
		select {
		case <-logs.wrote:
		case <-timeout:
			t.Fatalf("no line %q came: %s", substr, logs.String())
		}
	}
}

// TestGroupLapseAfterFailedHeartbeatsNamesTheFailure: a member whose
// heartbeats failed (the database down, or locked past the busy timeout)
// until its lease lapsed says, at the renewal that lands after it, that
// the heartbeats failed, with the last error, and does not advise raising
// LeaseTTL, which would not have helped. Forced: an application's trigger
// fails every renewal of the group's partitions; once one failure was
// logged the store's clock moves two leases on and the trigger goes, so
// the next renewal lands after the lease it renews ran out. Before, the
// line said "statements are slow next to LeaseTTL (raise it)" and named
// no cause (attack60b F2: a PostgreSQL outage of 4-5 s, LeaseTTL 3 s).
func TestGroupLapseAfterFailedHeartbeatsNamesTheFailure(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const ttl, parts = 300 * time.Millisecond, 2
		clock := newStandingClock()
		logs := signalledBuffer{wrote: make(chan struct{}, 1)}
		s := e.openHooked(t, func(string) {}, store.WithClock(clock.now), store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
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
		waitLogLine(t, &logs, "heartbeat failed")
		clock.advance(2 * ttl) // every lease the member took ran out
		if e.name == "pg" {
			e.execSQL(t, `DROP TRIGGER test_fail_renewal ON alkstore.group_partitions`)
		} else {
			e.execSQL(t, `DROP TRIGGER test_fail_renewal`)
		}
		line := waitLogLine(t, &logs, lapseLine)
		assert.Contains(t, line, "heartbeats failed meanwhile: the database was unreachable or locked")
		assert.Contains(t, line, "test: renewals fail", "the last failure is named")
		assert.Regexp(t, `failed=[1-9]`, line, "the failures are counted")
		assert.NotContains(t, line, "raise it", "a longer lease does not help a database that failed")
		require.NoError(t, m.Close())
	})
}

// TestGroupLapseOfSlowHeartbeatsSaysRaiseLeaseTTL: a renewal that
// succeeded but landed after its lease ran out (statements slow next to
// LeaseTTL) still advises raising it, and names no failure. Forced: the
// statement hook moves the store's clock two leases on inside one
// renewal.
func TestGroupLapseOfSlowHeartbeatsSaysRaiseLeaseTTL(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const ttl, parts = 300 * time.Millisecond, 2
		clock := newStandingClock()
		var armed atomic.Bool
		hook := func(name string) {
			if name == "RenewGroupPartitions" && armed.CompareAndSwap(true, false) {
				clock.advance(2 * ttl)
			}
		}
		logs := signalledBuffer{wrote: make(chan struct{}, 1)}
		s := e.openHooked(t, hook, store.WithClock(clock.now), store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		_, m, _ := joinRound(t, s, 0, parts, ttl)
		armed.Store(true)
		line := waitLogLine(t, &logs, lapseLine)
		assert.Contains(t, line, "statements are slow next to LeaseTTL (raise it)")
		assert.NotContains(t, line, "error=")
		assert.NotContains(t, logs.String(), "heartbeat failed")
		require.NoError(t, m.Close())
	})
}

// TestGroupLapseWhileAnotherProcessHoldsTheLockSaysSo: SQLite, another
// connection to the file (as another process) holds its write lock with
// BEGIN IMMEDIATE past the member's lease. The member's heartbeat waits
// for the lock and, once it is let go, lands after its lease: the warning
// says the database was locked, not that statements were slow (raise
// LeaseTTL), as the attacker's 15 s lock with a 10 s busy timeout had it
// (the heartbeat waited, then succeeded; attack60b F2, probe litelock).
// In "fails", the busy timeout is 100 ms, so the heartbeats fail with
// "database is locked" until the lock goes, and the warning names that
// error. In "waits", the busy timeout is an hour: the heartbeat waits
// until the lock goes; the test lets it go only once the heartbeat has
// been seen waiting in SQLite's busy handler (lockWait.retry) 200 ms after
// it was first seen there, past the 50 ms after which a wait is told.
// Either way the store's clock moves two leases on while the lock is held.
// SQLite only: the lock is SQLite's file lock (a PostgreSQL heartbeat
// waiting for a row lock is a slow statement, as
// TestGroupLapseOfSlowHeartbeatsSaysRaiseLeaseTTL covers).
func TestGroupLapseWhileAnotherProcessHoldsTheLockSaysSo(t *testing.T) {
	parallelTest(t)
	for _, form := range []string{"fails", "waits"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			labelled(t, func() { lapseUnderForeignLock(t, newEnv(t, "lite"), form == "fails") })
		})
	}
}

func lapseUnderForeignLock(t *testing.T, e *engineEnv, fails bool) {
	c := ctx(t)
	const ttl, parts = 300 * time.Millisecond, 2
	busy := time.Hour
	if fails {
		busy = 100 * time.Millisecond
	}
	// The other connection, opened before the store's busy timeout is set
	// (SetBusyTimeout sets it for every connection opened after).
	conn, err := e.sqlDB(t).Conn(c)
	require.NoError(t, err)
	defer conn.Close()
	defer litedriver.SetBusyTimeout(e.dsn, busy)()
	clock := newStandingClock()
	logs := signalledBuffer{wrote: make(chan struct{}, 1)}
	s, err := store.Open(c, e.dsn, store.WithClock(clock.now), store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	defer s.Close()
	_, m, off := joinRound(t, s, 0, parts, ttl)
	ev, err := m.Recv(c)
	require.NoError(t, err)
	require.Equal(t, off, ev.Offset)
	require.NoError(t, m.Commit(c, ev))

	_, err = conn.ExecContext(c, "BEGIN IMMEDIATE") // the file's write lock
	require.NoError(t, err)
	if fails {
		line := waitLogLine(t, &logs, "heartbeat failed")
		require.Contains(t, line, "database is locked")
	} else {
		waitFor(t, "a heartbeat waits for the file lock", func() bool {
			return goroutineOfWaits(t, "(*GroupMember).heartbeat+", "Xgo_busy_")
		})
		seen := time.Now()
		waitFor(t, "the heartbeat still waits 200 ms later", func() bool {
			return time.Since(seen) > 200*time.Millisecond && goroutineOfWaits(t, "(*GroupMember).heartbeat+", "(*lockWait).retry+")
		})
	}
	clock.advance(2 * ttl)
	_, err = conn.ExecContext(c, "ROLLBACK")
	require.NoError(t, err)

	line := waitLogLine(t, &logs, lapseLine)
	assert.NotContains(t, line, "raise it", "a longer lease does not help a database another process locked")
	if fails {
		assert.Contains(t, line, "heartbeats failed meanwhile")
		assert.Contains(t, line, "database is locked", "the last failure is named")
	} else {
		assert.Contains(t, line, "it waited for another connection's lock: the database is locked")
		assert.NotContains(t, line, "error=")
	}
	require.NoError(t, m.Close())
}
