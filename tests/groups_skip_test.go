package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A member releasing or committing a partition on its own (a Leave, a
// stopped Consume, a rebalance) must commit only what a handler saw and
// committed (or finished), never a read cursor past events it did not hand
// out, or past events it handed out that were not committed: the next
// owner would start after them, and nobody would ever handle them.

// onceHook runs a function once, armed, right after the next statement of
// a name of the hooked store ended ("ReadEvents": any read of a stream).
type onceHook struct {
	mu sync.Mutex
	fn map[string]func()
}

func (h *onceHook) arm(name string, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fn == nil {
		h.fn = map[string]func(){}
	}
	h.fn[name] = fn
}

func (h *onceHook) hook(name string) {
	if strings.HasPrefix(name, "ReadEvents") {
		name = "ReadEvents"
	}
	h.mu.Lock()
	fn := h.fn[name]
	delete(h.fn, name)
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// partKey is a key whose events belong to partition p of parts.
func partKey(p, parts int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("k%d", i); store.KeyPartition(k, parts) == p {
			return k
		}
	}
}

// twoParts is the set-up of the tests of a group of two partitions below:
// a store on a standing clock (only the test moves leases), hooked when
// hook is not nil; the members' options (a lease of lapseTTL, an hour, and
// no safety poll within a test); a key of each partition.
type twoParts struct {
	clock  *standingClock
	s      *store.Store
	opts   store.GroupOpts
	k0, k1 string // of partitions 0 and 1
}

func newTwoParts(t *testing.T, e *engineEnv, hook stmtHook) twoParts {
	t.Helper()
	const parts = 2
	tp := twoParts{clock: newStandingClock(), opts: store.GroupOpts{Partitions: parts, LeaseTTL: lapseTTL, SafetyPoll: time.Hour},
		k0: partKey(0, parts), k1: partKey(1, parts)}
	if hook == nil {
		tp.s = e.open(t, store.WithClock(tp.clock.now))
	} else {
		tp.s = e.openHooked(t, hook, store.WithClock(tp.clock.now))
	}
	return tp
}

// join is a new member of g with the set-up's options.
func (tp twoParts) join(t *testing.T, g *store.Group) *store.GroupMember {
	t.Helper()
	m, err := g.Join(ctx(t), tp.opts)
	require.NoError(t, err)
	return m
}

// handOver has b join g, holding both partitions, and a give partition 1
// up to it: the clock moves half a lease on, so a's next Recv steps
// (releasing partition 1 to b, at what its release may commit) and returns
// the next event of partition 0, whose offset must be want.
func (tp twoParts) handOver(t *testing.T, g *store.Group, a *store.GroupMember, want int64) (b *store.GroupMember, f store.Event) {
	t.Helper()
	b = tp.join(t, g)
	tp.clock.advance(tp.opts.LeaseTTL / 2) // a's next step is due
	f, err := a.Recv(ctx(t))
	require.NoError(t, err)
	require.Equal(t, want, f.Offset)
	require.Equal(t, []int{0}, a.Partitions(), "a gave partition 1 up")
	return b, f
}

// publishBatch publishes one event per key, in one batch (one read sees
// all or none of them), and returns their offsets.
func publishBatch(t *testing.T, st *store.Stream, keys ...string) []int64 {
	t.Helper()
	msgs := make([]store.Message, len(keys))
	for i := range keys {
		msgs[i] = store.Message{Key: &keys[i], Payload: []byte("v")}
	}
	offs, err := st.PublishMany(ctx(t), msgs)
	require.NoError(t, err)
	return offs
}

// recvUntil collects what a member hands out, up to and with the event at
// last.
func recvUntil(t *testing.T, m *store.GroupMember, last int64) []int64 {
	t.Helper()
	rc, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	var got []int64
	for {
		ev, err := m.Recv(rc)
		require.NoError(t, err, "after %v", got)
		got = append(got, ev.Offset)
		if ev.Offset >= last {
			return got
		}
	}
}

// The lapse mid-page (both tests below): a member holding partitions A
// and B (a long lease, a standing clock: only the test moves leases)
// reads a page [b2 a2 a3] 5 ms before A's lease runs out and hands b2
// out. 10 ms later its next Recv finds A's lease run out at a2: it hands
// neither a2 nor a3 out and marks A lost (its next step claims A again, or
// leaves it to its new owner). No step runs first (the last was 10 ms
// ago, the next is due in 20 min). The Recv then ends (its ctx is
// cancelled as it reads on: a Consume's shutdown), before any step.
// Before the fix, the end of the page had moved A's cursor past a3, and
// the leave released A there: the next owner started after a3, and a2
// and a3 were never handed out.
const lapseTTL = time.Hour

// TestGroupLeaveAfterALapsedPageCommitsOnlyWhatWasDelivered: Leave, after
// the lapse mid-page, releases A at a1 (what was committed) and B at b1 (b2
// was handed out, not committed): the next member gets b2, a2, a3. Before
// the fix: A was committed through a3 (the page's end), every round on
// both engines, and the next member got b2 then a4.
func TestGroupLeaveAfterALapsedPageCommitsOnlyWhatWasDelivered(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const rounds = 6
		h := &onceHook{}
		tp := newTwoParts(t, e, h.hook)
		kA, kB, clock, s, opts := tp.k0, tp.k1, tp.clock, tp.s, tp.opts
		for round := range rounds {
			st := s.Stream(fmt.Sprintf("s%d", round))
			g := st.Group("g")
			first := publishBatch(t, st, kB, kA) // b1 a1
			m, err := g.Join(c, opts)
			require.NoError(t, err)
			for _, off := range first { // claims both at c0: leases to c0+ttl
				ev, err := m.Recv(c)
				require.NoError(t, err)
				require.Equal(t, off, ev.Offset)
				require.NoError(t, m.Commit(c, ev))
			}
			clock.advance(lapseTTL - 5*time.Millisecond)
			page := publishBatch(t, st, kB, kA, kA) // b2 a2 a3
			ev, err := m.Recv(c)                    // steps (due), reads the page
			require.NoError(t, err)
			require.Equal(t, page[0], ev.Offset, "round %d: b2", round)

			clock.advance(10 * time.Millisecond) // A's lease ran out 5 ms ago
			rc, cancel := context.WithCancel(c)
			h.arm("ReadEvents", cancel) // the read after the page: its Recv ends
			_, err = m.Recv(rc)
			cancel()
			require.ErrorIs(t, err, context.Canceled, "round %d: Recv handed an event out after the lapse", round)
			require.Equal(t, []int{1}, m.Partitions(), "round %d: A found lapsed", round)
			require.NoError(t, m.Leave(c))

			gs, err := g.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, first[1], gs.Assignment[0].Committed, "round %d/%s: A released past a1 (a2 %d, a3 %d never handed out)", round, e.name, page[1], page[2])
			assert.Equal(t, first[0], gs.Assignment[1].Committed, "round %d/%s: B released past b1 (b2 %d handed out, not committed)", round, e.name, page[0])

			last := publishBatch(t, st, kA)[0] // a4
			n, err := g.Join(c, opts)
			require.NoError(t, err)
			assert.Equal(t, []int64{page[0], page[1], page[2], last}, recvUntil(t, n, last), "round %d/%s: the next member's events", round, e.name)
			require.NoError(t, n.Leave(c))
		}
	})
}

