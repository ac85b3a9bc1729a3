package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A transaction that publishes to a stream and then reads it gets every
// committed event below its own, in order, with its own: its last offset,
// saved as a consumer's, skips nothing. On PostgreSQL the transaction holds
// an id once it has written, so its read cannot prove a horizon of its own
// (the store learned none: no read ran); the page used to stop at the
// horizon except for the transaction's own events and returned only those,
// and the saved offset skipped the five committed events for good. SQLite
// serializes writers, so its read always returned them.
func TestTxReadsTheEventsBelowItsOwn(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("ownread")
		committed := publishN(t, st, 5)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)
		own1, err := st.PublishTx(c, tx, []byte("own1"))
		require.NoError(t, err)
		own2, err := st.PublishTx(c, tx, []byte("own2"))
		require.NoError(t, err)
		all := append(append([]int64{}, committed...), own1, own2)

		evs, err := st.ReadFromConsumerTx(c, tx, "c", 100)
		require.NoError(t, err)
		assert.Equal(t, all, offsets(evs), "ReadFromConsumerTx after PublishTx")
		evs, err = st.ReadSinceTx(c, tx, 0, 100)
		require.NoError(t, err)
		assert.Equal(t, all, offsets(evs), "ReadSinceTx after PublishTx")
		// Paged: a short page is the first events in order, and reading on
		// from its end returns the rest.
		evs, err = st.ReadSinceTx(c, tx, 0, 3)
		require.NoError(t, err)
		require.Equal(t, all[:3], offsets(evs), "first page of 3")
		evs, err = st.ReadSinceTx(c, tx, evs[2].Offset, 100)
		require.NoError(t, err)
		assert.Equal(t, all[3:], offsets(evs), "the rest after the first page")

		require.NoError(t, st.SaveOffsetTx(c, tx, "c", own2))
		require.NoError(t, tx.Commit(c))
		// The consumer's offset is its last own event: nothing committed
		// waits below it unread.
		evs, err = st.ReadFromConsumer(c, "c", 100)
		require.NoError(t, err)
		assert.Empty(t, offsets(evs), "consumer after the commit")
		evs, err = st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		assert.Equal(t, all, offsets(evs), "every event after the commit")

		// Writing to another stream first: the read of this one is not
		// cut below its committed events by the other stream's own event
		// (on PostgreSQL it is cut at the horizon the store proved before
		// the transaction took its id; a read after the commits above
		// proved everything).
		tx2, err := s.Begin(c)
		require.NoError(t, err)
		defer tx2.Rollback(c)
		_, err = s.Stream("ownread-other").PublishTx(c, tx2, []byte("x"))
		require.NoError(t, err)
		evs, err = st.ReadSinceTx(c, tx2, 0, 100)
		require.NoError(t, err)
		assert.Equal(t, all, offsets(evs), "read of a stream the transaction did not write")
		require.NoError(t, tx2.Commit(c))
	})
}
