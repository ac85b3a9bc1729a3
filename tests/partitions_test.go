package tests

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// Event partitions (PostgreSQL, schema 00008; docs/design/partitions.md).
// SQLite has none: where a test runs on both engines, SQLite shows the
// same results through row deletes.

// partition is one range partition of alkstore.events.
type partition struct {
	Name   string
	Lo, Hi int64
}

func eventPartitions(t *testing.T, pool *pgxpool.Pool) []partition {
	t.Helper()
	rows, err := pool.Query(ctx(t), `
		SELECT c.relname, b[1]::text, b[2]::text
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
		LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(MINVALUE|-?[0-9]+)''?\) TO \(''?(MAXVALUE|-?[0-9]+)''?\)') AS b
		WHERE i.inhparent = 'alkstore.events'::regclass AND b IS NOT NULL AND c.relname <> 'events_tail'`)
	require.NoError(t, err)
	var out []partition
	for rows.Next() {
		var p partition
		var lo, hi string
		require.NoError(t, rows.Scan(&p.Name, &lo, &hi))
		if lo == "MINVALUE" {
			lo = "-1"
		}
		_, err := fmt.Sscan(lo+" "+hi, &p.Lo, &p.Hi)
		require.NoError(t, err)
		out = append(out, p)
	}
	require.NoError(t, rows.Err())
	slices.SortFunc(out, func(a, b partition) int { return int(a.Lo - b.Lo) })
	return out
}

// eventsLayout is what a migration must keep of alkstore.events: its
// indexes (definitions with the table name taken out, and comments), its
// constraints, its column comments.
func eventsLayout(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), `
		SELECT 'index ' || c.relname || ': ' ||
		       regexp_replace(pg_get_indexdef(i.indexrelid), ' ON (ONLY )?alkstore\.events ', ' ON T ') ||
		       ' -- ' || COALESCE(obj_description(i.indexrelid, 'pg_class'), '')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'alkstore.events'::regclass
		UNION ALL
		SELECT 'constraint ' || conname || ': ' || pg_get_constraintdef(oid)
		FROM pg_constraint WHERE conrelid = 'alkstore.events'::regclass
		UNION ALL
		SELECT 'column ' || attname || ' ' || format_type(atttypid, atttypmod) || ' ' || attnotnull::text || ' ' ||
		       COALESCE(pg_get_expr(d.adbin, d.adrelid), '') || ' -- ' || COALESCE(col_description(attrelid, attnum), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE attrelid = 'alkstore.events'::regclass AND attnum > 0 AND NOT attisdropped
		ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func eventRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx(t), `SELECT concat_ws('|', id, stream, key, encode(payload, 'hex'), txid, created_at)
		FROM alkstore.events ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestPartitionMigrationKeepsEventsLayout: 00008, applied to a database
