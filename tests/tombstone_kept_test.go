package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Left open by the fifty-second session (compact53).

// TestTombstonePassPagesPastKeptTombstones: tombstones the pass keeps
// because their key still has a version inside MinCompactionLag (here a
// value published after each at a lower rank: it lost, and the lag was
// raised since, so it is younger than the lag) are older than the one expired tombstone that has nothing left;
// passes of a batch of as many as are kept delete that one, and keep the
// others until their losers are past the lag. Fails on PostgreSQL with a
// pass that reads its batch's oldest tombstone heads once and stops
// (deleted 0: the kept ones filled every batch until the lag passed).
func TestTombstonePassPagesPastKeptTombstones(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const kept = 5
		c := ctx(t)
		s, kv, clk := keptTombstonesAhead(t, e, kept)
		var deleted int64
		for range 3 {
			n, err := s.Maintenance().DeleteExpiredTombstones(c, kept)
			require.NoError(t, err)
			deleted += n
		}
		assert.EqualValues(t, 1, deleted, "the expired tombstone behind %d kept ones", kept)
		assert.Len(t, replayKeyed(t, c, kv), 2*kept, "the kept tombstones and their losers")

		clk.Advance(4 * time.Hour) // the losers past the lag: every tombstone goes, with them
		deleted = 0
		for range 3 {
			n, err := s.Maintenance().DeleteExpiredTombstones(c, kept)
			require.NoError(t, err)
			deleted += n
		}
		assert.EqualValues(t, kept, deleted)
		assert.Empty(t, replayKeyed(t, c, kv))
	})
}

// TestTombstonePassChecksABatchOfKeptTombstonesAPass: a pass checks about a
// batch of kept tombstones and the next goes on where it stopped, as a
// pass that deletes stops after its batch. Paging past every kept
// tombstone in one pass (two statements each) spent every janitor pass's
// whole time budget on PostgreSQL once they were thousands, and no task
// after the tombstone pass (retention, the job sweeps) ever ran
// (review53b). Here 3 pages of kept tombstones stand before an expired
// one: the first three passes check a page each, the fourth deletes it.
func TestTombstonePassChecksABatchOfKeptTombstonesAPass(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const batch, kept = 4, 12
		c := ctx(t)
		s, kv, _ := keptTombstonesAhead(t, e, kept)
		for pass := range kept / batch {
			n, err := s.Maintenance().DeleteExpiredTombstones(c, batch)
			require.NoError(t, err)
			assert.Zero(t, n, "pass %d checked more than a page of kept tombstones", pass)
		}
		n, err := s.Maintenance().DeleteExpiredTombstones(c, batch)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "the pass after %d pages of kept tombstones takes the expired one", kept/batch)
		assert.Len(t, replayKeyed(t, c, kv), 2*kept, "the kept tombstones and their losers")
	})
}

// keptTombstonesAhead makes stream "kv" hold kept tombstones (keys k00,
// k01, ...) that the pass must keep, each with a value published after it
// at a lower rank (it lost) inside MinCompactionLag, and behind them one
// tombstone ("expired") with nothing left: every tombstone past its
// retention and below the compaction cursor. The lag is raised after the
// losers are published (created_at is the database's time, which the
// store's clock does not move), so they are younger than it.
func keptTombstonesAhead(t *testing.T, e *engineEnv, kept int) (*store.Store, *store.Stream, *offsetClock) {
	t.Helper()
	c := ctx(t)
	clk := &offsetClock{}
	s := e.open(t, store.WithClock(clk.Now))
	kv := s.Stream("kv")
	require.NoError(t, kv.Configure(c, store.StreamConfig{Compacted: true, TombstoneRetention: 10 * time.Minute,
		MinCompactionLag: time.Hour}))
	tp := s.Topic[counter]("kv")
	for i := range kept {
		_, err := tp.Publish(c, nil, store.PublishOpts{Key: fmt.Sprintf("k%02d", i), Rank: 5})
		require.NoError(t, err)
	}
	_, err := tp.Publish(c, nil, store.PublishOpts{Key: "expired"})
	require.NoError(t, err)
	// On PostgreSQL compaction walks only below the settled horizon (a
	// read is cut there): wait for it to pass every tombstone.
	require.Eventually(t, func() bool { return len(replayKeyed(t, c, kv)) == kept+1 }, 30*time.Second, 10*time.Millisecond)
	clk.Advance(2 * time.Hour)
	_, err = s.Maintenance().CompactSuperseded(c, 1000) // the cursor walks every tombstone
	require.NoError(t, err)
	for i := range kept {
		_, err := tp.Publish(c, &counter{N: i}, store.PublishOpts{Key: fmt.Sprintf("k%02d", i), Rank: 1}) // loses
		require.NoError(t, err)
	}
	require.NoError(t, kv.Configure(c, store.StreamConfig{Compacted: true, TombstoneRetention: 10 * time.Minute,
		MinCompactionLag: 3 * time.Hour}))
	return s, kv, clk
}
