package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/receiver"
	"github.com/alkstore/alkstore/store"
)

// fullReceiver subscribes with a small buffer to a stream holding more
// events than the buffer, and waits until the reader has filled the buffer.
func fullReceiver(t *testing.T, s *store.Store) *receiver.EventReceiver {
	t.Helper()
	c := ctx(t)
	const buffer = 4
	publishN(t, s.Stream("full"), 3*buffer)
	r, err := s.Stream("full").Subscribe(c, "c", store.SubscribeOpts{Buffer: buffer})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	require.Eventually(t, func() bool { return r.Buffered() == buffer }, 10*time.Second, time.Millisecond)
	return r
}

// fullListener listens and waits until three notifications are buffered.
func fullListener(t *testing.T, s *store.Store) *receiver.Listener {
	t.Helper()
	c := ctx(t)
	l, err := s.Listen(c, "full")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	for i := range 3 {
		require.NoError(t, s.Notify(c, "full", []byte(fmt.Sprint(i))))
	}
	require.Eventually(t, func() bool { return l.Buffered() == 3 }, 10*time.Second, time.Millisecond)
	return l
}

// assertClosedForGood: every Recv and TryRecv after the close reports
// ErrClosed, never one of the events still buffered (Go's select picks a
// ready case at random, so one call would not show it).
func assertClosedForGood(t *testing.T, r *receiver.EventReceiver, l *receiver.Listener) {
	t.Helper()
	c := ctx(t)
	for range 200 {
		ev, err := r.Recv(c)
		require.ErrorIs(t, err, store.ErrClosed, "Recv after close returned event %d", ev.Offset)
		ev, ok, err := r.TryRecv(c)
		require.ErrorIs(t, err, store.ErrClosed, "TryRecv after close returned event %d", ev.Offset)
		require.False(t, ok)
		n, err := l.Recv(c)
		require.ErrorIs(t, err, store.ErrClosed, "listener Recv after close returned %q", n.Payload)
	}
}

// TestClosedReceiverHandsOutNothingBuffered (issue 11, defect 6): once a
// receiver or listener closed, by its own Close or by the store closing,
// Recv and TryRecv return ErrClosed every time, though events are still
// buffered.
func TestClosedReceiverHandsOutNothingBuffered(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		t.Run("Close", func(t *testing.T) {
			s := e.open(t)
			r, l := fullReceiver(t, s), fullListener(t, s)
			require.NoError(t, r.Close())
			require.NoError(t, l.Close())
			assertClosedForGood(t, r, l)
		})
		t.Run("store closes", func(t *testing.T) {
			s := e.open(t)
			r, l := fullReceiver(t, s), fullListener(t, s)
			require.NoError(t, s.Close())
			assertClosedForGood(t, r, l)
		})
	})
}
