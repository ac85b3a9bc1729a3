package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

func init() {
	childVerbs["consume"] = consumeChild
}

// fullReceiver subscribes with a small buffer to a stream holding more
// events than the buffer, and waits until the reader has filled the buffer.
func fullReceiver(t *testing.T, s *store.Store) *store.EventReceiver {
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
func fullListener(t *testing.T, s *store.Store) *store.Listener {
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
func assertClosedForGood(t *testing.T, r *store.EventReceiver, l *store.Listener) {
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

// TestWriteInsideInTxOnSQLiteFailsFast (issue 11, defect 15): inside an
// InTx function, with the ctx it was handed, an auto-commit write, a Begin
// or a nested InTx on the same store works on Postgres (another
// connection) and on SQLite fails at once with ErrInvalidArgument, since
// the open transaction holds the writer slot: no waiting for itself until
// the deadline. Once the transaction ended, the same ctx writes again.
func TestWriteInsideInTxOnSQLiteFailsFast(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("nested")
		q := s.Queue("nested")
		c := ctx(t)
		lite := e.name == "lite"
		check := func(what string, err error) {
			t.Helper()
			if lite {
				require.ErrorIs(t, err, store.ErrInvalidArgument, what)
				assert.Contains(t, err.Error(), "writer slot", what)
			} else {
				require.NoError(t, err, what)
			}
		}
		var kept context.Context
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			kept = c
			_, err := st.PublishTx(c, tx, []byte("in tx"))
			require.NoError(t, err)

			// On SQLite the refused calls get the transaction's ctx already
			// cancelled: a call that waited for the writer slot (for itself)
			// would return the ctx's error at once instead of the refusal,
			// so the refusal is shown to come before any wait, however slow
			// the machine (no wall-clock bound). Postgres writes on another
			// connection with the live ctx.
			w := c
			if lite {
				var cancel context.CancelFunc
				w, cancel = context.WithCancel(c)
				cancel()
			}
			_, err = st.Publish(w, []byte("auto-commit"))
			check("auto-commit publish", err)
			_, err = q.Enqueue(w, []byte("job"), store.EnqueueOpts{})
			check("auto-commit enqueue", err)
			_, err = q.Claim(w, "w", 1, time.Minute)
			check("claim", err)
			check("notify", s.Notify(w, "ch", nil))

			inner, err := s.Begin(w)
			check("begin", err)
			if err == nil {
				_, err = st.PublishTx(c, inner, []byte("inner begin"))
				require.NoError(t, err)
				require.NoError(t, inner.Commit(c))
			}
			check("nested InTx", s.InTx(w, func(c context.Context, inner store.Tx) error {
				_, err := st.PublishTx(c, inner, []byte("inner InTx"))
				return err
			}))
			return nil
		}))

		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		want := 1 // the outer transaction's own publish
		if !lite {
			want = 4 // and the auto-commit one, the Begin'd one and the nested InTx's
		}
		assert.Len(t, evs, want)

		_, err = st.Publish(kept, []byte("after"))
		require.NoError(t, err, "the ctx InTx handed out writes again once its transaction ended")
	})
}

// TestInTxWhoseFunctionEndedTheTx (issue 11, defect 20): a function that
// commits its transaction itself and returns nil made InTx succeed; one that
// rolled it back itself gets an error saying nothing was committed.
func TestInTxWhoseFunctionEndedTheTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("self")
		c := ctx(t)
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			if _, err := st.PublishTx(c, tx, []byte("committed")); err != nil {
				return err
			}
			return tx.Commit(c)
		}), "fn committed: InTx reports success")

		err := s.InTx(c, func(c context.Context, tx store.Tx) error {
			if _, err := st.PublishTx(c, tx, []byte("rolled back")); err != nil {
				return err
			}
			return tx.Rollback(c)
		})
		require.ErrorIs(t, err, store.ErrTxDone)
		assert.Contains(t, err.Error(), "nothing was committed")

		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		assert.Equal(t, "committed", string(evs[0].Payload))
	})
}