// holding events whose table carries an index and a constraint no
// migration of this repository defines (as a parallel migration would
// add), keeps every index (name, definition, comment), constraint, column
// and comment, every row and the sequence; the table is partitioned, each
// partition carries every index, and the store publishes and reads across
// old and new rows. Down restores the plain table with the same layout.
// PostgreSQL only: SQLite's 00008 is a no-op.
func TestPartitionMigrationKeepsEventsLayout(t *testing.T) {
	emptyDatabases(t)
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	db := e.sqlDB(t)
	bootstrap, err := schema.PostgresBootstrap()
	require.NoError(t, err)
	_, err = db.ExecContext(c, bootstrap)
	require.NoError(t, err)
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.UpTo(c, 7)
	require.NoError(t, err)

	e.execSQL(t,
		`CREATE INDEX events_probe ON alkstore.events (created_at DESC) INCLUDE (key) WHERE key IS NOT NULL`,
		`COMMENT ON INDEX alkstore.events_probe IS 'probe index'`,
		`ALTER TABLE alkstore.events ADD CONSTRAINT events_probe_check CHECK (id > 0)`,
		`INSERT INTO alkstore.events (id, stream, key, payload, txid)
		 SELECT nextval('alkstore.event_offset_seq'), 's' || (g % 3), CASE WHEN g % 2 = 0 THEN 'k' || g END,
		        convert_to('p' || g, 'UTF8'), pg_current_xact_id()
		 FROM generate_series(1, 500) g`)
	before, rowsBefore := eventsLayout(t, db), eventRows(t, db)
	require.Len(t, rowsBefore, 500)
	var seqBefore int64
	require.NoError(t, db.QueryRowContext(c, `SELECT last_value FROM alkstore.event_offset_seq`).Scan(&seqBefore))

	_, err = p.UpTo(c, 8)
	require.NoError(t, err)
	var kind string
	require.NoError(t, db.QueryRowContext(c, `SELECT relkind::text FROM pg_class WHERE oid = 'alkstore.events'::regclass`).Scan(&kind))
	assert.Equal(t, "p", kind, "events is partitioned")
	assert.Equal(t, before, eventsLayout(t, db), "every index, constraint, column and comment kept")
	assert.Equal(t, rowsBefore, eventRows(t, db), "every row kept")
	var seqAfter int64
	require.NoError(t, db.QueryRowContext(c, `SELECT last_value FROM alkstore.event_offset_seq`).Scan(&seqAfter))
	assert.Equal(t, seqBefore, seqAfter)
	var unattached int
	require.NoError(t, db.QueryRowContext(c, `
		SELECT count(*) FROM pg_index pi, pg_inherits part
		WHERE pi.indrelid = 'alkstore.events'::regclass AND part.inhparent = 'alkstore.events'::regclass
		  AND NOT EXISTS (SELECT 1 FROM pg_inherits ii JOIN pg_index ci ON ci.indexrelid = ii.inhrelid
		                  WHERE ii.inhparent = pi.indexrelid AND ci.indrelid = part.inhrelid)`).Scan(&unattached))
	assert.Zero(t, unattached, "every partition carries every index")

	s := e.open(t)
	off, err := s.Stream("s1").Publish(c, []byte("new"))
	require.NoError(t, err)
	assert.Greater(t, off, seqBefore)
	evs, err := s.Stream("s1").ReadSince(c, 0, 1000)
	require.NoError(t, err)
	require.Len(t, evs, 168)
	assert.Equal(t, []byte("new"), evs[len(evs)-1].Payload)
	created, err := s.Maintenance().CreatePartitions(c, store.PartitionOpts{Size: 100, Ahead: 1})
	require.NoError(t, err)
	assert.EqualValues(t, 2, created, "the tail holding the new event, and one ahead")
	require.NoError(t, s.Close())

	_, err = p.DownTo(c, 7)
	require.NoError(t, err)
	require.NoError(t, db.QueryRowContext(c, `SELECT relkind::text FROM pg_class WHERE oid = 'alkstore.events'::regclass`).Scan(&kind))
	assert.Equal(t, "r", kind)
	assert.Equal(t, before, eventsLayout(t, db), "down keeps the layout")
	assert.Len(t, eventRows(t, db), 501)
}

