package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestLiteStatsStepOverHeadlessRowsOnce: SQLite's StreamHeadStats counted a
// stream's keys with a head on the primary key up to the limit, so it
// stepped over every headless row whose key sorts before them (half a
// million beside 10^7 rows in the scale bench, where Stats took 5× as
// long as beside 10^5). Here 20 × StatsCountLimit headless rows sort
// before a stream's 5 heads: the statement reads at most twice the limit
// of key rows and the limit of headless ones, and Stats reports the
// headless rows capped and the keys as the documented bound (key rows
// minus headless ones, up to the limit). Another stream with fewer
// headless rows than the limit gets exact counts.
//
// It reads the headless rows on their index alone: before schema 00037
// the index did not hold head_offset, the column the count's predicate
// names, so SQLite descended the head table's primary key (it has no
// rowid) for each of them, a cost that grows with the table (20,000 page
// lookups for 10,000 headless rows here; beside the scale bench's 10^7
// rows, most of what Stats added from 10^5).
func TestLiteStatsStepOverHeadlessRowsOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "lite" {
			return // PostgreSQL's twin counted this way already (plans_test.go bounds its buffers)
		}
		s := e.open(t)
		c := ctx(t)
		db := e.sqlDB(t)
		now := time.Now().UnixMicro()
		lim := store.StatsCountLimit
		_, err := db.ExecContext(c, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
			INSERT INTO alk_compaction_heads (stream, key, created_at, updated_at) SELECT 'kv', 'a' || i, ?, ? FROM g`, 20*lim, now, now)
		require.NoError(t, err)
		for _, st := range []string{"kv", "few"} {
			for i := range 5 {
				_, err := s.Stream(st).PublishWithKey(c, "z"+string(rune('0'+i)), []byte("v"))
				require.NoError(t, err)
			}
		}
		for i := range 3 {
			_, err := db.ExecContext(c, `INSERT INTO alk_compaction_heads (stream, key, created_at, updated_at) VALUES ('few', ?, ?, ?)`,
				"a"+string(rune('0'+i)), now, now)
			require.NoError(t, err)
		}

		sqlText, params := generatedQuery(t, "lite", "StreamHeadStats")
		conn, err := db.Conn(c)
		require.NoError(t, err)
		defer conn.Close()
		vals := make([]any, len(params))
		for i, p := range params {
			switch p {
			case "cap":
				vals[i] = int64(lim)
			case "now":
				vals[i] = now
			default:
				t.Fatalf("StreamHeadStats: unexpected parameter %s", p)
			}
		}
		r := runLite(t, conn, "StreamHeadStats", sqlText, params, vals, map[string]bool{})
		t.Logf("StreamHeadStats: %d VM steps; plan: %v", r.steps, r.plan)
		// Three times the limit of rows read is 270,000 steps here; stepping
		// over the 200,000 headless rows of kv to its heads was 900,000.
		assert.Less(t, r.steps, int64(400_000), "StreamHeadStats steps over the headless rows")
		t.Logf("StreamHeadStats: %d pages", r.pages)
		assert.Contains(t, r.plan, "SEARCH h USING COVERING INDEX alk_compaction_heads_headless (stream=?)",
			"StreamHeadStats reads the head table for its headless rows")
		// About 300 pages (twice the limit of key rows, the limit of
		// headless entries); a lookup in the table for each headless row
		// is 20,000 more.
		assert.Less(t, r.pages, int64(2_000), "StreamHeadStats looks up each headless row in the head table")

		stats, err := s.Stats(c)
		require.NoError(t, err)
		byName := map[string]store.StreamStats{}
		for _, st := range stats.Streams {
			byName[st.Name] = st
		}
		assert.EqualValues(t, lim, byName["kv"].Headless, "capped")
		assert.EqualValues(t, lim, byName["kv"].Keys, "with the headless rows at the limit, key rows minus headless ones")
		assert.EqualValues(t, 3, byName["few"].Headless)
		assert.EqualValues(t, 5, byName["few"].Keys, "exact")
	})
}
