package tests

// Consumer groups: the promises a review found broken (issue 22), one test
// each, on both engines.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// TestGroupStoreCloseLetsTheEventInFlightCommit: closing the store while a
// Consume (or ConsumeTx) handler runs lets it finish and commit before the
// member leaves; another member never gets the key's events meanwhile.
// Before the fix the shutdown closed the member first: its partition went to
// the other member under the running handler, whose commit then failed.
func TestGroupStoreCloseLetsTheEventInFlightCommit(t *testing.T) {
	eachEngineEachForm(t, []string{"tx=false", "tx=true"}, func(t *testing.T, e *engineEnv, form int) {
		tx := form == 1
		c := ctx(t)
		sa, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		sb := e.open(t)
		createEffects(t, sb)
		st := sb.Stream("s")
		off1, err := st.PublishWithKey(c, "k", []byte("1"))
		require.NoError(t, err)
		off2, err := st.PublishWithKey(c, "k", []byte("2"))
		require.NoError(t, err)
		// b joins first (a SQLite join waits for the writer a's
		// transaction holds); "a…" < "b…": the partition is a's share.
		b, err := st.Group("g").Join(c, store.GroupOpts{Member: "b", Partitions: 1})
		require.NoError(t, err)
		inHandler, release := make(chan struct{}), make(chan struct{})
		var handled sync.Map
		opts := store.GroupOpts{Member: "a", Partitions: 1, LeaseTTL: time.Hour}
		consumed := make(chan error, 1)
		go func() {
			g := sa.Stream("s").Group("g")
			handle := func(ev store.Event) {
				if _, again := handled.LoadOrStore(ev.Offset, true); !again {
					close(inHandler)
				}
				<-release
			}
			if tx {
				consumed <- g.ConsumeTx(context.Background(), opts, func(ctx context.Context, tx store.Tx, ev store.Event) error {
					handle(ev)
					return writeEffect(ctx, tx, ev.Offset)
				})
				return
			}
			consumed <- g.Consume(context.Background(), opts, func(ctx context.Context, ev store.Event) error {
				handle(ev)
				return nil
			})
		}()
		<-inHandler // a handles off1 and holds the only partition
		closed := make(chan error, 1)
		go func() { closed <- sa.Close() }()
		// While a's handler runs, b gets nothing: the partition is a's
		// until a leaves (an hour's lease: only a leave hands it over).
		rc, cancel := context.WithTimeout(c, time.Second)
		ev, err := b.Recv(rc)
		cancel()
		require.Error(t, err, "b got event %d of key k while a's handler of %d still runs", ev.Offset, off1)
		close(release)
		require.ErrorIs(t, <-consumed, store.ErrClosed)
		require.NoError(t, <-closed)
		// a committed what it handled, then left: b goes on from off2.
		ev, err = b.Recv(c)
		require.NoError(t, err)
		assert.Equal(t, off2, ev.Offset, "a's event in flight was committed")
		if tx {
			assert.Equal(t, map[int64]int{off1: 1}, effects(t, sb))
		}
		require.NoError(t, b.Close())
	})
}

// TestGroupHandlerErrorWrappingClaimLostIsRetried: a handler's error that
// wraps ErrClaimLost (it settled a job whose claim lapsed, say) is a
// handler error like any other while the member still holds the partition:
// the event comes again, before the key's next one. Before the fix it was
// taken for the partition moving on: the event was skipped.
func TestGroupHandlerErrorWrappingClaimLostIsRetried(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("s")
		off1, err := st.PublishWithKey(c, "k", []byte("1"))
		require.NoError(t, err)
		off2, err := st.PublishWithKey(c, "k", []byte("2"))
		require.NoError(t, err)
		var mu sync.Mutex
		var order []int64
		reached2 := make(chan struct{})
		cc, cancel := context.WithCancel(c)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- st.Group("g").Consume(cc, store.GroupOpts{Partitions: 2, RetryDelay: time.Millisecond},
				func(ctx context.Context, ev store.Event) error {
					mu.Lock()
					defer mu.Unlock()
					order = append(order, ev.Offset)
					if ev.Offset == off2 && !slices.Contains(order[:len(order)-1], off2) {
						close(reached2)
					}
					if len(order) == 1 {
						return fmt.Errorf("settling a job in the handler: %w", store.ErrClaimLost)
					}
					return nil
				})
		}()
		<-reached2
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []int64{off1, off1, off2}, order, "the failed event comes again before the key's next one")
		gs, err := st.Group("g").Stats(c)
		require.NoError(t, err)
		assert.Equal(t, off2, gs.Assignment[store.KeyPartition("k", 2)].Committed)
	})
}

