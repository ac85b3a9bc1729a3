package tests

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Left open by the fifty-third session.

// TestHeldCompactionIsLogged: a version of a compacted stream's next window
// held by another transaction (here a row lock, as a janitor frozen
// mid-window or a connection that died with its transaction open holds
// one) keeps the stream's cursor, so nothing of it is compacted and none
// of its tombstones expire while the passes report 0. The store warns,
// naming the stream, once the cursor has stayed over
// CompactionHeldPasses passes spanning CompactionHeldAfter (not before:
// one pass that meets a version deleted since its snapshot is not a
// stall), once per CompactionHeldRepeat, and logs one line when the
// cursor moves again. PostgreSQL only: on SQLite a transaction holds the
// one writer, so no compaction runs beside it. Fails on main with no
// warning logged.
func TestHeldCompactionIsLogged(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	var logs syncBuffer
	s, st, clk := compactedOnClock(t, e, "kv-held", store.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	db := e.sqlDB(t)
	v1 := supersedeAndSettle(t, c, s, st, clk, "k", "x")

	held, err := db.BeginTx(c, nil)
	require.NoError(t, err)
	defer func() { _ = held.Rollback() }()
	_, err = held.ExecContext(c, `SELECT id FROM alkstore.events WHERE id = $1 FOR UPDATE`, v1)
	require.NoError(t, err)

	cursor := func() int64 {
		var cur int64
		require.NoError(t, db.QueryRowContext(c, `SELECT compacted_through FROM alkstore.streams WHERE name = 'kv-held'`).Scan(&cur))
		return cur
	}
	const warning = "compaction of the stream is held back"
	warnings := func() int { return strings.Count(logs.String(), warning) }
	pass := func() {
		t.Helper()
		n, err := s.Maintenance().CompactSuperseded(c, 100)
		require.NoError(t, err)
		assert.Zero(t, n, "v1 is held; v2 is the head")
	}
	stuck := cursor()
	for range store.CompactionHeldPasses {
		pass()
	}
	require.Equal(t, stuck, cursor(), "the cursor stays below the held version")
	require.Zero(t, warnings(), "not yet: %d passes within a moment", store.CompactionHeldPasses)

	clk.Advance(store.CompactionHeldAfter)
	pass()
	out := logs.String()
	require.Equal(t, 1, warnings(), "held over %d passes and %v: %s", store.CompactionHeldPasses+1, store.CompactionHeldAfter, out)
	assert.Contains(t, out, "stream=kv-held")
	assert.Contains(t, out, "level=WARN")
	pass()
	clk.Advance(store.CompactionHeldRepeat / 2)
	pass()
	require.Equal(t, 1, warnings(), "one warning per CompactionHeldRepeat")
	clk.Advance(store.CompactionHeldRepeat / 2)
	pass()
	require.Equal(t, 2, warnings(), "again after CompactionHeldRepeat")
	require.Equal(t, stuck, cursor())

	require.NoError(t, held.Rollback())
	n, err := s.Maintenance().CompactSuperseded(c, 100)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "v1 goes once the lock is gone")
	assert.Greater(t, cursor(), stuck)
	assert.Contains(t, logs.String(), "compaction of the stream resumed")
	assert.Equal(t, []string{"k=v2", "other=x"}, replayKeyed(t, c, st))
	pass()
	assert.Equal(t, 2, warnings())
	assert.Equal(t, 1, strings.Count(logs.String(), "compaction of the stream resumed"))
}
