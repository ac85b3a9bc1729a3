package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Found by the fifty-second session's review (review52b): a key's value
// older than its tombstone must never outlive the tombstone's head row (a
// replay would see the deleted key alive, for good). The tombstone pass
// deletes the key's older versions older than MinCompactionLag with the
// tombstone, and keeps the tombstone while one is left.

func replayKeyed(t *testing.T, c context.Context, st *store.Stream) []string {
	t.Helper()
	evs, err := st.ReadSince(c, 0, 100)
	require.NoError(t, err)
	var out []string
	for _, ev := range evs {
		out = append(out, *ev.Key+"="+string(ev.Payload))
	}
	return out
}

// Two janitors compact the same stream. A's compaction window deleted the
// key's older value (the row is locked) and is then cancelled (process
// killed / ctx ended) before it commits; B's window ran meanwhile, skipped
// the locked row (SKIP LOCKED), deleted nothing and advanced the cursor past
// the tombstone. A rolls back: the older value is back, below the cursor,
// never walked again. The tombstone pass then deletes the head row and the
// tombstone: a replay sees the deleted key's older value, for good.
func TestTombstonePassTakesAnOlderValueARolledBackCompactionLeft(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		c := ctx(t)
		var armed atomic.Bool
		held := make(chan struct{})
		release := make(chan struct{})
		a := e.openHooked(t, func(name string) {
			if name == "CompactWindow" && armed.CompareAndSwap(true, false) {
				close(held)
				<-release
			}
		}, store.WithClock(clk.Now))
		b := e.open(t, store.WithClock(clk.Now))
		st := b.Stream("kv")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Hour, TombstoneRetention: time.Hour}))
		_, err := st.PublishWithKey(c, "alice", []byte("v1"))
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "alice", nil)
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "bob", []byte("b1"))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(replayKeyed(t, c, st)) == 3 }, 30*time.Second, 10*time.Millisecond)
		clk.Advance(2 * time.Hour)

		armed.Store(true)
		ca, cancelA := context.WithCancel(c)
		aDone := make(chan error, 1)
		go func() {
			_, err := a.Maintenance().CompactSuperseded(ca, 100)
			aDone <- err
		}()
		<-held // A deleted v1 in its open transaction
		bDone := make(chan error, 1)
		var bN int64
		go func() {
			var err error
			bN, err = b.Maintenance().CompactSuperseded(c, 100)
			bDone <- err
		}()
		if e.name == "pg" {
			require.NoError(t, <-bDone) // B is not blocked on PostgreSQL
			cancelA()
			close(release)
			t.Logf("A: %v", <-aDone)
		} else {
			cancelA()
			close(release)
			t.Logf("A: %v", <-aDone)
			require.NoError(t, <-bDone)
		}
		t.Logf("B compacted %d", bN)
		var tombs int64
		for range 3 {
			r, err := countingJanitor(b, janitor.Opts{}).RunOnce(c)
			require.NoError(t, err)
			tombs += r.TombstonesDeleted
			t.Logf("janitor: compacted %d tombstones %d", r.Compacted, r.TombstonesDeleted)
		}
		got := replayKeyed(t, c, st)
		_, herr := st.Key("alice").CompactionHead(c)
		t.Logf("replay %v, head err %v", got, herr)
		assert.Equal(t, []string{"bob=b1"}, got, "alice was deleted: a replay must not see her old value")
		if tombs == 0 {
			assert.Equal(t, []string{"alice=", "bob=b1"}, got)
		}
	})
}

// PostgreSQL: a tombstone's created_at is its transaction's start (now()),
// so a transaction that began before the key's last value was published
// gives its tombstone a created_at older than that value's, at a higher
// offset. With the lag raised after the cursor walked the value (as the
// head), the cursor walks the tombstone (old enough) but the value, younger
// than the cutoff, is not deleted; the tombstone then expires and takes
// the head row: the value is alive for good.
func TestTombstoneOlderThanItsValueKeepsTheKeyUntilTheValueGoes(t *testing.T) {
	parallelTest(t) // PostgreSQL only: on SQLite a transaction holds the one writer, and created_at is the insert's time
	e := newEnv(t, "pg")
	var frozen atomic.Int64 // a clock that stands still between steps
	frozen.Store(time.Now().UnixNano())
	clk := &frozenClock{&frozen}
	c := ctx(t)
	s := e.open(t, store.WithClock(clk.Now))
	st := s.Stream("kv")
	require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Hour, TombstoneRetention: time.Hour}))
	_, err := st.PublishWithKey(c, "bob", []byte("b1"))
	require.NoError(t, err)

	_, tombstone := tombstoneBegunBeforeItsValue(t, c, s, st)
	clk.Advance(2 * time.Hour)
	n, err := s.Maintenance().CompactSuperseded(c, 100) // walks v1, the head: nothing deleted
	require.NoError(t, err)
	require.Zero(t, n)
	tombstone()
	require.Eventually(t, func() bool { return len(replayKeyed(t, c, st)) == 3 }, 30*time.Second, 10*time.Millisecond)
	evs, err := st.ReadSince(c, 0, 10)
	require.NoError(t, err)
	var tv, tt time.Time
	for _, ev := range evs {
		if *ev.Key == "alice" && ev.Payload != nil {
			tv = ev.CreatedAt
		} else if *ev.Key == "alice" {
			tt = ev.CreatedAt
		}
	}
	t.Logf("v1 created %v, tombstone created %v", tv, tt)
	require.True(t, tt.Before(tv), "the tombstone (its transaction began first) is older than the value")
	mid := tt.Add(tv.Sub(tt) / 2)
	lag := clk.Now().Sub(mid) // the cutoff between the tombstone's created_at and v1's; the clock stands still
	require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: lag, TombstoneRetention: time.Hour}))
	var tombs int64
	var mu sync.Mutex
	for range 3 {
		r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err)
		mu.Lock()
		tombs += r.TombstonesDeleted
		mu.Unlock()
		t.Logf("janitor: compacted %d tombstones %d", r.Compacted, r.TombstonesDeleted)
	}
	got := replayKeyed(t, c, st)
	t.Logf("replay %v", got)
	assert.Zero(t, tombs, "the tombstone went while the value it deletes was younger than the lag")
	assert.Equal(t, []string{"bob=b1", "alice=v1", "alice="}, got, "the key kept whole while its value is inside the lag")
	clk.Advance(lag) // the value past the lag: the tombstone takes it
	r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
	require.NoError(t, err)
	assert.EqualValues(t, 1, r.TombstonesDeleted)
	assert.Equal(t, []string{"bob=b1"}, replayKeyed(t, c, st), "alice was deleted: a replay must not see her old value")
}