// TestJanitorCreatesPartitionsAhead: a pass makes the events published
// before any range partition (held by the tail, schema 00012) a partition
// of their own and creates partitions up to Ahead partitions beyond the
// newest offset; a second pass creates none;
// publishing past them makes the next pass create more, contiguous. A
// janitor that finds another creating (the advisory lock held) skips at
// once and creates nothing; once it is released it creates. PostgreSQL
// only: SQLite has no partitions.
func TestJanitorCreatesPartitionsAhead(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s := e.open(t)
	pool := e.pool(t)
	opts := store.PartitionOpts{Size: 10, Ahead: 3}
	j := countingJanitor(s, janitor.Opts{Partitions: opts})

	_, err := s.Stream("a").PublishMany(c, make([]store.Message, 5)) // into the tail
	require.NoError(t, err)
	r, err := j.RunOnce(c)
	require.NoError(t, err)
	assert.EqualValues(t, 4, r.PartitionsCreated)
	parts := eventPartitions(t, pool)
	// The tail's five, then three ahead (the migration dropped the empty
	// table it replaced).
	assert.Equal(t, []partition{{"events_p1", 1, 6}, {"events_p6", 6, 16}, {"events_p16", 16, 26}, {"events_p26", 26, 36}}, parts)

	r, err = j.RunOnce(c)
	require.NoError(t, err)
	assert.Zero(t, r.PartitionsCreated, "idempotent")

	_, err = s.Stream("a").PublishMany(c, make([]store.Message, 20)) // offsets 6..25
	require.NoError(t, err)

	// Another janitor holds the partition lock: this one skips at once.
	// The holder keeps it until the call returned, so a call that waited
	// for it would wait for good: no backend may be seen waiting for an
	// advisory lock while the call runs (instead of a wall-clock bound,
	// which a loaded machine can exceed while skipping).
	tx, err := pool.Begin(c)
	require.NoError(t, err)
	_, err = tx.Exec(c, `SELECT pg_advisory_xact_lock(x'616c6b7370617274'::bigint)`)
	require.NoError(t, err)
	type created struct {
		n   int64
		err error
	}
	skipped := make(chan created, 1)
	go func() {
		n, err := s.Maintenance().CreatePartitions(c, opts)
		skipped <- created{n, err}
	}()
	var got created
wait:
	for {
		select {
		case got = <-skipped:
			break wait
		default:
		}
		var waiting bool
		require.NoError(t, pool.QueryRow(c, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting))
		if waiting {
			require.NoError(t, tx.Rollback(c)) // let the waiting call finish
			<-skipped
			require.FailNow(t, "CreatePartitions waited for the partition lock another janitor holds instead of skipping")
		}
	}
	require.NoError(t, got.err)
	assert.Zero(t, got.n)
	require.NoError(t, tx.Rollback(c))

	// Two at once: together they create exactly the missing ones.
	var wg sync.WaitGroup
	counts := make([]int64, 2)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				n, err := s.Maintenance().CreatePartitions(c, opts)
				assert.NoError(t, err)
				counts[i] += n
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 2, counts[0]+counts[1])
	parts = eventPartitions(t, pool)
	require.Len(t, parts, 6)
	for i := 1; i < len(parts); i++ {
		assert.Equal(t, parts[i-1].Hi, parts[i].Lo, "contiguous")
	}
	assert.EqualValues(t, 56, parts[len(parts)-1].Hi)
	var hasDefault bool
	require.NoError(t, pool.QueryRow(c, `SELECT to_regclass('alkstore.events_default') IS NOT NULL`).Scan(&hasDefault))
	assert.False(t, hasDefault, "00012 dropped the empty default partition: every offset went to a range partition")
}

// partitionedStore opens a store whose clock the test moves and, on
// PostgreSQL, creates partitions of size offsets ahead.
func partitionedStore(t *testing.T, e *engineEnv, size int64) (*store.Store, *offsetClock) {
	t.Helper()
	clk := &offsetClock{}
	s := e.open(t, store.WithClock(clk.Now))
	_, err := s.Maintenance().CreatePartitions(ctx(t), store.PartitionOpts{Size: size, Ahead: 8})
	require.NoError(t, err)
	return s, clk
}

func publishEmpty(t *testing.T, st *store.Stream, n int) []int64 {
	t.Helper()
	ids, err := st.PublishMany(ctx(t), make([]store.Message, n))
	require.NoError(t, err)
	return ids
}

func readAll(t *testing.T, st *store.Stream) []int64 {
	t.Helper()
	evs, err := st.ReadSince(ctx(t), 0, 10000)
	require.NoError(t, err)
	return offsets(evs)
}

// partitionNames lists the range partitions (none on SQLite).
func partitionNames(t *testing.T, e *engineEnv) []string {
	t.Helper()
	if e.name != "pg" {
		return nil
	}
	var out []string
	for _, p := range eventPartitions(t, e.pool(t)) {
		out = append(out, p.Name)
	}
	return out
}

