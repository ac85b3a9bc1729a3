package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

func TestPublishReadOrderAndPayloads(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("events")
		c := ctx(t)

		binary := make([]byte, 4096)
		_, _ = rand.Read(binary)
		binary[0], binary[100] = 0, 0
		payloads := [][]byte{[]byte("one"), binary, []byte("three")}
		var offs []int64
		for _, p := range payloads {
			off, err := st.Publish(c, p)
			require.NoError(t, err)
			offs = append(offs, off)
		}
		assert.Less(t, offs[0], offs[1])
		assert.Less(t, offs[1], offs[2])

		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		for i, ev := range evs {
			assert.Equal(t, offs[i], ev.Offset)
			assert.Equal(t, "events", ev.Stream)
			assert.True(t, bytes.Equal(payloads[i], ev.Payload), "payload %d must round-trip byte-exact", i)
			assert.Nil(t, ev.Key)
			assert.False(t, ev.CreatedAt.IsZero())
		}

		// Reads resume after an offset and respect the limit.
		evs, err = st.ReadSince(c, offs[0], 1)
		require.NoError(t, err)
		assert.Equal(t, []int64{offs[1]}, offsets(evs))

		// Streams are separate.
		other, err := s.Stream("other").ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, other)
	})
}

func TestKeysRoundTrip(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("keyed")
		c := ctx(t)

		_, err := st.Publish(c, []byte("a"))
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "user-1", []byte("b"))
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "", []byte("c"))
		require.ErrorIs(t, err, store.ErrInvalidName)

		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Len(t, evs, 2, "the rejected empty-key publish stored nothing")
		assert.Nil(t, evs[0].Key)
		require.NotNil(t, evs[1].Key)
		assert.Equal(t, "user-1", *evs[1].Key)
	})
}

func TestPublishMany(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("batch")
		c := ctx(t)
		k := "k"
		msgs := make([]store.Message, 300)
		for i := range msgs {
			msgs[i] = store.Message{Payload: []byte{byte(i), byte(i >> 8)}}
			if i%3 == 0 {
				msgs[i].Key = &k
			}
		}
		offs, err := st.PublishMany(c, msgs)
		require.NoError(t, err)
		require.Len(t, offs, len(msgs))
		evs, err := st.ReadSince(c, 0, 1000)
		require.NoError(t, err)
		require.Equal(t, offs, offsets(evs), "offsets follow input order")
		for i, ev := range evs {
			assert.Equal(t, msgs[i].Payload, ev.Payload)
			assert.Equal(t, msgs[i].Key != nil, ev.Key != nil)
		}

		// One bad message rejects the whole batch before any I/O.
		empty := ""
		_, err = st.PublishMany(c, []store.Message{{Payload: []byte("ok")}, {Key: &empty}})
		require.ErrorIs(t, err, store.ErrInvalidName)
		evs, err = st.ReadSince(c, offs[len(offs)-1], 10)
		require.NoError(t, err)
		assert.Empty(t, evs)

		none, err := st.PublishMany(c, nil)
		require.NoError(t, err)
		assert.Empty(t, none)
	})
}

func TestReadLimitZeroDoesNoIO(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("events")
		c := ctx(t)
		_, err := st.Publish(c, []byte("x"))
		require.NoError(t, err)
		for _, limit := range []int{0, -1, -1 << 31} {
			evs, err := st.ReadSince(c, 0, limit)
			require.NoError(t, err)
			assert.NotNil(t, evs)
			assert.Empty(t, evs)
			evs, err = st.ReadFromConsumer(c, "c", limit)
			require.NoError(t, err)
			assert.Empty(t, evs)
		}
		// No I/O: a cancelled context does not matter.
		cancelled, cancel := context.WithCancel(c)
		cancel()
		evs, err := st.ReadSince(cancelled, 0, 0)
		require.NoError(t, err)
		assert.Empty(t, evs)
	})
}