// TestGroupConsumeStoppedAfterALapsedPageCommitsOnlyWhatItsHandlerSaw:
// the lapse mid-page through Consume, stopped (its ctx cancelled) as it
// reads on after it: Consume returns nil and leaves with A committed at
// a1, the last event its handler saw of A; the next member gets a2 and a3.
// Before the fix: A was committed through a3, every round on both
// engines; the next member got a4 first.
func TestGroupConsumeStoppedAfterALapsedPageCommitsOnlyWhatItsHandlerSaw(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const rounds = 4
		h := &onceHook{}
		tp := newTwoParts(t, e, h.hook)
		kA, kB, clock, s, opts := tp.k0, tp.k1, tp.clock, tp.s, tp.opts
		for round := range rounds {
			st := s.Stream(fmt.Sprintf("s%d", round))
			g := st.Group("g")
			first := publishBatch(t, st, kB, kA) // b1 a1
			rc, cancel := context.WithCancel(c)
			defer cancel()
			var mu sync.Mutex
			var seen []int64
			var a1Handled atomic.Bool
			a1Committed := make(chan struct{})
			var armCommit func()
			armCommit = func() {
				h.arm("CommitGroupOffset", func() {
					if a1Handled.Load() {
						close(a1Committed)
					} else {
						armCommit()
					}
				})
			}
			armCommit()
			done := make(chan error, 1)
			go func() {
				done <- g.Consume(rc, opts, func(_ context.Context, ev store.Event) error {
					mu.Lock()
					seen = append(seen, ev.Offset)
					mu.Unlock()
					switch {
					case ev.Offset == first[1]:
						a1Handled.Store(true)
					case ev.Key != nil && *ev.Key == kB && ev.Offset != first[0]:
						// b2: A's lease runs out; the read after the page
						// stops the loop.
						clock.advance(10 * time.Millisecond)
						h.arm("ReadEvents", cancel)
					}
					return nil
				})
			}()
			select {
			case <-a1Committed: // A's lease: to a1's commit + ttl
			case err := <-done:
				t.Fatalf("round %d: Consume returned %v", round, err)
			}
			clock.advance(lapseTTL - 5*time.Millisecond)
			page := publishBatch(t, st, kB, kA, kA) // b2 a2 a3
			require.NoError(t, <-done)
			mu.Lock()
			require.Equal(t, []int64{first[0], first[1], page[0]}, seen, "round %d: the handler saw b1 a1 b2", round)
			mu.Unlock()

			gs, err := g.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, first[1], gs.Assignment[0].Committed, "round %d/%s: A committed past a1, the last its handler saw (a2 %d, a3 %d)", round, e.name, page[1], page[2])
			assert.GreaterOrEqual(t, gs.Assignment[1].Committed, page[0], "round %d/%s: B, through b2 (and on: idle since)", round, e.name)

			last := publishBatch(t, st, kA)[0] // a4
			n, err := g.Join(c, opts)
			require.NoError(t, err)
			assert.Equal(t, []int64{page[1], page[2], last}, recvUntil(t, n, last), "round %d/%s: the next member's events", round, e.name)
			require.NoError(t, n.Leave(c))
			clock.advance(lapseTTL) // the next round's leases from scratch
		}
	})
}