// TestRetentionDropsWholePartitions: partitions of size 10 holding only
// events past retention are dropped whole (the janitor reports them as
// PartitionsDropped); a partition that also holds an event of a
// stream without retention, or the current head of a compacted stream, is
// kept, and only its expired rows are deleted; partitions ahead of the
// offsets stay. The
// outcome is the same on SQLite, through row deletes.
func TestRetentionDropsWholePartitions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, clk := partitionedStore(t, e, 10)
		old, keep, kv := s.Stream("old"), s.Stream("keep"), s.Stream("kv")
		require.NoError(t, old.Configure(c, store.StreamConfig{Retention: time.Hour}))
		require.NoError(t, kv.Configure(c, store.StreamConfig{Retention: time.Hour, Compacted: true}))

		publishEmpty(t, old, 30) // offsets 1..30: partitions [1,11) [11,21) [21,31)
		k := "k"
		kvOff, err := kv.PublishWithKey(c, k, []byte("v")) // 31: head of a compacted stream
		require.NoError(t, err)
		publishEmpty(t, old, 9)             // 32..40
		keepIDs := publishEmpty(t, keep, 1) // 41
		publishEmpty(t, old, 9)             // 42..50
		require.EqualValues(t, 41, keepIDs[0])
		require.EqualValues(t, 31, kvOff)
		// One pass does it all, so its counts are the whole story. Its
		// budget is an hour (countingJanitor): under the default 2 s, at
		// load 35-41, pass after pass spent it before its row deletes (a
		// pass rechecks the kept partitions and walks the compacted
		// stream first) and the test's 30 s ran out with old's events
		// still there; a budget that cuts a COMMIT's reply also leaves
		// what committed uncounted. And it starts once the settled
		// horizon passed offset 50 (a read is cut there; from then on
		// every snapshot settles them, docs/design/stream-horizon.md): a
		// pass drops partitions only up to the horizon, and its row
		// deletes, which come next, leave a sealed partition to a drop
		// only for retentionGrace past its expiry, long over once the
		// clock moved two hours, so a pass that saw the horizon lag would
		// delete row by row what the test expects dropped whole.
		require.Eventually(t, func() bool { return len(readAll(t, old)) == 48 }, time.Minute, 10*time.Millisecond)
		clk.Advance(2 * time.Hour) // all of the above is past retention
		r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err)
		require.False(t, r.OutOfBudget)
		assert.Empty(t, readAll(t, old), "every event of old is past retention")
		if e.name == "pg" {
			assert.EqualValues(t, 3, r.PartitionsDropped, "three whole partitions")
			assert.EqualValues(t, 18, r.RetentionDeleted, "the rest row by row")
		} else {
			assert.EqualValues(t, 48, r.RetentionDeleted)
		}
		assert.Equal(t, keepIDs, readAll(t, keep), "a stream without retention keeps its events")
		h, err := kv.Key(k).CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, []byte("v"), h.Payload, "a compacted head keeps its event")
		if e.name == "pg" {
			names := partitionNames(t, e)
			assert.NotContains(t, names, "events_p1")
			assert.NotContains(t, names, "events_p11")
			assert.NotContains(t, names, "events_p21")
			assert.Contains(t, names, "events_p31", "holds a compacted head")
			assert.Contains(t, names, "events_p41", "holds an event without retention")
			assert.Contains(t, names, "events_p51", "ahead of the offsets")
		}
	})
}

