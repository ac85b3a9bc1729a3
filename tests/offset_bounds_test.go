package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestOffsetPastTheNewestIsRefused: SaveOffset, SaveOffsetTx and
// ResetOffset refuse an offset above the newest offset of any event with
// ErrInvalidArgument naming the consumer and both offsets, and store
// nothing, so the events published next reach the consumer. Before
// session 59 they stored it: the consumer skipped every event published
// until the numbering passed it, with a lag of 0 (attack59 F1).
func TestOffsetPastTheNewestIsRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		head, err := st.Publish(c, []byte("e1"))
		require.NoError(t, err)
		past := head + 1000 // an operator's extra 0, a skip "to the end" by a wrong number
		err = st.ResetOffset(c, "billing", past)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		for _, want := range []string{`"orders"`, `consumer "billing"`, fmt.Sprint(past), fmt.Sprintf("past %d", head)} {
			assert.Contains(t, err.Error(), want)
		}
		require.ErrorIs(t, st.SaveOffset(c, "audit", past), store.ErrInvalidArgument)
		require.ErrorIs(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			return st.SaveOffsetTx(c, tx, "audit", past)
		}), store.ErrInvalidArgument)
		require.NoError(t, st.SaveOffset(c, "mailer", head))
		require.ErrorIs(t, st.SaveOffset(c, "mailer", past), store.ErrInvalidArgument, "a consumer with an offset too")
		var later []int64
		for range 3 {
			off, err := st.Publish(c, []byte("later"))
			require.NoError(t, err)
			later = append(later, off)
		}
		for consumer, want := range map[string][]int64{"billing": append([]int64{head}, later...), "audit": append([]int64{head}, later...), "mailer": later} {
			evs, err := st.ReadFromConsumer(c, consumer, 10)
			require.NoError(t, err)
			assert.Equal(t, want, offsets(evs), "%s: every event published after the refusal is delivered", consumer)
		}
		stats, err := s.Streams(c)
		require.NoError(t, err)
		require.Len(t, stats, 1)
		require.Len(t, stats[0].Consumers, 1, "the refusals made no consumer")
		assert.Equal(t, "mailer", stats[0].Consumers[0].Consumer)
		assert.EqualValues(t, 3, stats[0].Consumers[0].Lag)
	})
}

// TestOffsetAReaderGotIsNeverRefused: the bound is the newest offset
// drawn for any event, never lower than an offset a reader was given: a
// consumer saves (and an operator resets to) an offset whose events were
// trimmed since, and one between the stream's last event and another
// stream's newer events, which skips nothing of its stream. Lower and
// equal saves stay silent no-ops.
func TestOffsetAReaderGotIsNeverRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		var offs []int64
		for range 3 {
			off, err := st.Publish(c, []byte("x"))
			require.NoError(t, err)
			offs = append(offs, off)
		}
		evs, err := st.ReadFromConsumer(c, "slow", 10)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		n, err := st.TrimTo(c, offs[2]) // the stream's every event, the one "slow" read last included
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		require.NoError(t, st.SaveOffset(c, "slow", offs[2]), "an offset a reader got, its event trimmed since")
		require.NoError(t, st.SaveOffset(c, "slow", offs[2]), "an equal save: a no-op")
		require.NoError(t, st.SaveOffset(c, "slow", offs[0]), "a lower save: a no-op")
		require.NoError(t, st.ResetOffset(c, "other", offs[2]), "a reset to it, the stream known by its consumer")
		got, err := st.Offset(c, "slow")
		require.NoError(t, err)
		assert.Equal(t, offs[2], got)

		busy := s.Stream("busy")
		var newest int64
		for range 5 {
			newest, err = busy.Publish(c, []byte("y"))
			require.NoError(t, err)
		}
		require.NoError(t, st.ResetOffset(c, "slow", newest), "past orders' last event, not past the newest of any stream")
		next, err := st.Publish(c, []byte("next"))
		require.NoError(t, err)
		evs, err = st.ReadFromConsumer(c, "slow", 10)
		require.NoError(t, err)
		assert.Equal(t, []int64{next}, offsets(evs), "the stream's next event comes after it: nothing skipped")
		require.ErrorIs(t, st.ResetOffset(c, "slow", next+1), store.ErrInvalidArgument)

		// An offset stored before the bound existed, past it: a lower save
		// stays a silent no-op, as it always was.
		table := map[string]string{"pg": "alkstore.consumer_offsets", "lite": "alk_consumer_offsets"}[e.name]
		e.execSQL(t, fmt.Sprintf("UPDATE %s SET committed_offset = %d WHERE consumer = 'slow'", table, next+1000))
		require.NoError(t, st.SaveOffset(c, "slow", next), "a lower save")
		require.NoError(t, st.SaveOffset(c, "slow", next+500), "a lower save, though past the newest offset")
		got, err = st.Offset(c, "slow")
		require.NoError(t, err)
		assert.Equal(t, next+1000, got)
	})
}

// TestResetOffsetOfAnUnknownStreamIsNotFound: ResetOffset on a stream
// nothing was published to, configured or consumed fails with ErrNotFound
// and makes no consumer (before session 59 it made one for a stream that
// does not exist: an operator's rewind of a mistyped stream "worked" and
// rewound nothing, attack59 F1). A stream known by its settings alone, or
// by a consumer only, can be reset.
func TestResetOffsetOfAnUnknownStreamIsNotFound(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := s.Stream("orders").Publish(c, []byte("x"))
		require.NoError(t, err)
		err = s.Stream("orders-typo").ResetOffset(c, "billing", 0)
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Contains(t, err.Error(), `"orders-typo"`)
		streams, err := s.Streams(c)
		require.NoError(t, err)
		require.Len(t, streams, 1, "no consumer made for the unknown stream")
		assert.Equal(t, "orders", streams[0].Name)

		require.NoError(t, s.Stream("configured").Configure(c, store.StreamConfig{Compacted: true}))
		require.NoError(t, s.Stream("configured").ResetOffset(c, "billing", 0), "known by its settings")
		require.NoError(t, s.Stream("consumed").SaveOffset(c, "a", 0))
		require.NoError(t, s.Stream("consumed").ResetOffset(c, "b", 0), "known by a consumer")
		_, err = s.Stream("keyed").PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		_, err = s.Stream("keyed").TrimTo(c, 1<<40) // its only event goes; its key's row stays, headless
		require.NoError(t, err)
		require.NoError(t, s.Stream("keyed").ResetOffset(c, "b", 0), "known by its key's row")
	})
}