// TestGroupRedeliverLeavesEarlierEventsUncommitted: a member hands out
// events of one partition without committing them ("left to be delivered
// again", as Recv's doc allows), then hands one back with Redeliver (its
// handling failed); Leave commits none of them: the next owner gets them
// all. Before the fix Redeliver moved the partition's cursor to just before
// the event handed back and forgot the ones before it were outstanding:
// Leave committed them (through e1 after Redeliver(e2) in both forms),
// every time, both engines.
func TestGroupRedeliverLeavesEarlierEventsUncommitted(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		for _, form := range []struct {
			name         string
			handed, redo int // Recv hands out handed events, Redeliver the redo-th (from 0)
		}{
			{"the last handed out", 2, 1},
			{"before the last handed out", 3, 1},
			{"the first handed out", 2, 0}, // (nothing before it: a check of the test)
		} {
			for round := range 3 {
				st := s.Stream(fmt.Sprintf("redo-%d-%d-%d", form.handed, form.redo, round))
				offs := publishBatch(t, st, "k", "k", "k")
				m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour})
				require.NoError(t, err)
				var evs []store.Event
				for i := range form.handed {
					ev, err := m.Recv(c)
					require.NoError(t, err)
					require.Equal(t, offs[i], ev.Offset)
					evs = append(evs, ev)
				}
				require.NoError(t, m.Redeliver(evs[form.redo]))
				require.NoError(t, m.Leave(c))
				gs, err := st.Group("g").Stats(c)
				require.NoError(t, err)
				assert.Less(t, gs.Assignment[0].Committed, offs[0], "%s/%s round %d: Leave committed events never committed (events %v)", e.name, form.name, round, offs)
				n, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour})
				require.NoError(t, err)
				assert.Equal(t, offs, recvUntil(t, n, offs[2]), "%s/%s round %d: the next member's events", e.name, form.name, round)
				require.NoError(t, n.Leave(c))
			}
		}
	})
}

// TestGroupRebalanceAfterRedeliverCommitsNothingUncommitted: the same
// through a rebalance, no Leave: a newcomer joins, and the member's next
// Recv releases the partition beyond its share: not through e1, handed
// out and never committed; the newcomer gets e1 first. Before the fix the
// release committed e1 and the newcomer started at e2, every round, both
// engines.
func TestGroupRebalanceAfterRedeliverCommitsNothingUncommitted(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		tp := newTwoParts(t, e, nil)
		k0, k1 := tp.k0, tp.k1
		for round := range 4 {
			st := tp.s.Stream(fmt.Sprintf("s%d", round))
			g := st.Group("g")
			offs := publishBatch(t, st, k1, k1, k0) // e1 e2 (partition 1, the one released), f (partition 0)
			a := tp.join(t, g)
			ev1, err := a.Recv(c)
			require.NoError(t, err)
			require.Equal(t, offs[0], ev1.Offset)
			ev2, err := a.Recv(c) // e1 not committed: left to be delivered again
			require.NoError(t, err)
			require.Equal(t, offs[1], ev2.Offset)
			require.NoError(t, a.Redeliver(ev2)) // e2's handling failed too

			b, _ := tp.handOver(t, g, a, offs[2]) // f
			gs, err := g.Stats(c)
			require.NoError(t, err)
			assert.Less(t, gs.Assignment[1].Committed, offs[0], "round %d/%s: the release committed e1", round, e.name)
			assert.Equal(t, offs[:2], recvUntil(t, b, offs[1]), "round %d/%s: the newcomer's events", round, e.name)
			require.NoError(t, b.Leave(c))
			require.NoError(t, a.Leave(c))
		}
	})
}