// TestGroupFailingEventHoldsUpOnlyItsPartition: an event whose handler
// fails waits RetryDelay (an hour here) with its partition; the member's
// other partitions go on meanwhile. Before the fix the whole member slept.
func TestGroupFailingEventHoldsUpOnlyItsPartition(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("s")
		poison, err := st.PublishWithKey(c, "bad", nil)
		require.NoError(t, err)
		pbad := store.KeyPartition("bad", 8)
		after, err := st.PublishWithKey(c, "bad", nil) // waits with the poison
		require.NoError(t, err)
		others := map[int64]bool{}
		for i := 0; len(others) < 10; i++ {
			k := fmt.Sprint("good", i)
			if store.KeyPartition(k, 8) == pbad {
				continue
			}
			off, err := st.PublishWithKey(c, k, nil)
			require.NoError(t, err)
			others[off] = true
		}
		var mu sync.Mutex
		handled := map[int64]int{}
		allOthers := make(chan struct{})
		left := len(others)
		rc, cancel := context.WithCancel(c)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- st.Group("g").Consume(rc, store.GroupOpts{Partitions: 8, RetryDelay: time.Hour}, func(ctx context.Context, ev store.Event) error {
				mu.Lock()
				defer mu.Unlock()
				handled[ev.Offset]++
				if others[ev.Offset] && handled[ev.Offset] == 1 {
					if left--; left == 0 {
						close(allOthers)
					}
				}
				if ev.Offset == poison {
					return errors.New("poison")
				}
				return nil
			})
		}()
		select {
		case <-allOthers:
		case <-time.After(20 * time.Second):
			t.Fatal("one failing event holds up every partition of its member")
		}
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 1, handled[poison], "retried an hour later, not before")
		assert.Zero(t, handled[after], "the key's next event waits for the failing one")
		gs, err := st.Group("g").Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(2), gs.Lag, "the poison and the event after it")
	})
}

// TestGroupSlowTxHandlerOutlivesItsLease: a ConsumeTx handler slower than
// the lease commits. On SQLite (its transaction holds the writer) and on a
// pool of one connection the heartbeat cannot renew the lease while the
// handler runs; here the store's clock jumps two leases during each
// attempt, so no heartbeat renews it on either engine. Nobody claimed the
// partition meanwhile (the token is the member's), so the commit is sound
// and renews the lease. Before the fix every attempt's CommitTx found the
// lease run out: ErrClaimLost, retried for ever.
func TestGroupSlowTxHandlerOutlivesItsLease(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		var shift atomic.Int64
		s := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }))
		createEffects(t, s)
		st := s.Stream("s")
		off1, err := st.PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		off2, err := st.PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		const lease = time.Minute // real heartbeats every 20s: none in this test
		attempts := map[int64]int{}
		second, retried := make(chan struct{}), make(chan struct{})
		rc, cancel := context.WithCancel(c)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- st.Group("g").ConsumeTx(rc, store.GroupOpts{Partitions: 1, LeaseTTL: lease, RetryDelay: time.Millisecond},
				func(ctx context.Context, tx store.Tx, ev store.Event) error {
					attempts[ev.Offset]++
					switch {
					case ev.Offset == off2:
						close(second)
						return errors.New("stop here")
					case attempts[ev.Offset] == 2:
						close(retried)
					}
					shift.Add(int64(2 * lease)) // slow business logic: two leases
					return writeEffect(ctx, tx, ev.Offset)
				})
		}()
		select {
		case <-second:
		case <-retried:
			t.Fatal("the slow handler's commit failed: its lease ran out though nobody claimed the partition")
		}
		cancel()
		require.NoError(t, <-done)
		assert.Equal(t, map[int64]int{off1: 1}, effects(t, s))
		gs, err := st.Group("g").Stats(c)
		require.NoError(t, err)
		assert.Equal(t, off1, gs.Assignment[0].Committed)
		assert.Equal(t, int64(1), gs.Assignment[0].Token, "claimed once: the commit renewed the lease")
	})
}