// TestPartitionDropsCountedWhenCut: partition drops commit one by one, so
// a DropExpiredPartitions (a janitor pass's, say) or a TrimTo whose context
// ends after it dropped a partition still reports it with the error: the
// janitor's PartitionsDropped and TrimTo's count are not lost. Before,
// both returned 0 with the error (the store's run drops the value), and
// TestRetentionDropsWholePartitions, its passes running out of their 2 s
// budget under load, saw its three drops happen (the partitions gone, the
// row deletes 18) but reported as 0. A statement hook cancels the context
// right after the second partition's streams are read, that is after the
// first partition's drop committed and before the second's. PostgreSQL
// only (SQLite has no partitions).
func TestPartitionDropsCountedWhenCut(t *testing.T) {
	parallelTest(t)
	for _, trim := range []bool{false, true} {
		t.Run(map[bool]string{false: "retention", true: "trim"}[trim], func(t *testing.T) {
			e := newEnv(t, "pg")
			c, cancel := context.WithCancel(ctx(t))
			defer cancel()
			var mu sync.Mutex
			reads := 0
			clk := &offsetClock{}
			s := e.openHooked(t, func(name string) {
				mu.Lock()
				defer mu.Unlock()
				if name == "PartitionStreams" {
					if reads++; reads == 2 {
						cancel()
					}
				}
			}, store.WithClock(clk.Now))
			_, err := s.Maintenance().CreatePartitions(ctx(t), store.PartitionOpts{Size: 10, Ahead: 8})
			require.NoError(t, err)
			st := s.Stream("cut")
			if !trim {
				require.NoError(t, st.Configure(ctx(t), store.StreamConfig{Retention: time.Hour}))
			}
			ids := publishEmpty(t, st, 30) // three whole partitions
			require.EqualValues(t, 1, ids[0])
			// Wait for the settled horizon to pass them (a read is cut
			// there), so the one call below looks at every partition.
			require.Eventually(t, func() bool { return len(readAll(t, st)) == 30 }, 30*time.Second, 10*time.Millisecond)
			clk.Advance(2 * time.Hour)
			var n int64
			if trim {
				n, err = st.TrimTo(c, 30)
			} else {
				n, err = s.Maintenance().DropExpiredPartitions(c)
			}
			require.ErrorIs(t, err, context.Canceled)
			names := partitionNames(t, e)
			assert.NotContains(t, names, "events_p1", "the first partition was dropped")
			assert.Contains(t, names, "events_p11", "the cut came before the second")
			if trim {
				assert.EqualValues(t, 10, n, "TrimTo counts the dropped partition's events")
			} else {
				assert.EqualValues(t, 1, n, "the dropped partition is counted")
			}
		})
	}
}

// TestTrimToDropsWholePartitions: TrimTo drops the partitions holding only
// events it trims or events past retention, deletes the rows it trims in
// the others, and returns the exact count either way; a key whose head it
// dropped reads as headless. Same outcome on SQLite through row deletes.
func TestTrimToDropsWholePartitions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, _ := partitionedStore(t, e, 10)
		st, other := s.Stream("log"), s.Stream("other")
		ids := publishEmpty(t, st, 15) // 1..15
		k := "k"
		_, err := st.PublishWithKey(c, k, []byte("v")) // 16: a head (stream not compacted)
		require.NoError(t, err)
		otherIDs := publishEmpty(t, other, 1) // 17
		ids = append(ids, publishEmpty(t, st, 13)...)
		require.EqualValues(t, 30, ids[len(ids)-1])

		var n int64
		require.Eventually(t, func() bool { // the settled horizon may lag behind other tests' transactions
			got, err := st.TrimTo(c, 25)
			require.NoError(t, err)
			n += got
			return e.name != "pg" || !slices.Contains(partitionNames(t, e), "events_p1")
		}, 30*time.Second, 50*time.Millisecond)
		assert.EqualValues(t, 24, n, "every trimmed event (1..16, 18..25) counted once, dropped or deleted")
		assert.Equal(t, ids[len(ids)-5:], readAll(t, st))
		assert.Equal(t, otherIDs, readAll(t, other))
		_, err = st.Key(k).CompactionHead(c)
		assert.ErrorIs(t, err, store.ErrNotFound, "the dropped head left its key headless")
		if e.name == "pg" {
			names := partitionNames(t, e)
			assert.NotContains(t, names, "events_p1")
			assert.Contains(t, names, "events_p11", "holds another stream's event")
			assert.Contains(t, names, "events_p21", "holds events above the trim")
		}
	})
}

