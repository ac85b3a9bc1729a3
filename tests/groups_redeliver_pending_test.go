package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// CommitTx(e1) in an adopted transaction the caller commits: e1 is
// committed in the database, but the store never sees an adopted
// transaction end. Redeliver promises ErrInvalidArgument for an event at or
// below the committed offset; before (review52a), it returned nil and the
// next Recv handed committed e1 out again.
func TestGroupRedeliverAfterAnAdoptedCommitTxIsInvalidArgument(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "rv-adopt", "k", "k", "k")
		tx, commit, _ := adoptedTx(t, e, s)
		require.NoError(t, m.CommitTx(c, tx, e1))
		require.NoError(t, commit())
		err := m.Redeliver(e1)
		t.Logf("%s: Redeliver(e1) after adopted CommitTx(e1) committed = %v", e.name, err)
		next, rerr := m.Recv(c)
		require.NoError(t, rerr)
		t.Logf("%s: next Recv = %d (e1 %d, e2 %d)", e.name, next.Offset, offs[0], offs[1])
		assert.ErrorIs(t, err, store.ErrInvalidArgument, "Redeliver of committed e1")
		assert.Equal(t, offs[1], next.Offset, "committed e1 handed out again")
	})
}

// CommitTx(e1) in a Tx, Redeliver(e1) before the Tx commits, then the Tx
// commits: Redeliver is ErrInvalidArgument, and Recv goes on with e2.
// Before (review52a), Redeliver returned nil and Recv handed committed e1
// out again.
func TestGroupRedeliverWhileACommitTxIsPendingIsInvalidArgument(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "rv-intx", "k", "k", "k")
		var rerr error
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			if err := m.CommitTx(c, tx, e1); err != nil {
				return err
			}
			rerr = m.Redeliver(e1)
			return nil
		}))
		assert.ErrorIs(t, rerr, store.ErrInvalidArgument, "Redeliver(e1) inside the tx after CommitTx(e1)")
		next, err := m.Recv(c)
		require.NoError(t, err)
		t.Logf("%s: next Recv after the tx committed = %d (e1 %d, e2 %d)", e.name, next.Offset, offs[0], offs[1])
		assert.Equal(t, offs[1], next.Offset, "committed e1 handed out again")
	})
}

// CommitTx(e1) in an adopted transaction the caller commits (e1 committed in
// the database; the member "goes on after ev"), then CommitTx(e2) in a Tx
// that rolls back: the rollback's rewind clears inTx and goes back to the
// member's own committed offset, before e1, so committed e1 is handed out
// again (and Redeliver(e1) is no longer refused).
func TestGroupAdoptedCommitTxThenARolledBackCommitTxKeepsE1Committed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "rv-adopt-rb", "k", "k", "k", "k")
		tx, commit, _ := adoptedTx(t, e, s)
		require.NoError(t, m.CommitTx(c, tx, e1))
		require.NoError(t, commit())
		e2, err := m.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[1], e2.Offset)
		boom := errors.New("handler failed")
		err = s.InTx(c, func(c context.Context, tx store.Tx) error {
			if err := m.CommitTx(c, tx, e2); err != nil {
				return err
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		next, err := m.Recv(c)
		require.NoError(t, err)
		rerr := m.Redeliver(e1)
		assert.ErrorIs(t, rerr, store.ErrInvalidArgument, "Redeliver(e1), committed by the adopted transaction")
		assert.Equal(t, offs[1], next.Offset, "committed e1 handed out again")
	})
}

// oneMemberAtItsFirstEvent publishes events of keys on a new stream, joins
// one member of a one-partition group (no lapse, no safety poll) and
// receives the first event; the member leaves when the test ends.
func oneMemberAtItsFirstEvent(t *testing.T, e *engineEnv, stream string, keys ...string) (*store.Store, *store.GroupMember, []int64, store.Event) {
	t.Helper()
	c := ctx(t)
	s := e.open(t)
	offs := publishBatch(t, s.Stream(stream), keys...)
	m, err := s.Stream(stream).Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	e1, err := m.Recv(c)
	require.NoError(t, err)
	require.Equal(t, offs[0], e1.Offset)
	return s, m, offs, e1
}