// TestGroupRecvAfterRolledBackCommitTxRedelivers: the README's Recv, InTx
// and CommitTx; when the transaction rolls back after CommitTx, the next
// Recv hands the same event out again, not the key's next one (committing
// that would skip the rolled-back event for ever). Before the fix Recv went
// on to the next event.
func TestGroupRecvAfterRolledBackCommitTxRedelivers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		createEffects(t, s)
		st := s.Stream("s")
		off1, err := st.PublishWithKey(c, "k", []byte("1"))
		require.NoError(t, err)
		off2, err := st.PublishWithKey(c, "k", []byte("2"))
		require.NoError(t, err)
		a, err := st.Group("g").Join(c, store.GroupOpts{Member: "a", Partitions: 2})
		require.NoError(t, err)
		defer a.Close()
		handle := func(ev store.Event, fail bool) error {
			return s.InTx(c, func(c context.Context, tx store.Tx) error {
				if err := writeEffect(c, tx, ev.Offset); err != nil {
					return err
				}
				if err := a.CommitTx(c, tx, ev); err != nil {
					return err
				}
				if fail {
					return errors.New("a business rule failed after the commit")
				}
				return nil
			})
		}
		ev, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off1, ev.Offset)
		require.Error(t, handle(ev, true)) // rolled back: the effect and the offset
		ev, err = a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off1, ev.Offset, "the rolled-back event comes again")
		require.NoError(t, handle(ev, false))
		ev, err = a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off2, ev.Offset)
		require.NoError(t, handle(ev, false))
		assert.Equal(t, map[int64]int{off1: 1, off2: 1}, effects(t, s))
	})
}

// TestGroupCommitRefusesUndeliveredEvents: Commit of an event the member
// did not deliver (another stream's, or a later event of its partition)
// is refused: it would move the partition past events nobody handled.
// Before the fix both were committed.
func TestGroupCommitRefusesUndeliveredEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("s")
		var offs []int64
		for i := range 3 {
			off, err := st.PublishWithKey(c, "k", []byte{byte(i)})
			require.NoError(t, err)
			offs = append(offs, off)
		}
		_, err := s.Stream("other").PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		a, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 2})
		require.NoError(t, err)
		defer a.Close()
		ev, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[0], ev.Offset)

		oevs, err := s.Stream("other").ReadSince(c, 0, 10)
		require.NoError(t, err)
		err = a.Commit(c, oevs[0])
		require.ErrorIs(t, err, store.ErrInvalidArgument, "another stream's event")
		assert.Contains(t, err.Error(), `"s/g"`)
		later, err := st.ReadSince(c, offs[1], 1) // offs[2]: same key, not delivered
		require.NoError(t, err)
		require.Equal(t, offs[2], later[0].Offset)
		require.ErrorIs(t, a.Commit(c, later[0]), store.ErrInvalidArgument, "an event not delivered yet")
		err = s.InTx(c, func(c context.Context, tx store.Tx) error { return a.CommitTx(c, tx, later[0]) })
		require.ErrorIs(t, err, store.ErrInvalidArgument)

		require.NoError(t, a.Commit(c, ev))
		gs, err := st.Group("g").Stats(c)
		require.NoError(t, err)
		assert.Equal(t, offs[0], gs.Assignment[store.KeyPartition("k", 2)].Committed)
		assert.Equal(t, int64(2), gs.Lag, "two events not handled yet")
	})
}

// TestGroupLeaveDuringRecvReleasesEverything: a Leave from another
// goroutine while Recv is claiming partitions leaves none owned by the
// departed member (the others would wait for its lease: an hour here).
// Before the fix the claims in flight went on after the leave released
// what it saw: most of the 1024 partitions stayed owned.
func TestGroupLeaveDuringRecvReleasesEverything(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		g := s.Stream("s").Group("g")
		mid := 0
		for try := 0; try < 5 && mid < 2; try++ {
			a, err := g.Join(c, store.GroupOpts{Member: fmt.Sprint("a", try), Partitions: 1024, LeaseTTL: time.Hour})
			require.NoError(t, err)
			recvDone := make(chan error, 1)
			go func() { _, err := a.Recv(c); recvDone <- err }()
			for len(a.Partitions()) < 10 { // the claims are under way
				runtime.Gosched()
			}
			if len(a.Partitions()) < 1024 {
				mid++ // (a claim may still land between this and the leave)
			}
			require.NoError(t, a.Leave(c))
			require.ErrorIs(t, <-recvDone, store.ErrClosed)
			gs, err := g.Stats(c)
			require.NoError(t, err)
			for _, p := range gs.Assignment {
				require.NotEqual(t, a.ID(), p.Owner, "partition %d still owned by the member that left", p.Partition)
			}
			assert.Empty(t, gs.Members)
		}
		require.Positive(t, mid, "no leave came while the claims were under way")
	})
}