// TestGroupCommitOfAnEventNeverDeliveredIsInvalidArgument: Commit,
// CommitTx and Redeliver of an event this member never delivered fail with
// ErrInvalidArgument, as their docs say, before any Recv too (before: with
// ErrClaimLost, "not this member's", until a Recv claimed the partition).
// An event it delivered under a claim it no longer holds fails with
// ErrClaimLost (its partition moved, or was claimed again: it comes again),
// before and after the member claims its partition again (before, the
// second was ErrInvalidArgument).
func TestGroupCommitOfAnEventNeverDeliveredIsInvalidArgument(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		h := &onceHook{}
		tp := newTwoParts(t, e, h.hook)
		s := tp.s
		st := s.Stream("s")
		g := st.Group("g")
		offs := publishBatch(t, st, tp.k1, tp.k0) // e (partition 1), f (partition 0)
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Len(t, evs, 2)
		a := tp.join(t, g)
		defer a.Close()

		refused := func(what string, sentinel error, ev store.Event) {
			t.Helper()
			err := a.Commit(c, ev)
			require.ErrorIs(t, err, sentinel, "%s: Commit", what)
			assert.Contains(t, err.Error(), `group commit "s/g"`)
			err = s.InTx(c, func(c context.Context, tx store.Tx) error { return a.CommitTx(c, tx, ev) })
			require.ErrorIs(t, err, sentinel, "%s: CommitTx", what)
			err = a.Redeliver(ev)
			require.ErrorIs(t, err, sentinel, "%s: Redeliver", what)
			assert.Contains(t, err.Error(), `group redeliver "s/g"`)
		}
		refused("before any Recv", store.ErrInvalidArgument, evs[0])

		e1, err := a.Recv(c) // claims both
		require.NoError(t, err)
		require.Equal(t, offs[0], e1.Offset)
		refused("f, after a Recv that returned e", store.ErrInvalidArgument, evs[1])

		b, _ := tp.handOver(t, g, a, offs[1]) // partition 1 (e's, e not committed) to b; f
		refused("e, its partition b's", store.ErrClaimLost, e1)

		require.NoError(t, b.Leave(c))
		tp.clock.advance(tp.opts.LeaseTTL * 5 / 12) // a's next step is due; its leases (to its claims + ttl) are not out
		rc, cancel := context.WithCancel(c)
		h.arm("ReadEvents", cancel) // claims partition 1 again, reads, stops before handing e out
		_, err = a.Recv(rc)
		cancel()
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, []int{0, 1}, a.Partitions())
		refused("e, under a claim of its partition since", store.ErrClaimLost, e1)

		again, err := a.Recv(c) // e comes again
		require.NoError(t, err)
		require.Equal(t, offs[0], again.Offset)
		require.NoError(t, a.Commit(c, again))
	})
}

