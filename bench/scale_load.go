package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alkstore/alkstore/store"
)

// Test-data loaders of the scale section: set-based SQL run through
// Tx.Exec, one statement per kind of row, for the rows between two sizes.
// They write the system tables directly (the rows a long-lived application
// would have left there); nothing here is a library statement.

// scaleKinds lists each kind of unrelated row with its statement on each
// engine. Parameters: the first and last index of the rows to add, the
// payload, and "now" (timestamptz on Postgres, Unix microseconds on SQLite);
// a statement with no use for one still names it (length(...) >= 0), so
// every statement takes the same four. Events of the compacted stream come
// two per key (a superseded value, then the head: indexes 2k and 2k+1 for
// key k), and the heads statement, run right after, finds them as the
// stream's newest events.
var scaleKinds = []struct {
	what     string
	count    func(c scaleCounts) int64
	pg, lite string
}{
	{"events of stream big", func(c scaleCounts) int64 { return c.big },
		`INSERT INTO alkstore.events (id, stream, key, payload, txid, created_at)
		SELECT nextval('alkstore.event_offset_seq'), 'big', NULL, $3, pg_current_xact_id(), $4::timestamptz - (g % 3600) * interval '1 second'
		FROM generate_series($1::bigint, $2::bigint) g`,
		`WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2)
		INSERT INTO alk_events (stream, key, payload, created_at)
		SELECT 'big', NULL, ?3, ?4 - (i % 3600) * 1000000 FROM g`},
	{"events of compacted stream kv", func(c scaleCounts) int64 { return c.keys },
		`INSERT INTO alkstore.events (id, stream, key, payload, txid, created_at)
		SELECT nextval('alkstore.event_offset_seq'), 'kv', 'k' || (g / 2),
			CASE WHEN g % 2 = 1 AND (g / 2) % 10 = 0 THEN NULL ELSE $3::bytea END, pg_current_xact_id(), $4::timestamptz - interval '1 minute'
		FROM generate_series(2 * $1::bigint, 2 * $2::bigint + 1) g`,
		`WITH RECURSIVE g(i) AS (SELECT 2 * ?1 UNION ALL SELECT i + 1 FROM g WHERE i < 2 * ?2 + 1)
		INSERT INTO alk_events (stream, key, payload, created_at)
		SELECT 'kv', 'k' || (i / 2), CASE WHEN i % 2 = 1 AND (i / 2) % 10 = 0 THEN NULL ELSE ?3 END, ?4 - 60000000 FROM g`},
	{"heads of kv", func(c scaleCounts) int64 { return c.keys },
		`INSERT INTO alkstore.compaction_heads (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, tombstone_at)
		SELECT 'kv', e.key, max(e.id), 0, 0, $4, $4,
			CASE WHEN (array_agg(e.tomb ORDER BY e.id DESC))[1] THEN max(e.created_at) END -- a tombstone head's mark (00041)
		FROM (SELECT key, id, payload IS NULL AS tomb, created_at FROM alkstore.events WHERE stream = 'kv' ORDER BY id DESC LIMIT 2 * ($2::bigint - $1::bigint + 1)) e
		WHERE length($3::bytea) >= 0
		GROUP BY e.key`,
		`INSERT INTO alk_compaction_heads (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at)
		SELECT 'kv', e.key, max(e.id), 0, 0, ?4, ?4
		FROM (SELECT key, id FROM alk_events WHERE stream = 'kv' ORDER BY id DESC LIMIT 2 * (?2 - ?1 + 1)) e
		WHERE length(?3) >= 0
		GROUP BY e.key`},
	{"headless rows of kv", func(c scaleCounts) int64 { return c.headless },
		`INSERT INTO alkstore.compaction_heads (stream, key, created_at, updated_at, headless_at)
		SELECT 'kv', 'h' || g, $4, $4, $4 FROM generate_series($1::bigint, $2::bigint) g WHERE length($3::bytea) >= 0`,
		`WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2)
		INSERT INTO alk_compaction_heads (stream, key, created_at, updated_at)
		SELECT 'kv', 'h' || i, ?4, ?4 FROM g WHERE length(?3) >= 0`},
	{"delayed jobs of queue later", func(c scaleCounts) int64 { return c.delayed },
		`INSERT INTO alkstore.jobs (queue, payload, priority, state, max_attempts, created_at, run_at, expires_at)
		SELECT 'later', $3, (g % 3)::int, 'pending', 25, $4, $4::timestamptz + interval '1 day' + g * interval '1 ms',
			$4::timestamptz + interval '2 days'
		FROM generate_series($1::bigint, $2::bigint) g`,
		`WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2)
		INSERT INTO alk_jobs (queue, payload, priority, state, max_attempts, created_at, run_at, expires_at)
		SELECT 'later', ?3, i % 3, 'pending', 25, ?4, ?4 + 86400000000 + i * 1000, ?4 + 172800000000 FROM g`},
	{"dead jobs of queue old", func(c scaleCounts) int64 { return c.dead },
		`INSERT INTO alkstore.jobs (queue, payload, state, attempts, max_attempts, created_at, run_at, finished_at, last_error)
		SELECT 'old', $3, 'dead', 25, 25, $4::timestamptz - interval '1 hour', $4::timestamptz - interval '1 hour',
			$4::timestamptz - interval '1 minute', 'boom'
		FROM generate_series($1::bigint, $2::bigint) g`,
		`WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2)
		INSERT INTO alk_jobs (queue, payload, state, attempts, max_attempts, created_at, run_at, finished_at, last_error)
		SELECT 'old', ?3, 'dead', 25, 25, ?4 - 3600000000, ?4 - 3600000000, ?4 - 60000000, 'boom' FROM g`},
}