type frozenClock struct{ n *atomic.Int64 }

func (c *frozenClock) Now() time.Time          { return time.Unix(0, c.n.Load()) }
func (c *frozenClock) Advance(d time.Duration) { c.n.Add(int64(d)) }

// As TestTombstoneOlderThanItsValueKeepsTheKeyUntilTheValueGoes, with no configuration
// change: two janitors whose clocks differ by about the time between the
// tombstone's transaction's start and the value's publish (here ~100ms).
// The one ahead walks v1 as the head; the one behind walks the tombstone
// (its created_at old enough) but not v1 (younger than its cutoff), then
// expires the tombstone.
func TestTombstoneOlderThanItsValueUnderJanitorClockSkew(t *testing.T) {
	parallelTest(t) // PostgreSQL only: on SQLite a transaction holds the one writer, and created_at is the insert's time
	e := newEnv(t, "pg")
	var fastN, slowN atomic.Int64
	fastN.Store(time.Now().UnixNano())
	slowN.Store(time.Now().UnixNano())
	fast, slow := &frozenClock{&fastN}, &frozenClock{&slowN}
	c := ctx(t)
	s := e.open(t, store.WithClock(fast.Now))
	s2 := e.open(t, store.WithClock(slow.Now))
	st := s.Stream("kv")
	require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Hour, TombstoneRetention: 30 * time.Minute}))
	_, err := st.PublishWithKey(c, "bob", []byte("b1"))
	require.NoError(t, err)
	v1, tombstone := tombstoneBegunBeforeItsValue(t, c, s, st)
	evs, err := st.ReadSince(c, v1-1, 1)
	require.NoError(t, err)
	tv := evs[0].CreatedAt
	fastN.Store(tv.Add(time.Hour + time.Millisecond).UnixNano()) // an hour after v1, by the fast janitor's clock
	r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)      // walks v1, the head
	require.NoError(t, err)
	t.Logf("fast janitor: compacted %d tombstones %d", r.Compacted, r.TombstonesDeleted)
	tombstone()
	require.Eventually(t, func() bool { return len(replayKeyed(t, c, st)) == 3 }, 30*time.Second, 10*time.Millisecond)
	evs, err = st.ReadSince(c, v1, 1)
	require.NoError(t, err)
	tt := evs[0].CreatedAt
	t.Logf("v1 created %v, tombstone created %v", tv, tt)
	require.True(t, tt.Before(tv), "the tombstone is older than the value")
	mid := tt.Add(tv.Sub(tt) / 2)
	slowN.Store(mid.Add(time.Hour).UnixNano())
	t.Logf("skew: slow janitor's clock is %v behind the fast one's", time.Duration(fastN.Load()-slowN.Load()))
	for range 3 {
		r, err := countingJanitor(s2, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err)
		t.Logf("slow janitor: compacted %d tombstones %d", r.Compacted, r.TombstonesDeleted)
	}
	// By the slow janitor's clock the value is inside the lag: the key stays
	// whole (before: the tombstone and its head row went, the value stayed).
	assert.Equal(t, []string{"bob=b1", "alice=v1", "alice="}, replayKeyed(t, c, st), "a replay must never see the value without its tombstone")
}

// tombstoneBegunBeforeItsValue publishes alice's tombstone in a transaction
// that began (and read, so its snapshot and now() are taken) before
// alice=v1 is published; the tombstone commits when the returned function
// is called. On PostgreSQL its created_at (its transaction's start) is then
// older than v1's at a higher offset.
func tombstoneBegunBeforeItsValue(t *testing.T, c context.Context, s *store.Store, st *store.Stream) (v1 int64, commit func()) {
	t.Helper()
	began, goOn, txDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		txDone <- s.InTx(c, func(c context.Context, tx store.Tx) error {
			if _, err := st.ReadSinceTx(c, tx, 0, 1); err != nil {
				return err
			}
			close(began)
			<-goOn
			_, err := st.PublishWithKeyTx(c, tx, "alice", nil)
			return err
		})
	}()
	<-began
	time.Sleep(50 * time.Millisecond) // only widens the gap of created_at; the tests measure it
	v1, err := st.PublishWithKey(c, "alice", []byte("v1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(replayKeyed(t, c, st)) >= 2 }, 30*time.Second, 10*time.Millisecond)
	return v1, func() {
		close(goOn)
		require.NoError(t, <-txDone)
	}
}
