package tests

import (
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// TestTombstoneHeadsMigrateBothWays: schemas 00040, 00041 and 00042 down and up
// again on a database holding heads of every kind, over more than one
// partition of events. Up, a head's tombstone_at is its event's created_at
// exactly when that event is a tombstone (a value over a tombstone, a
// tombstone over a tombstone, a tombstone over a value, a headless row, a
// non-compacted stream's tombstone), compaction_heads_tombstone_at is a
// valid index, and no index of events or of a partition filters
// tombstones. Down, events_tombstones is a valid partitioned index again,
// on every partition, and compaction_heads has no tombstone_at. An Up that
// stopped after building the heads' index, before dropping
// events_tombstones, completes on the next run, and one that stopped
// before goose recorded it runs again harmlessly. The pass then deletes
// the expired tombstone heads. PostgreSQL only (SQLite's are no-ops).
// Fails on 00039's schema (no tombstone_at).
func TestTombstoneHeadsMigrateBothWays(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	clk := &offsetClock{}
	s := e.open(t, store.WithClock(clk.Now))
	kv := s.Stream("kv")
	require.NoError(t, kv.Configure(c, store.StreamConfig{Compacted: true, TombstoneRetention: time.Hour, MinCompactionLag: time.Hour}))
	plain := s.Stream("plain")
	pub := func(st *store.Stream, key string, payload []byte) {
		t.Helper()
		_, err := st.PublishWithKey(c, key, payload)
		require.NoError(t, err)
	}
	pub(kv, "value", []byte("v"))
	pub(kv, "tomb-over-value", []byte("v"))
	pub(kv, "tomb-over-value", nil)
	pub(kv, "value-over-tomb", nil)
	pub(kv, "value-over-tomb", []byte("v"))
	pub(kv, "tomb-over-tomb", nil)
	pub(kv, "tomb-over-tomb", nil)
	pub(plain, "tomb", nil)
	tx, err := s.Begin(c)
	require.NoError(t, err)
	_, err = kv.Key("headless").LockCompactionHeadTx(c, tx) // a headless row
	require.NoError(t, err)
	require.NoError(t, tx.Commit(c))
	db := e.sqlDB(t)
	// A second partition holding events: the Down builds each one's index.
	_, err = db.ExecContext(c, `SELECT alkstore.extend_event_partitions(1000, (SELECT last_value FROM alkstore.event_offset_seq) + 1)`)
	require.NoError(t, err)
	pub(kv, "tomb-later", nil)
	pub(kv, "value-later", []byte("v"))
	fsys, err := schema.Postgres()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(schema.PostgresVersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)

	count := func(q string) int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRowContext(c, q).Scan(&n), q)
		return n
	}
	tombIndexes := `SELECT count(*) FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = 'alkstore' AND t.relname LIKE 'events%' AND pg_get_expr(i.indpred, i.indrelid) LIKE '%payload IS NULL%'`
	partitions := count(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'alkstore.events'::regclass`)
	require.GreaterOrEqual(t, partitions, 2)
	up := func() {
		t.Helper()
		assert.Zero(t, count(tombIndexes), "indexes of events filtering tombstones")
		// 00042 replaced 00041's index with one that pages by key.
		assert.Equal(t, 1, count(`SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass('alkstore.compaction_heads_tombstones') AND indisvalid`))
		assert.Zero(t, count(`SELECT count(*) FROM pg_class WHERE oid = to_regclass('alkstore.compaction_heads_tombstone_at')`))
		assert.Zero(t, count(`SELECT count(*) FROM alkstore.compaction_heads h LEFT JOIN alkstore.events e ON e.id = h.head_offset
			WHERE (h.tombstone_at IS NOT NULL) <> (h.head_offset IS NOT NULL AND e.payload IS NULL) OR h.tombstone_at <> e.created_at`),
			"heads whose tombstone mark is wrong")
		assert.Equal(t, 4, count(`SELECT count(*) FROM alkstore.compaction_heads WHERE tombstone_at IS NOT NULL`))
	}
	up()

	_, err = p.DownTo(c, 39)
	require.NoError(t, err)
	assert.Equal(t, partitions+1, count(tombIndexes), "events_tombstones and each partition's")
	assert.Equal(t, 1, count(`SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass('alkstore.events_tombstones') AND indisvalid`))
	assert.Equal(t, partitions, count(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'alkstore.events_tombstones'::regclass`))
	assert.Zero(t, count(`SELECT count(*) FROM pg_attribute WHERE attrelid = 'alkstore.compaction_heads'::regclass AND attname = 'tombstone_at' AND NOT attisdropped`))
	_, err = p.Up(c)
	require.NoError(t, err)
	up()

	// Stopped after the heads' index, before the drop: 00041's Down, then
	// its index built by hand and its marks cleared.
	_, err = p.DownTo(c, 40)
	require.NoError(t, err)
	for _, q := range []string{
		`UPDATE alkstore.compaction_heads SET tombstone_at = NULL`,
		`CREATE INDEX compaction_heads_tombstone_at ON alkstore.compaction_heads (stream, tombstone_at) WHERE tombstone_at IS NOT NULL`,
	} {
		_, err = db.ExecContext(c, q)
		require.NoError(t, err, q)
	}
	_, err = p.Up(c)
	require.NoError(t, err)
	up()
	// 00042 down: 00041's index is back, the paging one gone.
	_, err = p.DownTo(c, 41)
	require.NoError(t, err)
	assert.Equal(t, 1, count(`SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass('alkstore.compaction_heads_tombstone_at') AND indisvalid`))
	assert.Zero(t, count(`SELECT count(*) FROM pg_class WHERE oid = to_regclass('alkstore.compaction_heads_tombstones')`))
	// Stopped before goose recorded it: everything ran; again.
	_, err = db.ExecContext(c, `DELETE FROM alkstore.goose_db_version WHERE version_id = 41`)
	require.NoError(t, err)
	_, err = p.Up(c)
	require.NoError(t, err)
	up()
	// 00042 stopped before goose recorded it, and again with an invalid
	// build of its index left (a CREATE INDEX CONCURRENTLY that failed):
	// each runs again harmlessly (with the versions after it, which goose
	// would otherwise call 42 missing).
	_, err = db.ExecContext(c, `DELETE FROM alkstore.goose_db_version WHERE version_id >= 42`)
	require.NoError(t, err)
	_, err = p.Up(c)
	require.NoError(t, err)
	up()
	for _, q := range []string{
		`DELETE FROM alkstore.goose_db_version WHERE version_id >= 42`,
		`CREATE INDEX compaction_heads_tombstone_at ON alkstore.compaction_heads (stream, tombstone_at) WHERE tombstone_at IS NOT NULL`,
		`UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'alkstore.compaction_heads_tombstones'::regclass`,
	} {
		_, err = db.ExecContext(c, q)
		require.NoError(t, err, q)
	}
	_, err = p.Up(c)
	require.NoError(t, err)
	up()

	clk.Advance(2 * time.Hour)
	n, err := compactThenExpireTombstones(c, s.Maintenance(), 100)
	require.NoError(t, err)
	assert.EqualValues(t, 3, n, "kv's three tombstone heads (not plain's: not compacted)")
	for _, k := range []string{"value", "value-over-tomb", "value-later"} {
		h, err := kv.Key(k).CompactionHead(c)
		require.NoError(t, err, k)
		assert.Equal(t, "v", string(h.Payload), k)
	}
}