// TestPartitionDropWaitsBriefly: the DROP takes an ACCESS EXCLUSIVE lock
// on alkstore.events. While a publisher's transaction is open (it holds the
// table), a drop waits at most its lock timeout, gives up without error
// and leaves the partition; a publish queued behind the waiting drop goes
// through as soon as it gives up. Once the publisher commits, the next
// pass drops the partition, while publishers keep publishing, and every
// event they published is read back. PostgreSQL only: SQLite has no
// partitions (its writer slot serializes every write).
func TestPartitionDropWaitsBriefly(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	// The store's statements are logged with their SQLSTATE: what ends the
	// drop's wait is checked, not how long it took.
	clk := &offsetClock{}
	s, stmts := openLogged(t, e, store.WithClock(clk.Now))
	_, err := s.Maintenance().CreatePartitions(c, store.PartitionOpts{Size: 10, Ahead: 8})
	require.NoError(t, err)
	pool := e.pool(t)
	old, live := s.Stream("old"), s.Stream("live")
	require.NoError(t, old.Configure(c, store.StreamConfig{Retention: time.Hour}))
	publishEmpty(t, old, 10) // 1..10, events_p1
	clk.Advance(2 * time.Hour)
	require.Eventually(t, func() bool { // the store has seen 1..10 settled
		return len(readAll(t, old)) == 10
	}, 30*time.Second, 10*time.Millisecond)

	tx, err := s.Begin(c)
	require.NoError(t, err)
	_, err = live.PublishTx(c, tx, []byte("held")) // 11, open
	require.NoError(t, err)

	dropped := make(chan int64, 1)
	var seen atomic.Bool
	stmts.reset()
	go func() {
		// Passes run until one is seen waiting for its lock: a wait lasts
		// only the lock timeout, which a watcher on a loaded machine can
		// miss, and a pass that gave up unseen proves nothing yet. A pass
		// that drops (or fails) ends the loop at once.
		for {
			n, err := s.Maintenance().DropExpiredPartitions(c)
			if !assert.NoError(t, err) || n != 0 || seen.Load() {
				dropped <- n
				return
			}
		}
	}()
	// The drop is queued for its lock (the horizon settles past 10 as soon
	// as nothing older runs, so it gets there).
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(c, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			AND query LIKE '%drop_event_partition%')`).Scan(&waiting))
		return waiting
	}, 2*time.Minute, time.Millisecond)
	seen.Store(true)
	// It waits under a short lock timeout, set before the DROP: without
	// one it would wait for the held transaction for good.
	timeout, ok := stmts.arg("SetLockTimeout")
	if !ok {
		require.NoError(t, tx.Rollback(c)) // let the waiting drop finish
		<-dropped
		require.FailNow(t, "the drop waits for the table without a lock timeout")
	}
	d, err := time.ParseDuration(fmt.Sprint(timeout))
	require.NoError(t, err)
	assert.LessOrEqual(t, d, time.Second, "the drop's lock timeout is brief")
	queued := make(chan error, 1)
	go func() {
		_, err := live.Publish(c, []byte("queued"))
		queued <- err
	}()
	// The publisher's transaction is still open, so the drop ended by
	// giving up (its lock timeout, SQLSTATE 55P03), and the publish queued
	// behind it went through without waiting for the holder.
	assert.EqualValues(t, 0, <-dropped, "gave up: the partition stays")
	require.NoError(t, <-queued, "the publish queued behind the drop went through")
	assert.Equal(t, "55P03", stmts.code("DropEventPartition"), "the drop ended at its lock timeout")
	assert.Contains(t, partitionNames(t, e), "events_p1")
	require.NoError(t, tx.Commit(c))

	// Publishers running while the drop happens lose nothing.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var published []int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, err := live.Publish(c, []byte("x"))
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				published = append(published, id)
				mu.Unlock()
			}
		}()
	}
	require.Eventually(t, func() bool {
		_, err := s.Maintenance().DropExpiredPartitions(c)
		require.NoError(t, err)
		return !slices.Contains(partitionNames(t, e), "events_p1")
	}, 30*time.Second, 10*time.Millisecond)
	close(stop)
	wg.Wait()
	assert.Empty(t, readAll(t, old))
	slices.Sort(published)
	want := append([]int64{11, 12}, published...)
	require.Eventually(t, func() bool { return slices.Equal(want, readAll(t, live)) }, 30*time.Second, 10*time.Millisecond)
}