// TestGroupCommitOfAnEventFromBeforeAReclaim: A delivers e1 (partition 1)
// under its first claim, a rebalance gives partition 1 to B, B handles e1
// and e2, commits e2 and leaves; A claims partition 1 again (from e2) and
// gets e3. Then e1, delivered under A's earlier claim and committed since
// by B, is ErrClaimLost for Commit, CommitTx and Redeliver (accepted, a
// CommitTx would commit its effects a second time, and a Redeliver would
// hand out again what B committed); e2, which A never received, and an
// offset of 0 are ErrInvalidArgument. A's next event is the next one
// published.
func TestGroupCommitOfAnEventFromBeforeAReclaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		tp := newTwoParts(t, e, nil)
		s, k1 := tp.s, tp.k1
		st := s.Stream("s")
		g := st.Group("g")
		offs := publishBatch(t, st, k1, k1, tp.k0) // e1 e2 (partition 1), f (partition 0)
		all, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		e2 := all[1]
		a := tp.join(t, g)
		defer a.Close()
		e1, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[0], e1.Offset) // e1 under A's claim 1, not committed

		b, f := tp.handOver(t, g, a, offs[2]) // partition 1 (at c0) to b
		require.NoError(t, a.Commit(c, f))
		bEv, err := b.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[0], bEv.Offset)
		bEv, err = b.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[1], bEv.Offset)
		require.NoError(t, b.Commit(c, bEv)) // e1, e2 handled by b
		require.NoError(t, b.Leave(c))

		e3off := publishBatch(t, st, k1)[0]
		tp.clock.advance(tp.opts.LeaseTTL / 3) // a's step is due: claims partition 1 again, from e2
		e3, err := a.Recv(c)
		require.NoError(t, err)
		require.Equal(t, e3off, e3.Offset)
		require.Equal(t, []int{0, 1}, a.Partitions())

		err = a.Commit(c, e1)
		t.Logf("%s: Commit(e1 from before the reclaim) = %v", e.name, err)
		assert.ErrorIs(t, err, store.ErrClaimLost, "Commit of e1, delivered under a claim a no longer holds")
		err = s.InTx(c, func(c context.Context, tx store.Tx) error { return a.CommitTx(c, tx, e1) })
		t.Logf("%s: CommitTx(e1 from before the reclaim) = %v", e.name, err)
		assert.ErrorIs(t, err, store.ErrClaimLost, "CommitTx of e1, delivered under a claim a no longer holds")
		err = a.Commit(c, e2)
		t.Logf("%s: Commit(e2, never delivered to a) = %v", e.name, err)
		assert.ErrorIs(t, err, store.ErrInvalidArgument, "Commit of e2, never delivered to a")
		zero := store.Event{Stream: "s", Key: &k1}
		err = a.Commit(c, zero)
		t.Logf("%s: Commit(offset 0) = %v", e.name, err)
		assert.ErrorIs(t, err, store.ErrInvalidArgument, "Commit of an offset-0 event, never delivered")

		err = a.Redeliver(e1)
		t.Logf("%s: Redeliver(e1 from before the reclaim) = %v", e.name, err)
		assert.ErrorIs(t, err, store.ErrClaimLost, "Redeliver of e1, delivered under a claim a no longer holds")
		e4off := publishBatch(t, st, k1)[0]
		next, err := a.Recv(c)
		require.NoError(t, err)
		assert.Equal(t, e4off, next.Offset, "a hands out again none of what b committed (e1 %d, e2 %d; e3 %d)", offs[0], offs[1], e3off)
	})
}

// TestGroupRedeliverOfACommittedEventIsInvalidArgument: within one claim,
// Redeliver of an event at or below the partition's committed offset
// (the event committed itself, or one before the committed one) fails
// with ErrInvalidArgument and hands nothing out again: the next Recv
// returns the event after the committed one. Before, Redeliver took it
// back and Recv handed the committed events out again (e1 after Commit(e2)
// and Redeliver(e1), e2 after Redeliver(e2)), both engines.
func TestGroupRedeliverOfACommittedEventIsInvalidArgument(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		for _, redo := range []int{0, 1} { // e1 (before the committed e2), e2 (committed)
			st := s.Stream(fmt.Sprintf("redo-committed-%d", redo))
			offs := publishBatch(t, st, "k", "k", "k")
			m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour})
			require.NoError(t, err)
			evs := make([]store.Event, 2)
			for i := range evs {
				evs[i], err = m.Recv(c)
				require.NoError(t, err)
				require.Equal(t, offs[i], evs[i].Offset)
			}
			require.NoError(t, m.Commit(c, evs[1]))
			err = m.Redeliver(evs[redo])
			t.Logf("%s: Redeliver(e%d) after Commit(e2) = %v", e.name, redo+1, err)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "Redeliver of e%d, committed", redo+1)
			assert.Contains(t, err.Error(), `group redeliver "redo-committed-`)
			next, err := m.Recv(c)
			require.NoError(t, err)
			assert.Equal(t, offs[2], next.Offset, "%s: the event after the committed e2 (e1 %d, e2 %d), none handed out again", e.name, offs[0], offs[1])
			require.NoError(t, m.Redeliver(next), "e3, not committed, comes again")
			again, err := m.Recv(c)
			require.NoError(t, err)
			assert.Equal(t, offs[2], again.Offset)
			require.NoError(t, m.Leave(c))
		}
	})
}
