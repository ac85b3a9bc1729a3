package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/store"
)

// A receiver held back by an open transaction (PostgreSQL's settled
// horizon, docs/design/stream-horizon.md) gets the held events once that
// transaction ends, whatever ends it and whether or not it published: a
// rollback, a transaction of another store that wrote no event, a killed
// process. Nothing announces such an end, and the receivers' safety poll
// is an hour here, so a delivery proves the receiver noticed by itself.
// On SQLite the holder holds the writer instead, so the later publish waits
// for it and its commit wakes the receiver: the same body holds there.

// heldRelease runs the shared body: hold begins a write transaction that
// holds the horizon (on PostgreSQL) or the writer (on SQLite) and returns
// what ends it; an event published after it must stay undelivered while it
// runs and be delivered within seconds after it ended.
func heldRelease(t *testing.T, s *store.Store, name string, hold func() (end func())) {
	t.Helper()
	r, err := s.Stream(name).Follow(ctx(t), 0, store.SubscribeOpts{SafetyPoll: time.Hour})
	require.NoError(t, err)
	defer r.Close()
	heldReleaseTo(t, s, name, func(d time.Duration) (store.Event, bool) { return recvIn(t, r, d) }, hold)
}

// heldReleaseTo is heldRelease's body for any reader of the stream: recv
// returns its next event within d, or false.
func heldReleaseTo(t *testing.T, s *store.Store, name string, recv func(d time.Duration) (store.Event, bool), hold func() (end func())) {
	t.Helper()
	c := ctx(t)
	st := s.Stream(name)
	// Once "before" is handed out, the receiver reads and parks as usual.
	before, err := st.Publish(c, []byte("before"))
	require.NoError(t, err)
	ev, ok := recv(30 * time.Second)
	require.True(t, ok, "the wake of a plain publish")
	require.Equal(t, before, ev.Offset)

	end := hold()
	published := make(chan int64, 1)
	go func() { // returns at once on PostgreSQL; waits for the writer on SQLite
		off, err := st.Publish(c, []byte("after"))
		assert.NoError(t, err)
		published <- off
	}()
	// One call waits through the hold and the end: a new call would read
	// again by itself (a group member reads first thing in Recv).
	type got struct {
		ev store.Event
		ok bool
	}
	res := make(chan got, 1)
	go func() {
		ev, ok := recv(30 * time.Second)
		res <- got{ev, ok}
	}()
	select {
	case g := <-res:
		t.Fatalf("an event behind an open transaction was delivered (%v, %d)", g.ok, g.ev.Offset)
	case <-time.After(300 * time.Millisecond):
	}
	end()
	select {
	case g := <-res:
		require.True(t, g.ok, "the held event was not delivered after the transaction holding it ended")
		require.Equal(t, <-published, g.ev.Offset)
	case <-time.After(10 * time.Second):
		t.Fatal("the held event was not delivered within 10 s after the transaction holding it ended")
	}
}

// recvIn reports whether r hands out an event within d (it may run on
// another goroutine: no require).
func recvIn(t *testing.T, r *store.EventReceiver, d time.Duration) (store.Event, bool) {
	c, cancel := context.WithTimeout(ctx(t), d)
	defer cancel()
	ev, err := r.Recv(c)
	assert.True(t, err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrClosed), "Recv: %v", err)
	return ev, err == nil
}

// TestHeldEventsFollowTheHoldersRollback: the holder is a Tx of the same
// store that published and rolls back.
func TestHeldEventsFollowTheHoldersRollback(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		heldRelease(t, s, "held-rollback", func() func() {
			tx, err := s.Begin(ctx(t))
			require.NoError(t, err)
			_, err = s.Stream("held-rollback").PublishTx(ctx(t), tx, []byte("rolled back"))
			require.NoError(t, err)
			return func() { require.NoError(t, tx.Rollback(ctx(t))) }
		})
	})
}

// TestHeldEventsFollowAnUnrelatedCommit: the holder is another store's Tx
// (another process, as far as this store can tell) that enqueues a job,
// publishes nothing, and commits.
func TestHeldEventsFollowAnUnrelatedCommit(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s, other := e.open(t), e.open(t)
		heldRelease(t, s, "held-unrelated", func() func() {
			tx, err := other.Begin(ctx(t))
			require.NoError(t, err)
			_, err = other.Queue("held-unrelated").EnqueueTx(ctx(t), tx, []byte("job"), store.EnqueueOpts{})
			require.NoError(t, err)
			return func() { require.NoError(t, tx.Commit(ctx(t))) }
		})
	})
}

func init() { childVerbs["holdtx"] = holdTxChild }

