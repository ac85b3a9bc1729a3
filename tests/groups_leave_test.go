package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// cancelOnView cancels a context right after the next view read
// (GroupPartitions) of a step once armed: the step's next statement runs
// under a cancelled context, as a Consume's shutdown (ctx cancelled while
// Recv steps) does.
type cancelOnView struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	fired  chan struct{}
}

func (c *cancelOnView) arm(cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel, c.fired = cancel, make(chan struct{})
}

func (c *cancelOnView) hook(name string) {
	if name != "GroupPartitions" {
		return
	}
	c.mu.Lock()
	cancel, fired := c.cancel, c.fired
	c.cancel = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		close(fired)
	}
}

// TestGroupLeaveReleasesWhatAFailedStepDropped: a step that dropped a
// partition from the member's map (a release beyond its share) and then
// failed (its context cancelled: Consume's shutdown) leaves the row the
// member's own. Leave gives it back too, so the others take it at once, as
// Leave's doc says. Before, Leave released only what was in the map: the
// departed member's row kept its lease and no one could claim the
// partition until it ran out (every round, both engines).
func TestGroupLeaveReleasesWhatAFailedStepDropped(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		for round := range 4 {
			sb := e.open(t) // before the hooks (SQLite: its writer runs none)
			cv := &cancelOnView{}
			sa := e.openHooked(t, cv.hook)
			name := fmt.Sprintf("s%d", round)
			opts := store.GroupOpts{Partitions: 2, LeaseTTL: time.Hour}
			a, err := sa.Stream(name).Group("g").Join(c, opts)
			require.NoError(t, err)
			_, err = sa.Stream(name).Publish(c, nil)
			require.NoError(t, err)
			ev, err := a.Recv(c)
			require.NoError(t, err)
			require.NoError(t, a.Commit(c, ev))
			require.Equal(t, []int{0, 1}, a.Partitions())
			b, err := sb.Stream(name).Group("g").Join(c, opts)
			require.NoError(t, err)
			rc, cancel := context.WithCancel(c)
			cv.arm(cancel)
			_, err = a.Recv(rc) // steps on b's wake: view read, then the release fails
			require.Error(t, err)
			require.NoError(t, a.Leave(c))
			st, err := sa.Stream(name).Group("g").Stats(c)
			require.NoError(t, err)
			for _, p := range st.Assignment {
				assert.NotEqual(t, a.ID(), p.Owner, "round %d/%s: partition %d still owned by the member that left (lease until %v)", round, e.name, p.Partition, p.LeaseExpiresAt)
			}
			require.NoError(t, b.Leave(c))
		}
	})
}

// TestGroupLeaveReleasesWhatAFailedReclaimLeft: the same after a lapse in
// the member's own view (TestGroupMemberReclaimsWhatItsHeartbeatRenewed):
// the step drops its partitions, then its reclaim fails under a cancelled
// context; Leave gives every row back. Before, every row stayed the
// departed member's.
func TestGroupLeaveReleasesWhatAFailedReclaimLeft(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const ttl, parts, rounds = 150 * time.Millisecond, 4, 4
		clock := newStandingClock()
		lapse := newLeaseLapse(clock, ttl)
		cv := &cancelOnView{}
		s := e.openHooked(t, func(name string) { lapse.hook(name); cv.hook(name) }, store.WithClock(clock.now))
		for round := range rounds {
			g, m, _ := joinRound(t, s, round, parts, ttl)
			lapse.arm()
			rc, cancel := context.WithTimeout(c, 20*time.Second)
			got := make(chan error, 1)
			go func() {
				_, err := m.Recv(rc)
				got <- err
			}()
			lapse.lapse(t, func() { cv.arm(cancel) }, func() bool { return len(m.Partitions()) < parts }, 20*time.Second)
			err := <-got
			cancel()
			require.Error(t, err, "round %d", round)
			require.NoError(t, m.Leave(c))
			st, err := g.Stats(c)
			require.NoError(t, err)
			n := 0
			for _, p := range st.Assignment {
				if p.Owner == m.ID() {
					n++
				}
			}
			assert.Zero(t, n, "round %d/%s: partitions still owned by the member that left: %+v", round, e.name, st.Assignment)
		}
	})
}