// loadScale adds the rows from one size to the next.
func loadScale(ctx context.Context, tx store.Tx, pg bool, from, to scaleCounts, now time.Time) error {
	payload := make([]byte, 64)
	for _, k := range scaleKinds {
		first, last := k.count(from)+1, k.count(to)
		if first > last {
			continue
		}
		q, at := k.lite, any(now.UnixMicro())
		if pg {
			q, at = k.pg, now
		}
		if _, err := tx.Exec(ctx, q, first, last, payload, at); err != nil {
			return fmt.Errorf("scale: loading %s: %w", k.what, err)
		}
	}
	return nil
}

func pgScaleTarget(ctx context.Context, dsn string) scaleTarget {
	s := must(store.Open(ctx, dsn, store.WithMaxConns(16)))
	conn := func(ctx context.Context, fn func(*pgx.Conn) error) error {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		return fn(c)
	}
	return scaleTarget{
		name: "pg", s: s,
		load: func(ctx context.Context, tx store.Tx, from, to scaleCounts, now time.Time) error {
			return loadScale(ctx, tx, true, from, to, now)
		},
		// What autovacuum does soon after a bulk load (VACUUM cannot run
		// in a transaction, hence a connection of its own).
		after: func(ctx context.Context) error {
			return conn(ctx, func(c *pgx.Conn) error { _, err := c.Exec(ctx, "VACUUM ANALYZE"); return err })
		},
		size: func(ctx context.Context) (int64, int64) {
			var n int64
			must0(conn(ctx, func(c *pgx.Conn) error {
				return c.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n)
			}))
			return n, 0
		},
	}
}

// scalePath is where the SQLite scale database goes: -scale-lite-db, or a
// file in the bench's temporary directory.
func scalePath(dir string) string {
	if *scaleKeep != "" {
		return *scaleKeep
	}
	return filepath.Join(dir, "scale.db")
}

func liteScaleTarget(ctx context.Context, path string) scaleTarget {
	// A kept database (-scale-lite-db) must start empty, like a temporary one.
	if _, err := os.Stat(path); err == nil {
		log.Fatalf("scale: %s exists; -scale-lite-db takes a new file", path)
	}
	return scaleTarget{
		name: "lite", s: must(store.Open(ctx, path)),
		load: func(ctx context.Context, tx store.Tx, from, to scaleCounts, now time.Time) error {
			return loadScale(ctx, tx, false, from, to, now)
		},
		// alkstore never runs ANALYZE on SQLite; the plans test covers
		// both the analyzed and the unanalyzed case.
		after: func(context.Context) error { return nil },
		size:  func(context.Context) (int64, int64) { return fileSizes(path) },
	}
}