// holdTxChild begins a transaction, publishes to stream name in it, prints
// the offset and holds the transaction open until killed.
func holdTxChild(ctx context.Context, s *store.Store, name string, _ int) int {
	tx, err := s.Begin(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	off, err := s.Stream(name).PublishTx(ctx, tx, []byte("child"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(off)
	select {}
}

// TestHeldEventsFollowTheHoldersDeath: the holder is another process's
// transaction, and the process is SIGKILLed.
func TestHeldEventsFollowTheHoldersDeath(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		heldRelease(t, s, "held-killed", func() func() {
			cmd := startChild(ctx(t), "holdtx", e.dsn, "held-killed", 0)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			line, err := bufio.NewReader(out).ReadString('\n') // its transaction is open
			require.NoError(t, err, "the child did not publish")
			var off int64
			_, err = fmt.Sscan(line, &off)
			require.NoError(t, err)
			return func() {
				require.NoError(t, cmd.Process.Kill())
				_ = cmd.Wait()
			}
		})
	})
}

// TestHeldEventsReachAGroupMemberAfterTheHoldersRollback: a consumer
// group's member reads through the settled horizon as a receiver does.
// Its lease is an hour, so no rebalance step reads for it meanwhile.
func TestHeldEventsReachAGroupMemberAfterTheHoldersRollback(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		name := "held-group"
		m, err := s.Stream(name).Group("g").Join(ctx(t), store.GroupOpts{Member: "a", Partitions: 1,
			SafetyPoll: time.Hour, LeaseTTL: time.Hour})
		require.NoError(t, err)
		defer m.Close()
		recv := func(d time.Duration) (store.Event, bool) {
			c, cancel := context.WithTimeout(ctx(t), d)
			defer cancel()
			ev, err := m.Recv(c)
			assert.True(t, err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrClosed), "Recv: %v", err)
			return ev, err == nil
		}
		heldReleaseTo(t, s, name, recv, func() func() {
			tx, err := s.Begin(ctx(t))
			require.NoError(t, err)
			_, err = s.Stream(name).PublishTx(ctx(t), tx, []byte("rolled back"))
			require.NoError(t, err)
			return func() { require.NoError(t, tx.Rollback(ctx(t))) }
		})
	})
}

// TestHeldReceiversIgnoreTheEndsOfLaterTxs: receivers held back by another
// connection's transaction re-read when a Tx of their store ends only if
// that Tx began before their hold was seen: a later one cannot be what
// holds them. Before, every Tx end of the store woke every held receiver,
// and an application's unrelated transactions ran 20-30x slower (week 33's
// review). Counted, not timed (wake.CountHeld): the releases by the ends of
// 200 unrelated Txs are exactly none, and the end of a Tx begun before the
// hold releases each receiver exactly once. PostgreSQL only: SQLite has no
// settled horizon (a transaction holds the writer, so the unrelated Txs
// would wait for it instead).
func TestHeldReceiversIgnoreTheEndsOfLaterTxs(t *testing.T) {
	e := newEnv(t, "pg")
	s := e.open(t)
	c := ctx(t)
	holder, err := e.pool(t).Begin(c) // another process's transaction, as far as s can tell
	require.NoError(t, err)
	defer holder.Rollback(c)
	_, err = holder.Exec(c, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	early, err := s.Begin(c) // begun before any receiver reads
	require.NoError(t, err)
	defer early.Rollback(c)

	const n = 6
	counts := make([]*wake.HeldCounts, n)
	offs := make([]int64, n)
	rs := make([]*store.EventReceiver, n)
	for i := range n {
		name := fmt.Sprint("held-churn-", i)
		var stop func()
		counts[i], stop = wake.CountHeld("s:" + name)
		defer stop()
		offs[i], err = s.Stream(name).Publish(c, []byte("held")) // above the horizon the holder holds
		require.NoError(t, err)
		rs[i], err = s.Stream(name).Follow(c, 0, store.SubscribeOpts{SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer rs[i].Close()
	}
	for i := range n { // each has read, been held and waits on the backoff
		require.Eventually(t, func() bool { return counts[i].Waits.Load() > 0 }, 30*time.Second, time.Millisecond)
	}

	for range 200 {
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			_, err := tx.Exec(c, "SELECT 1")
			return err
		}))
	}
	for i := range n {
		require.Zero(t, counts[i].Releases.Load(), "receiver %d re-read when a Tx begun after its hold ended", i)
	}

	require.NoError(t, early.Rollback(c)) // began before the hold: may be the holder
	for i := range n {
		require.Eventually(t, func() bool { return counts[i].Releases.Load() > 0 }, 30*time.Second, time.Millisecond,
			"receiver %d did not re-read when a Tx begun before its hold ended", i)
	}
	for i := range n {
		require.Equal(t, int64(1), counts[i].Releases.Load(), "receiver %d: one end, one release", i)
	}

	require.NoError(t, holder.Rollback(c))
	for i := range n { // on the backoff: nothing of the store announces that end
		ev, ok := recvIn(t, rs[i], 30*time.Second)
		require.True(t, ok, "receiver %d", i)
		require.Equal(t, offs[i], ev.Offset)
	}
}
