package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestTombstonePassVsPublishOverTheTombstone: the janitor's tombstone pass
// and a publish onto the key of the expired tombstone it deletes, forced
// to interleave, many rounds. In each round a key gets a value, then a
// tombstone that the clock makes older than its retention; the pass runs,
// and right after it read the tombstone (ExpiredTombstones, in the pass's
// transaction: on PostgreSQL the head row is locked, on SQLite the writer
// slot held) another store publishes onto the key: a value in even rounds,
// a new tombstone in odd ones. On PostgreSQL the hook waits until that
// publish is waiting for the pass's lock. The pass deletes the old
// tombstone and its head; the publish then makes the key's head anew: the
// key is never lost (its head is the publish's offset), a value reads
// back, and a value's head carries no tombstone mark (PostgreSQL: every
// head's tombstone_at is its event's created_at exactly when that event is
// a tombstone). A later pass past the retention deletes the new tombstone
// and never the value. Then the other order, on PostgreSQL: a transaction
// publishes a value over an expired tombstone and holds it while the pass
// runs; the pass skips the held row and, after the commit, finds nothing to
// delete. Fails on PostgreSQL with keyed publishes whose ON CONFLICT update
// leaves tombstone_at as it was (a tombstone over a value is never marked,
// so round 0's pass deletes nothing, and a value over a tombstone keeps
// its mark, which the mark check finds), and with the pass taking the
// marked heads without checking each one's event is still a tombstone (a
// stale mark on a value, as an older library leaves it and the test
// writes it by hand, gets the value deleted). On SQLite, whose pass reads
// the tombstone events, the same rounds guard the same outcomes.
func TestTombstonePassVsPublishOverTheTombstone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		clk := &offsetClock{}
		const retention = 10 * time.Minute
		var armed atomic.Pointer[func()]
		jan := e.openHooked(t, func(name string) {
			if name == "ExpiredTombstones" {
				if f := armed.Swap(nil); f != nil {
					(*f)()
				}
			}
		}, store.WithClock(clk.Now))
		pub := e.open(t, store.WithClock(clk.Now))
		require.NoError(t, pub.Stream("kv").Configure(c, store.StreamConfig{Compacted: true, TombstoneRetention: retention,
			MinCompactionLag: retention})) // each pass compacts past the tombstone first
		st := pub.Stream("kv")
		db := e.sqlDB(t)
		m := jan.Maintenance()

		// marks: PostgreSQL's heads whose tombstone mark disagrees with
		// their event; on both, heads whose event is gone.
		marks := func() int {
			t.Helper()
			q := `SELECT count(*) FROM alkstore.compaction_heads h LEFT JOIN alkstore.events e ON e.id = h.head_offset
				WHERE (h.head_offset IS NOT NULL AND e.id IS NULL)
				   OR (h.tombstone_at IS NOT NULL) <> (h.head_offset IS NOT NULL AND e.payload IS NULL)
				   OR h.tombstone_at <> e.created_at`
			if e.name == "lite" {
				q = `SELECT count(*) FROM alk_compaction_heads h LEFT JOIN alk_events e ON e.id = h.head_offset
					WHERE h.head_offset IS NOT NULL AND e.id IS NULL`
			}
			var n int
			require.NoError(t, db.QueryRowContext(c, q).Scan(&n))
			return n
		}
		headOffset := func(key string) int64 {
			t.Helper()
			q := `SELECT head_offset FROM alkstore.compaction_heads WHERE stream = 'kv' AND key = $1`
			if e.name == "lite" {
				q = `SELECT head_offset FROM alk_compaction_heads WHERE stream = 'kv' AND key = ?`
			}
			var off int64
			require.NoError(t, db.QueryRowContext(c, q, key).Scan(&off), key)
			return off
		}
		// waitingForLock: on PostgreSQL, until a session of this database
		// waits for a lock (the publish, behind the pass's row lock), or
		// the publish is done (the pass locked nothing: the checks after
		// the pass say what went wrong).
		waitingForLock := func(finished *atomic.Bool) {
			if e.name != "pg" {
				return
			}
			deadline := time.Now().Add(30 * time.Second)
			for !finished.Load() {
				var n int
				require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
				if n > 0 {
					return
				}
				require.True(t, time.Now().Before(deadline), "the publish never waited for the pass's lock")
				time.Sleep(time.Millisecond)
			}
		}

		const rounds = 20
		for i := range rounds {
			key := fmt.Sprintf("k%d", i)
			_, err := st.PublishWithKey(c, key, []byte("old"))
			require.NoError(t, err)
			_, err = st.PublishWithKey(c, key, nil)
			require.NoError(t, err)
			value := i%2 == 0
			var off atomic.Int64
			var finished atomic.Bool
			done := make(chan error, 1)
			f := func() {
				go func() {
					var payload []byte
					if value {
						payload = []byte(fmt.Sprintf("v%d", i))
					}
					o, err := st.PublishWithKey(context.Background(), key, payload)
					off.Store(o)
					finished.Store(true)
					done <- err
				}()
				waitingForLock(&finished)
			}
			armed.Store(&f)
			clk.Advance(retention + time.Minute)
			n, err := compactThenExpireTombstones(c, m, 100)
			require.NoError(t, err)
			require.NoError(t, <-done)
			assert.EqualValues(t, 1, n, "round %d: the expired tombstone", i)
			assert.Nil(t, armed.Load(), "round %d: the pass read no tombstone", i)
			assert.Equal(t, off.Load(), headOffset(key), "round %d: the publish is the key's head", i)
			assert.Zero(t, marks(), "round %d: heads whose tombstone mark is wrong", i)
			h, err := st.Key(key).CompactionHead(c)
			if value {
				require.NoError(t, err, "round %d", i)
				assert.Equal(t, fmt.Sprintf("v%d", i), string(h.Payload))
			} else {
				require.ErrorIs(t, err, store.ErrNotFound, "round %d: a tombstone head", i)
			}

			// Past the retention of the publish: its tombstone goes, its
			// value stays.
			n, err = compactThenExpireTombstones(c, m, 100)
			require.NoError(t, err)
			if value {
				assert.Zero(t, n, "round %d: a value is not a tombstone", i)
				assert.Equal(t, off.Load(), headOffset(key), "round %d", i)
			} else {
				assert.EqualValues(t, 1, n, "round %d: the new tombstone, expired", i)
			}
			assert.Zero(t, marks(), "round %d", i)
			clk.Advance(-retention - time.Minute)
		}

		if e.name != "pg" {
			return
		}
		// The other order: a value over an expired tombstone, held in a
		// transaction while the pass runs, and committed.
		for i := range rounds {
			key := fmt.Sprintf("t%d", i)
			_, err := st.PublishWithKey(c, key, []byte("old"))
			require.NoError(t, err)
			_, err = st.PublishWithKey(c, key, nil)
			require.NoError(t, err)
			tx, err := pub.Begin(c)
			require.NoError(t, err)
			off, err := st.PublishWithKeyTx(c, tx, key, []byte("new"))
			require.NoError(t, err)
			clk.Advance(retention + time.Minute)
			n, err := compactThenExpireTombstones(c, m, 100)
			require.NoError(t, err)
			assert.Zero(t, n, "round %d: the held head is skipped", i)
			require.NoError(t, tx.Commit(c))
			n, err = compactThenExpireTombstones(c, m, 100)
			require.NoError(t, err)
			assert.Zero(t, n, "round %d: the head is a value", i)
			assert.Equal(t, off, headOffset(key), "round %d", i)
			assert.Zero(t, marks(), "round %d", i)
			clk.Advance(-retention - time.Minute)
		}

		// A mark left on a value (as a library older than schema 00041
		// leaves it when it publishes a value over a tombstone): the pass
		// keeps the value.
		off, err := st.PublishWithKey(c, "stale", []byte("value"))
		require.NoError(t, err)
		_, err = db.ExecContext(c, `UPDATE alkstore.compaction_heads SET tombstone_at = now() - interval '1 day' WHERE stream = 'kv' AND key = 'stale'`)
		require.NoError(t, err)
		n, err := compactThenExpireTombstones(c, m, 100)
		require.NoError(t, err)
		assert.Zero(t, n, "a value under a stale mark")
		assert.Equal(t, off, headOffset("stale"))
	})
}