// TestAutoSaveIntervalCoversOnlyFinishedEvents (issue 11, defect 22): with
// AutoSaveInterval too, an event counts as finished only when the caller asks
// for the next one (Recv or TryRecv); the event being handed out is never
// saved.
func TestAutoSaveIntervalCoversOnlyFinishedEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("interval")
		c := ctx(t)
		offs := publishN(t, st, 3)
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{AutoSaveInterval: time.Nanosecond})
		require.NoError(t, err)
		defer r.Close()
		saved := func() int64 {
			got, err := st.Offset(c, "c")
			require.NoError(t, err)
			return got
		}
		recvN(t, r, 1)
		assert.Zero(t, saved(), "the first event is still being processed")
		recvN(t, r, 1)
		assert.Equal(t, offs[0], saved(), "asking for the second finished the first")
		require.Eventually(t, func() bool { return r.Buffered() == 1 }, 10*time.Second, time.Millisecond)
		_, ok, err := r.TryRecv(c)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, offs[1], saved(), "TryRecv finishes the previous event too")
	})
}

// consumeChild subscribes to the stream "killed" with AutoSaveEvery: 1 and
// processes each event (a short piece of work, then its offset appended to
// the file record) until it processed the event at offset last. No fsync:
// a SIGKILL ends the process, not the kernel, so an append that returned is
// in the record; without one the record could only lose offsets (reported
// as lost events), never gain them.
func consumeChild(ctx context.Context, s *store.Store, record string, last int) int {
	f, err := os.OpenFile(record, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := s.Stream("killed").Subscribe(ctx, "consumer", store.SubscribeOpts{AutoSaveEvery: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		ev, err := r.Recv(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		time.Sleep(300 * time.Microsecond) // the work, before its result is recorded
		if _, err := fmt.Fprintf(f, "%d\n", ev.Offset); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if ev.Offset >= int64(last) {
			return 0
		}
	}
}

// TestKilledConsumerLosesNoEvents (issue 11, defect 22): a Subscribe
// consumer in another OS process, auto-saving every event, is killed with
// SIGKILL again and again while it works through a stream and restarted each
// time; every event was processed at least once. Auto-save used to save an
// event as it was handed out, so a kill before its processing was recorded
// lost it.
func TestKilledConsumerLosesNoEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("killed")
		c := ctx(t)
		const events, kills = 2000, 24
		var offs []int64
		for len(offs) < events {
			o, err := st.PublishMany(c, make([]store.Message, 500))
			require.NoError(t, err)
			offs = append(offs, o...)
		}
		last := offs[len(offs)-1]
		record := t.TempDir() + "/processed"
		processed := func() map[int64]int {
			data, err := os.ReadFile(record)
			if os.IsNotExist(err) {
				return nil
			}
			require.NoError(t, err)
			seen := map[int64]int{}
			for _, line := range bytes.Split(data, []byte("\n")) {
				if off, err := strconv.ParseInt(string(line), 10, 64); err == nil {
					seen[off]++
				}
			}
			return seen
		}

		killed := 0
		for {
			cmd := startChild(c, "consume", e.dsn, record, int(last))
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			if killed == kills {
				require.NoError(t, <-exited, "the last run works through to the end")
				break
			}
			// Kill it mid-stream: once it has processed something new, at a
			// random moment.
			before := len(processed())
			for len(processed()) == before && len(exited) == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Duration(rand.IntN(20_000)) * time.Microsecond)
			select {
			case err := <-exited:
				require.NoError(t, err, "the consumer failed on its own")
			default:
				require.NoError(t, cmd.Process.Kill()) // SIGKILL: no cleanup runs
				<-exited
				killed++
				continue
			}
			break // it finished before the kill
		}
		seen := processed()
		var lost []int64
		dups := 0
		for _, off := range offs {
			if seen[off] == 0 {
				lost = append(lost, off)
			}
			dups += max(seen[off]-1, 0)
		}
		t.Logf("%d kills, %d events processed twice", killed, dups)
		assert.GreaterOrEqual(t, killed, kills/2, "the consumer was killed mid-stream again and again")
		assert.Empty(t, lost, "events never processed")
	})
}
