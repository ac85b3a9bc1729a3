package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Found by the fifty-second session's review (review52c): an event that
// lost the winner rule (a lower rank, published after the head) is
// superseded too. Compaction deleted only a key's versions below its head,
// so such an event stayed for good; after a tombstone head expired it was
// the key's value again in a replay.

// A tombstone at rank 5 is the key's head; a value published after it at
// rank 1 loses the winner rule (the key stays deleted) but sits above the
// tombstone's offset. The value is younger than MinCompactionLag when the
// cursor reaches the tombstone, so compaction stops before it. Before, the
// tombstone pass then deleted the tombstone and its head row and left the
// rank-1 value: a replay saw the deleted key's value without its
// tombstone. Now the tombstone stays while the value is inside the lag,
// and they go together after it.
func TestLowerRankValueAfterATombstoneGoesWithIt(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		c := ctx(t)
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("kvr")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Hour, TombstoneRetention: time.Minute}))
		tp := s.Topic[counter]("kvr")
		_, err := tp.Publish(c, &counter{N: 1}, store.PublishOpts{Key: "alice", Rank: 0})
		require.NoError(t, err)
		_, err = tp.Publish(c, nil, store.PublishOpts{Key: "alice", Rank: 5})
		require.NoError(t, err)
		clk.Advance(2 * time.Hour)
		_, err = tp.Publish(c, &counter{N: 99}, store.PublishOpts{Key: "alice", Rank: 1})
		require.NoError(t, err)
		_, herr := st.Key("alice").CompactionHead(c)
		t.Logf("%s: head before janitor: %v; replay %v", e.name, herr, replayKeyed(t, c, st))
		require.ErrorIs(t, herr, store.ErrNotFound, "the tombstone wins (rank 5 > 1)")
		clk.Advance(10 * time.Minute) // tombstone past retention; the late value younger than the lag
		n, err := s.Maintenance().CompactSuperseded(c, 100)
		require.NoError(t, err)
		k, err := s.Maintenance().DeleteExpiredTombstones(c, 100)
		require.NoError(t, err)
		t.Logf("%s: compacted %d, tombstones %d; replay %v", e.name, n, k, replayKeyed(t, c, st))
		clk.Advance(3 * time.Hour) // the late value now older than the lag too
		n, err = s.Maintenance().CompactSuperseded(c, 100)
		require.NoError(t, err)
		k, err = s.Maintenance().DeleteExpiredTombstones(c, 100)
		require.NoError(t, err)
		rep := replayKeyed(t, c, st)
		h, herr := st.Key("alice").CompactionHead(c)
		t.Logf("%s: later: compacted %d, tombstones %d; replay %v; head %+v %v", e.name, n, k, rep, h, herr)
		for _, r := range rep {
			assert.NotContains(t, r, "99", "a replay sees the deleted key's losing value without its tombstone")
		}
	})
}

// Same as TestLowerRankValueAfterATombstoneGoesWithIt, through
// janitor.RunOnce with BatchSize 1 (the janitor, not Maintenance calls).
func TestLowerRankValueAfterATombstoneGoesWithItThroughTheJanitor(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		c := ctx(t)
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("kvrj")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Hour, TombstoneRetention: time.Minute}))
		tp := s.Topic[counter]("kvrj")
		_, err := tp.Publish(c, nil, store.PublishOpts{Key: "alice", Rank: 5})
		require.NoError(t, err)
		clk.Advance(2 * time.Hour)
		_, err = tp.Publish(c, &counter{N: 99}, store.PublishOpts{Key: "alice", Rank: 1})
		require.NoError(t, err)
		j := janitor.New(s, janitor.Opts{BatchSize: 1, Budget: time.Minute})
		for i := 0; i < 3; i++ {
			r, err := j.RunOnce(c)
			require.NoError(t, err)
			t.Logf("%s: pass %d: compacted %d tombstones %d; replay %v", e.name, i, r.Compacted, r.TombstonesDeleted, replayKeyed(t, c, st))
			clk.Advance(3 * time.Hour)
		}
		rep := replayKeyed(t, c, st)
		assert.NotEqual(t, []string{`alice={"n":99}`}, rep, "a replay sees the deleted key's losing value without its tombstone")
	})
}

// A value at rank 5 is the key's head; a value, or a tombstone, at rank 1
// published after it loses (the winner rule keeps rank 5) but sits above
// the head's offset. The janitor deletes "superseded events older than
// MinCompactionLag": before, compaction deleted a key's versions below its
// head only, so the loser stayed for good, and a replay ended with it (with
// the losing tombstone, the live key read as deleted).
func TestLowerRankVersionAfterTheHeadIsCompacted(t *testing.T) {
	eachEngineEachForm(t, []string{"value", "tombstone"}, func(t *testing.T, e *engineEnv, form int) {
		clk := &offsetClock{}
		c := ctx(t)
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("kvrc")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Minute, TombstoneRetention: time.Minute}))
		tp := s.Topic[counter]("kvrc")
		_, err := tp.Publish(c, &counter{N: 5}, store.PublishOpts{Key: "alice", Rank: 5})
		require.NoError(t, err)
		loser := &counter{N: 1}
		if form == 1 {
			loser = nil
		}
		_, err = tp.Publish(c, loser, store.PublishOpts{Key: "alice", Rank: 1})
		require.NoError(t, err)
		j := janitor.New(s, janitor.Opts{Budget: time.Minute})
		for range 3 {
			clk.Advance(2 * time.Hour)
			_, err := j.RunOnce(c)
			require.NoError(t, err)
		}
		h, err := tp.Key("alice").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, 5, h.N)
		assert.Equal(t, []string{`alice={"n":5}`}, replayKeyed(t, c, st), "the losing rank-1 version, past the lag, is compacted")
	})
}
