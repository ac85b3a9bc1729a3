package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestARedeliveredEventOnceCommittedHoldsNothingBack: once a member
// committed an event it had handed out again (Redeliver), nothing of that
// redelivery holds its partition back: the next Recv returns the next
// event at once. A member's partition waits only for a retry of Consume's
// loop (a failed handler: GroupOpts.RetryDelay), which hands out nothing
// of the partition, and commits nothing past the event, until the retry
// is due; Redeliver asks for no wait (and ends one). Probe of session
// 58's noticed item "a Redeliver delay survives a later Commit past it":
// with RetryDelay, SafetyPoll and LeaseTTL of an hour, a wait left behind
// by the redelivery would hold each Recv past its 30 s bound. Ten events
// of one partition, each received, redelivered, received again and
// committed (Commit, or CommitTx in a transaction that commits), then the
// next.
func TestARedeliveredEventOnceCommittedHoldsNothingBack(t *testing.T) {
	const events = 10
	eachEngineEachForm(t, []string{"Commit", "CommitTx"}, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("redeliver-delay")
		keys := make([]string, events)
		for i := range keys {
			keys[i] = "k"
		}
		offs := publishBatch(t, st, keys...)
		m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour, RetryDelay: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Leave(context.Background()) })
		recv := func(what string) store.Event {
			rc, cancel := context.WithTimeout(c, 30*time.Second)
			defer cancel()
			ev, err := m.Recv(rc)
			require.NoError(t, err, "%s: Recv held back", what)
			return ev
		}
		for i, off := range offs {
			ev := recv("the next event")
			require.Equal(t, off, ev.Offset, "event %d in order", i+1)
			require.NoError(t, m.Redeliver(ev))
			again := recv("the redelivered event")
			require.Equal(t, off, again.Offset, "event %d again, at once", i+1)
			if form == 0 {
				require.NoError(t, m.Commit(c, again))
			} else {
				require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error { return m.CommitTx(ctx, tx, again) }))
			}
		}
		gs, err := st.Group("g").Stats(c)
		require.NoError(t, err)
		require.Equal(t, int64(0), gs.Lag, "every event committed")
	})
}