// TestGroupUnkeyedEventsShareWhateverOtherStreamsDo: offsets are numbered
// across streams, so a stream published alternately with another has only
// even (or odd) offsets; its unkeyed events must still spread over the
// partitions. Before the fix (offset modulo the count) they all went to
// one partition of two: one member did all the work.
func TestGroupUnkeyedEventsShareWhateverOtherStreamsDo(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		orders, audit := s.Stream("orders"), s.Stream("audit")
		const n = 200
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			for range n {
				if _, err := orders.PublishTx(c, tx, []byte("o")); err != nil {
					return err
				}
				if _, err := audit.PublishTx(c, tx, []byte("a")); err != nil {
					return err
				}
			}
			return nil
		}))
		evs, err := orders.ReadSince(c, 0, n)
		require.NoError(t, err)
		require.Len(t, evs, n)
		for _, parts := range []int{2, 4} {
			count := make([]int, parts)
			for _, ev := range evs {
				count[store.GroupPartition(ev, parts)]++
			}
			for p, k := range count {
				assert.GreaterOrEqual(t, k, n/parts*6/10, "partition %d of %d has %d of %d unkeyed events: %v", p, parts, k, n, count)
			}
		}
		// And through members: two members of two partitions both work.
		g := orders.Group("g")
		a, err := g.Join(c, store.GroupOpts{Member: "a", Partitions: 2})
		require.NoError(t, err)
		defer a.Close()
		b, err := g.Join(c, store.GroupOpts{Member: "b"})
		require.NoError(t, err)
		defer b.Close()
		for _, m := range []*store.GroupMember{a, b} {
			rc, cancel := context.WithTimeout(c, 10*time.Second) // (before the fix: never)
			ev, err := m.Recv(rc)
			cancel()
			require.NoError(t, err, "member %s has nothing to do", m.ID())
			require.Equal(t, m.Partitions(), []int{store.GroupPartition(ev, 2)})
		}
	})
}

// TestClientHardStopCancelsGroupHandlers: a Stop whose ctx ends cancels a
// HandleGroup handler's context at once, whatever its Grace (an hour
// here), and returns an error matching ctx's; the event stays
// uncommitted. Before the fix the handler ran on until its Grace and Stop
// returned nil.
func TestClientHardStopCancelsGroupHandlers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		g := s.Stream("s").Group("g")
		_, err := s.Stream("s").Publish(c, []byte("one"))
		require.NoError(t, err)
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		started, returned := make(chan struct{}), make(chan struct{})
		var once, onceReturned sync.Once
		require.NoError(t, cl.HandleGroup(g, store.GroupOpts{Grace: time.Hour}, func(ctx context.Context, ev store.Event) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			defer onceReturned.Do(func() { close(returned) })
			return ctx.Err()
		}))
		require.NoError(t, cl.Start(c))
		<-started
		err = cl.StopAndCancel(c)
		require.ErrorIs(t, err, context.Canceled, "Stop says it cut a handler short")
		select {
		case <-returned:
		case <-time.After(20 * time.Second):
			t.Fatal("the group handler's context was not cancelled by the hard Stop")
		}
		st, err := g.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(1), st.Lag, "the cancelled event stays uncommitted")
	})
}

// TestGroupRefusalsSayWhat: a refused Consume has one "alkstore:" prefix
// (the join's, not the loop's around it); a partition count out of range
// says 0 takes the default; an empty stream name is said to be the
// stream's.
func TestGroupRefusalsSayWhat(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("s")
		m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 4})
		require.NoError(t, err)
		defer m.Close()
		err = st.Group("g").Consume(c, store.GroupOpts{Partitions: 8}, func(context.Context, store.Event) error { return nil })
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Equal(t, 1, strings.Count(err.Error(), "alkstore:"), "%v", err)
		assert.Contains(t, err.Error(), `group join "s/g"`)

		_, err = st.Group("g").Join(c, store.GroupOpts{Partitions: 1025})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "0 takes the default")

		_, err = s.Stream("").Group("g").Join(c, store.GroupOpts{})
		require.ErrorIs(t, err, store.ErrInvalidName)
		assert.Contains(t, err.Error(), "stream name")
	})
}

// TestGroupRedeliverAfterAFailureBeforeTheCommit: a handler whose
// transaction failed before its CommitTx hands the event back with
// Redeliver; the next Recv returns it, not the key's next event.
func TestGroupRedeliverAfterAFailureBeforeTheCommit(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("s")
		off1, err := st.PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		off2, err := st.PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		a, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 2})
		require.NoError(t, err)
		defer a.Close()
		ev, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off1, ev.Offset)
		require.NoError(t, a.Redeliver(ev)) // its handling failed
		again, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off1, again.Offset)
		require.NoError(t, a.Commit(c, again))
		next, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off2, next.Offset)
		later := next
		later.Offset++ // not delivered
		require.ErrorIs(t, a.Redeliver(later), store.ErrInvalidArgument)
	})
}