func TestConsumerOffsets(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("events")
		c := ctx(t)
		var offs []int64
		for i := 0; i < 5; i++ {
			off, err := st.Publish(c, []byte{byte(i)})
			require.NoError(t, err)
			offs = append(offs, off)
		}

		got, err := st.Offset(c, "unknown")
		require.NoError(t, err)
		assert.Zero(t, got)

		evs, err := st.ReadFromConsumer(c, "worker", 2)
		require.NoError(t, err)
		assert.Equal(t, offs[:2], offsets(evs), "an unknown consumer reads from the start")

		require.NoError(t, st.SaveOffset(c, "worker", offs[2]))
		require.NoError(t, st.SaveOffset(c, "worker", offs[0]), "a lower save is a silent no-op")
		got, err = st.Offset(c, "worker")
		require.NoError(t, err)
		assert.Equal(t, offs[2], got)

		evs, err = st.ReadFromConsumer(c, "worker", 10)
		require.NoError(t, err)
		assert.Equal(t, offs[3:], offsets(evs))

		// Consumers are independent, and per stream.
		got, err = st.Offset(c, "other")
		require.NoError(t, err)
		assert.Zero(t, got)
		got, err = s.Stream("elsewhere").Offset(c, "worker")
		require.NoError(t, err)
		assert.Zero(t, got)

		require.ErrorIs(t, st.SaveOffset(c, "", 1), store.ErrInvalidName)
		require.ErrorIs(t, st.SaveOffset(c, "worker", -1), store.ErrInvalidArgument)
		_, err = st.ReadFromConsumer(c, "", 1)
		require.ErrorIs(t, err, store.ErrInvalidName)
	})
}

func TestTrimTo(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("events")
		c := ctx(t)
		var offs []int64
		for i := 0; i < 6; i++ {
			off, err := st.Publish(c, []byte{byte(i)})
			require.NoError(t, err)
			offs = append(offs, off)
		}
		_, err := s.Stream("untouched").Publish(c, []byte("keep"))
		require.NoError(t, err)
		require.NoError(t, st.SaveOffset(c, "slow", offs[0]))

		n, err := st.TrimTo(c, -5)
		require.NoError(t, err)
		assert.Zero(t, n, "a negative horizon deletes nothing")

		n, err = st.TrimTo(c, offs[2])
		require.NoError(t, err)
		assert.EqualValues(t, 3, n, "the boundary is inclusive")
		n, err = st.TrimTo(c, offs[2])
		require.NoError(t, err)
		assert.Zero(t, n, "trimming again deletes nothing")

		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, offs[3:], offsets(evs), "reads resume at the first survivor; offsets are not renumbered")

		// A saved offset below the horizon stays valid.
		evs, err = st.ReadFromConsumer(c, "slow", 10)
		require.NoError(t, err)
		assert.Equal(t, offs[3:], offsets(evs))

		// Trimming everything leaves the offset sequence going up.
		_, err = st.TrimTo(c, offs[5])
		require.NoError(t, err)
		next, err := st.Publish(c, []byte("after"))
		require.NoError(t, err)
		assert.Greater(t, next, offs[5])

		other, err := s.Stream("untouched").ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Len(t, other, 1, "trim touches one stream only")
	})
}

func TestNamesValidatedBeforeIO(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		long := string(bytes.Repeat([]byte("x"), 256))
		cases := map[string]error{
			"":             store.ErrInvalidName,
			long:           store.ErrInvalidName,
			"bad\xffutf8":  store.ErrInvalidName,
			"nul\x00name":  store.ErrInvalidName,
			"tab\tname":    store.ErrInvalidName,
			"__alk_outbox": store.ErrReservedName,
			"__alkthing":   store.ErrReservedName,
		}
		before, err := s.Stream("good").Publish(c, []byte("x"))
		require.NoError(t, err)
		for name, want := range cases {
			st := s.Stream(name)
			_, err := st.Publish(c, []byte("x"))
			require.ErrorIs(t, err, want, "publish %q", name)
			var opErr *store.OpError
			require.True(t, errors.As(err, &opErr))
			assert.Equal(t, "publish", opErr.Op)
			_, err = st.PublishWithKey(c, "k", []byte("x"))
			require.ErrorIs(t, err, want)
			_, err = st.PublishMany(c, []store.Message{{Payload: []byte("x")}})
			require.ErrorIs(t, err, want)
			_, err = st.ReadSince(c, 0, 10)
			require.ErrorIs(t, err, want)
			_, err = st.ReadFromConsumer(c, "c", 10)
			require.ErrorIs(t, err, want)
			require.ErrorIs(t, st.SaveOffset(c, "c", 1), want)
			_, err = st.Offset(c, "c")
			require.ErrorIs(t, err, want)
			_, err = st.TrimTo(c, 10)
			require.ErrorIs(t, err, want)
		}
		// No rejected call reached the database: not even an offset was drawn.
		after, err := s.Stream("good").Publish(c, []byte("x"))
		require.NoError(t, err)
		assert.Equal(t, before+1, after)

		ok255 := string(bytes.Repeat([]byte("é"), 127)) + "x" // 255 bytes of UTF-8
		_, err = s.Stream(ok255).Publish(c, []byte("x"))
		require.NoError(t, err)
		_, err = s.Stream("ünïcödé stream/with:punctuation").Publish(c, []byte("x"))
		require.NoError(t, err)
	})
}