// TestGroupConsumeShutdownDuringRebalanceHandsOver: the first test through
// Consume: its ctx is cancelled (a graceful shutdown) while its Recv steps
// to give a newcomer its share. Consume returns nil and the newcomer gets
// the partition at once. Before, the departed member's row kept its lease.
func TestGroupConsumeShutdownDuringRebalanceHandsOver(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		for round := range 4 {
			sb := e.open(t)
			cv := &cancelOnView{}
			var armed atomic.Bool
			var handled atomic.Int64
			sa := e.openHooked(t, cv.hook)
			name := fmt.Sprintf("s%d", round)
			opts := store.GroupOpts{Partitions: 2, LeaseTTL: time.Hour}
			g := sa.Stream(name).Group("g")
			_, err := sa.Stream(name).Publish(c, nil)
			require.NoError(t, err)
			rc, cancel := context.WithCancel(c)
			done := make(chan error, 1)
			go func() {
				done <- g.Consume(rc, opts, func(context.Context, store.Event) error { handled.Add(1); return nil })
			}()
			waitFor(t, "the consumer holds both partitions", func() bool {
				gs, err := g.Stats(c)
				if err != nil || len(gs.Assignment) != 2 || handled.Load() == 0 {
					return false
				}
				return gs.Assignment[0].Owner != "" && gs.Assignment[0].Owner == gs.Assignment[1].Owner
			})
			gs, err := g.Stats(c)
			require.NoError(t, err)
			aID := gs.Assignment[0].Owner
			cv.arm(cancel) // the next step's view read cancels Consume's ctx
			armed.Store(true)
			b, err := sb.Stream(name).Group("g").Join(c, opts)
			require.NoError(t, err)
			require.NoError(t, <-done)
			gs, err = g.Stats(c)
			require.NoError(t, err)
			for _, p := range gs.Assignment {
				assert.NotEqual(t, aID, p.Owner, "round %d/%s: after Consume returned, partition %d is still the departed member's (lease until %v)", round, e.name, p.Partition, p.LeaseExpiresAt)
			}
			require.NoError(t, b.Leave(c))
		}
	})
}

// gateHook holds the next named statement (after it ran) until released.
type gateHook struct {
	mu    sync.Mutex
	gates map[string]*heldBeat
}

func (g *gateHook) hold(name string) *heldBeat {
	h := &heldBeat{held: make(chan struct{}), release: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*heldBeat{}
	}
	g.gates[name] = h
	return h
}

func (g *gateHook) hook(name string) {
	key := name
	if len(key) >= 10 && key[:10] == "ReadEvents" {
		key = "ReadEvents"
	}
	g.mu.Lock()
	h := g.gates[key]
	delete(g.gates, key)
	g.mu.Unlock()
	if h != nil {
		close(h.held)
		<-h.release
	}
}

// TestGroupLeaveReleasesALostRowStillItsOwn: a partition Recv found lapsed
// in the member's own view (marked lost; the step that would claim it
// again has not run yet) while its row is still the member's, with a lease
// its heartbeat renewed: Leave gives it back too. Before, Leave left it
// out and the others waited for that lease.
func TestGroupLeaveReleasesALostRowStillItsOwn(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const ttl, parts = 150 * time.Millisecond, 2
		for round := range 4 {
			clock := newStandingClock()
			gh := &gateHook{}
			s := e.openHooked(t, gh.hook, store.WithClock(clock.now))
			st := s.Stream(fmt.Sprintf("s%d", round))
			key := func(p int) string {
				for i := 0; ; i++ {
					if k := fmt.Sprintf("k%d", i); store.KeyPartition(k, parts) == p {
						return k
					}
				}
			}
			for _, p := range []int{0, 0, 1} {
				_, err := st.PublishWithKey(c, key(p), nil)
				require.NoError(t, err)
			}
			m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: parts, LeaseTTL: ttl})
			require.NoError(t, err)
			ev0, err := m.Recv(c) // claims both at C0, reads the three events
			require.NoError(t, err)
			require.NoError(t, m.Commit(c, ev0))
			beat1 := gh.hold("RenewGroupPartitions")
			<-beat1.held // a renewal at C0 (lease to C0+ttl)
			clock.advance(ttl * 9 / 10)
			ev1, err := m.Recv(c) // steps at C0+0.9ttl: next step due at C0+1.23ttl
			require.NoError(t, err)
			require.Equal(t, 0, store.GroupPartition(ev1, parts))
			clock.advance(ttl*1/10 + time.Millisecond) // C0+ttl+1ms: the lease ran out in the member's view; 16 ms since its step
			beat2 := gh.hold("RenewGroupPartitions")
			close(beat1.release) // lands, telling the member of a lease to C0+ttl: already out
			<-beat2.held         // renewed at C0+ttl+1ms in the database; the member has not heard yet
			read := gh.hold("ReadEvents")
			rc, cancel := context.WithTimeout(c, 10*time.Second)
			got := make(chan error, 1)
			go func() { _, err := m.Recv(rc); got <- err }() // next() finds partition 1 lapsed (lost), then reads
			<-read.held
			beat3 := gh.hold("UpsertGroupMember")
			close(beat2.release)
			<-beat3.held // beat2 committed and was heard (partition 1 stays lost)
			left := make(chan error, 1)
			go func() { left <- m.Leave(c) }()
			close(beat3.release)
			require.NoError(t, <-left)
			close(read.release)
			<-got
			cancel()
			gs, err := st.Group("g").Stats(c)
			require.NoError(t, err)
			for _, p := range gs.Assignment {
				assert.NotEqual(t, m.ID(), p.Owner, "round %d/%s: partition %d still the departed member's (lease until %v, clock %v)", round, e.name, p.Partition, p.LeaseExpiresAt, clock.now())
			}
		}
	})
}