// TestTombstonePassPutsStaleMarksRight: PostgreSQL's pass reads tombstone
// heads by their mark (tombstone_at, schema 00041), and a library older
// than 00040 publishing a value over a marked tombstone head leaves the
// mark as it was. The pass checks each head's event, so such a head is
// never deleted; it must also put its mark right, or enough stale marks
// fill every batch ahead of the expired tombstones and none is ever
// deleted again. Five stale marks older than the one expired tombstone,
// passes of a batch of five: the first pass corrects them, a later one
// deletes the tombstone, and every value stays. PostgreSQL only: SQLite
// keeps no marks (it reads its tombstone events' own index).
func TestTombstonePassPutsStaleMarksRight(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	clk := &offsetClock{}
	s := e.open(t, store.WithClock(clk.Now))
	kv := s.Stream("kv")
	require.NoError(t, kv.Configure(c, store.StreamConfig{Compacted: true, TombstoneRetention: 10 * time.Minute, MinCompactionLag: time.Hour}))
	db := e.sqlDB(t)
	// A 00039 library's keyed publish: no tombstone_at.
	const olderPublish = `WITH ins AS (
    INSERT INTO alkstore.events (id, stream, key, payload, txid)
    VALUES (nextval('alkstore.event_offset_seq'), $1::text, $2::text, $3::bytea, pg_current_xact_id())
    RETURNING id),
head AS (
    INSERT INTO alkstore.compaction_heads AS h (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at)
    SELECT $1::text, $2::text, ins.id, 1, 0, now(), now(), NULL FROM ins
    ON CONFLICT (stream, key) DO UPDATE
    SET head_offset = EXCLUDED.head_offset, schema_version = EXCLUDED.schema_version,
        compaction_rank = EXCLUDED.compaction_rank, updated_at = EXCLUDED.updated_at, headless_at = NULL
    WHERE h.head_offset IS NULL
       OR (EXCLUDED.compaction_rank, EXCLUDED.head_offset) > (h.compaction_rank, h.head_offset))
SELECT id FROM ins`
	const stale = 5
	for i := range stale {
		k := fmt.Sprintf("s%d", i)
		_, err := kv.PublishWithKey(c, k, nil) // marked
		require.NoError(t, err)
		_, err = db.ExecContext(c, olderPublish, "kv", k, []byte("value")) // a value over it, the mark kept
		require.NoError(t, err)
	}
	_, err := kv.PublishWithKey(c, "expired", nil)
	require.NoError(t, err)
	clk.Advance(time.Hour)
	var deleted int64
	for range 3 {
		n, err := compactThenExpireTombstones(c, s.Maintenance(), stale)
		require.NoError(t, err)
		deleted += n
	}
	assert.EqualValues(t, 1, deleted, "the expired tombstone behind %d stale marks", stale)
	_, err = kv.Key("expired").CompactionHead(c)
	assert.ErrorIs(t, err, store.ErrNotFound)
	var marked int
	require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FROM alkstore.compaction_heads WHERE tombstone_at IS NOT NULL`).Scan(&marked))
	assert.Zero(t, marked, "the values' marks put right")
	for i := range stale {
		h, err := kv.Key(fmt.Sprintf("s%d", i)).CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, "value", string(h.Payload))
	}
}

// compactThenExpireTombstones runs a compaction pass, then the tombstone
// pass, as the janitor does: a tombstone goes only once compaction has
// walked past it (TestTombstoneGoesOnlyAfterCompactionWalkedPastIt).
func compactThenExpireTombstones(c context.Context, m store.Maintenance, batch int) (int64, error) {
	if _, err := m.CompactSuperseded(c, 1000); err != nil {
		return 0, err
	}
	return m.DeleteExpiredTombstones(c, batch)
}

// TestTombstonePassStepsOverSupersededTombstones: tombstones the
// compaction cursor walked while they were heads, superseded by a value
// since (not yet compacted: the cursor has not reached the value), are
// older than the one expired tombstone head; passes of a batch of as many
// as there are superseded ones delete that head, and every value stays. On
// PostgreSQL the pass reads the tombstone heads' marks (schema 00041),
// where superseded tombstones never appear. Fails on SQLite with the pass
// taking the stream's oldest @batch tombstone events as its only
// candidates (all five superseded: every pass deleted nothing, until
// CompactSuperseded removed them).
func TestTombstonePassStepsOverSupersededTombstones(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		kv := s.Stream("kv")
		require.NoError(t, kv.Configure(c, store.StreamConfig{Compacted: true, TombstoneRetention: 10 * time.Minute,
			MinCompactionLag: time.Hour}))
		const superseded = 5
		for i := range superseded {
			_, err := kv.PublishWithKey(c, fmt.Sprintf("s%d", i), nil)
			require.NoError(t, err)
		}
		_, err := kv.PublishWithKey(c, "expired", nil)
		require.NoError(t, err)
		_, err = kv.PublishWithKey(c, "fresh", []byte("v"))
		require.NoError(t, err)
		clk.Advance(2 * time.Hour)
		_, err = s.Maintenance().CompactSuperseded(c, 1000) // the cursor walks them all, heads then
		require.NoError(t, err)
		for i := range superseded {
			_, err := kv.PublishWithKey(c, fmt.Sprintf("s%d", i), []byte("value"))
			require.NoError(t, err)
		}
		var deleted int64
		for range 3 {
			n, err := s.Maintenance().DeleteExpiredTombstones(c, superseded)
			require.NoError(t, err)
			deleted += n
		}
		assert.EqualValues(t, 1, deleted, "the expired tombstone behind %d superseded ones", superseded)
		_, err = kv.Key("expired").CompactionHead(c)
		assert.ErrorIs(t, err, store.ErrNotFound)
		for i := range superseded {
			h, err := kv.Key(fmt.Sprintf("s%d", i)).CompactionHead(c)
			require.NoError(t, err)
			assert.Equal(t, "value", string(h.Payload))
		}
		heads, err := kv.Heads(c, "", 100)
		require.NoError(t, err)
		assert.Len(t, heads, superseded+1, "the values and fresh")
	})
}
