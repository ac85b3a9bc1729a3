package store

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLateClaimNamesItsCause: a claim that landed after its lease says
// why, as a lapsed renewal does (attack60b F2): a heartbeat failure while
// the claim ran names the failure, a wait for another connection's lock
// says the database was locked, and only a claim that neither failed
// nor waited advises raising LeaseTTL. A heartbeat failure from before
// the claim began is not its cause. (The renewal's side is forced in
// tests/groups_lapse_cause_test.go; a claim made late by a failure or a
// lock cannot be forced there without the heartbeats, which share the
// writer, taking the lock or the failure first.)
func TestLateClaimNamesItsCause(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	const ttl = time.Second
	start := at.Add(-2 * ttl)
	down := errors.New("dial tcp: connect: connection refused")
	for _, c := range []struct {
		name       string
		failedAt   time.Time // zero: no heartbeat failed
		lockWait   bool
		want, not  string
		wantsError bool
	}{
		{name: "slow", want: "statements are slow next to LeaseTTL (raise it)"},
		{name: "failed before the claim", failedAt: start.Add(-time.Millisecond), want: "statements are slow next to LeaseTTL (raise it)"},
		{name: "failed during the claim", failedAt: start.Add(ttl), want: "heartbeats failed meanwhile: the database was unreachable or locked", not: "raise it", wantsError: true},
		{name: "waited for a lock", lockWait: true, want: "it waited for another connection's lock: the database is locked", not: "raise it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			m := &GroupMember{g: &Group{handle: handle{s: &Store{clock: func() time.Time { return at }}, name: "s/g"}}, id: "m-1",
				opts: GroupOpts{LeaseTTL: ttl, Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
			if !c.failedAt.IsZero() {
				m.beatFailed.Store(&beatFailure{err: down, at: c.failedAt})
			}
			m.reportLateClaim(3, start, start.Add(ttl), c.lockWait)
			line := logs.String()
			require.Contains(t, line, "claim landed after its lease ran out; "+c.want)
			if c.not != "" {
				require.NotContains(t, line, c.not)
			}
			require.Equal(t, c.wantsError, bytes.Contains(logs.Bytes(), []byte("connection refused")), line)
		})
	}
}
