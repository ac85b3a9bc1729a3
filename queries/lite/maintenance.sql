-- Maintenance (SQLite): the janitor's bounded passes. The writer slot
-- serializes them with every other write; the janitor bounds each pass by
-- its time budget so it never waits long for a slot a transaction holds.
-- Walks of a stream name their index (INDEXED BY): with ANALYZE statistics
-- SQLite may otherwise walk the rowid in offset order and filter every
-- other stream's rows (see tests/plans_test.go).

-- name: DeleteExpiredHeadless :execrows
-- A stream's headless rows unused since @cutoff (its TTL ago; a later lock
-- recreates them). Each stream with headless rows (StreamsWithHeadless)
-- is a range of alk_compaction_heads_headless, oldest first.
DELETE FROM alk_compaction_heads
WHERE alk_compaction_heads.head_offset IS NULL
  AND (alk_compaction_heads.stream, alk_compaction_heads.key) IN (
    SELECT x.stream, x.key FROM alk_compaction_heads x
    WHERE x.stream = sqlc.arg(stream) AND x.head_offset IS NULL
      AND x.updated_at < sqlc.arg(cutoff)
    ORDER BY x.stream, x.updated_at
    LIMIT CAST(sqlc.arg(batch) AS INTEGER));

-- name: MaintainedStreams :many
-- The streams the janitor works on: those with a retention, and compacted
-- ones, with their settings (a small table, read whole).
SELECT name, compacted, retention_us, min_compaction_lag_us, tombstone_retention_us, compacted_through
FROM alk_streams
WHERE retention_us IS NOT NULL OR compacted
ORDER BY name;

-- name: RetentionWindow :one
-- The stream's oldest @lim events, walked on alk_events_stream_id from its
-- first, skipping a compacted stream's current heads, which retention
-- spares. [first_id, upto] is the prefix of the window past the cutoff
-- (upto < first_id: none is).
SELECT CAST(COALESCE(min(w.id), 0) AS INTEGER) AS first_id,
       CAST(COALESCE(min(CASE WHEN w.fresh THEN w.id END) - 1, max(w.id), -1) AS INTEGER) AS upto
FROM (SELECT x.id, x.created_at >= sqlc.arg(cutoff) AS fresh FROM alk_events x INDEXED BY alk_events_stream_id
      WHERE x.stream = sqlc.arg(stream)
        AND NOT (CAST(sqlc.arg(compacted) AS INTEGER) AND EXISTS (SELECT 1 FROM alk_compaction_heads h
                 WHERE h.stream = x.stream AND h.key = x.key AND h.head_offset = x.id))
      ORDER BY x.stream, x.id
      LIMIT CAST(sqlc.arg(lim) AS INTEGER)) w;

-- name: UnheadRetained :exec
-- Runs before DeleteRetained, in its transaction, on a stream that is not
-- compacted: the heads among the events it deletes become headless (see
-- UnheadTrimmed).
UPDATE alk_compaction_heads
SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL, updated_at = sqlc.arg(now)
WHERE alk_compaction_heads.head_offset >= CAST(sqlc.arg(first_id) AS INTEGER) AND alk_compaction_heads.head_offset <= CAST(sqlc.arg(upto) AS INTEGER)
  AND (alk_compaction_heads.stream, alk_compaction_heads.key) IN (
    SELECT x.stream, x.key FROM alk_events e INDEXED BY alk_events_stream_id
    JOIN alk_compaction_heads x ON x.stream = e.stream AND x.key = e.key AND x.head_offset = e.id
    WHERE e.stream = sqlc.arg(stream) AND e.id >= sqlc.arg(first_id) AND e.id <= sqlc.arg(upto)
      AND e.key IS NOT NULL);

-- name: DeleteRetained :execrows
-- The stream's events in [first_id, upto] (a RetentionWindow of @lim
-- events), sparing a compacted stream's current heads. A head row never points at a deleted
-- event.
DELETE FROM alk_events
WHERE id IN (
    SELECT x.id FROM alk_events x INDEXED BY alk_events_stream_id
    WHERE x.stream = sqlc.arg(stream) AND x.id >= sqlc.arg(first_id) AND x.id <= sqlc.arg(upto)
      AND NOT EXISTS (SELECT 1 FROM alk_compaction_heads h
                      WHERE h.stream = x.stream AND h.key = x.key AND h.head_offset = x.id)
    ORDER BY x.stream, x.id
    LIMIT CAST(sqlc.arg(lim) AS INTEGER));

-- name: CompactionWindow :one
-- The next @lim events of a compacted stream after the compaction cursor:
-- upto is the end of the window's prefix older than the stream's minimum
-- compaction lag (@after: none is). Every committed offset is settled on
-- SQLite, so the walk needs no horizon (the caller passes the largest).
SELECT CAST(COALESCE(min(CASE WHEN w.fresh THEN w.id END) - 1, max(w.id), sqlc.arg(after)) AS INTEGER) AS upto
FROM (SELECT x.id, x.created_at >= sqlc.arg(cutoff) AS fresh FROM alk_events x INDEXED BY alk_events_stream_id
      WHERE x.stream = sqlc.arg(stream) AND x.id > sqlc.arg(after) AND x.id <= sqlc.arg(horizon)
      ORDER BY x.stream, x.id
      LIMIT CAST(sqlc.arg(lim) AS INTEGER)) w;

-- name: CompactWindow :execrows
-- For each key published in (after, upto], its versions other than its
-- head (found on alk_events_key) older than the lag: those before the head,
-- and those after it that lost to it (a lower rank, see the winner rule),
-- which a `<` kept for good; and every version of a key without a head
-- (a headless row, or none: the stream was not compacted when a trim or
-- retention deleted the key's head, so it reads as having no value, and
-- a version that lost to that head stayed; compact53). Every superseded
-- event is older than its head or is itself in a window, so it goes when
-- the cursor walks past the later of the two.
DELETE FROM alk_events
WHERE id IN (
    SELECT x.id
    FROM (SELECT DISTINCT e.key FROM alk_events e INDEXED BY alk_events_stream_id
          WHERE e.stream = sqlc.arg(stream) AND e.id > sqlc.arg(after) AND e.id <= sqlc.arg(upto)
            AND e.key IS NOT NULL) k
    LEFT JOIN alk_compaction_heads h ON h.stream = sqlc.arg(stream) AND h.key = k.key
    JOIN alk_events x INDEXED BY alk_events_key ON x.stream = sqlc.arg(stream) AND x.key = k.key AND x.id IS NOT h.head_offset
    WHERE x.created_at < sqlc.arg(cutoff)
    LIMIT CAST(sqlc.arg(batch) AS INTEGER));

-- name: AdvanceCompaction :exec
UPDATE alk_streams SET compacted_through = sqlc.arg(upto)
WHERE name = sqlc.arg(stream) AND compacted_through < sqlc.arg(upto);

-- name: ExpiredTombstones :many
-- A page of a compacted stream's tombstone events after @after and at or
-- below its compaction cursor (@through), oldest first
-- (alk_events_tombstones), each with whether it is still its key's head.
-- The caller deletes the heads older than the cutoff (row and event) and
-- reads the next page until it has its batch, the stream's tombstones end,
-- or a whole page holds none older than the cutoff. Compaction finds a
-- key's older versions through its head row, so a tombstone goes only once
-- the cursor has walked past it, which deleted them: deleted before, it
-- left them without a head row, and a replay saw the deleted key alive for
-- good. Tombstones superseded by a later event and not yet compacted (the
-- cursor walked them while they were heads) are stepped over: taken as the
-- page's only candidates, as before, they could fill every batch ahead of
-- the expired heads, which then waited for CompactSuperseded. No ORDER BY
-- outside: the rows come in the page's order (the join's outer loop), and
-- the caller takes the page's largest offset as the next @after; sorting
-- them again cost a temporary B-tree (a page of 500 in the plan test:
-- 19,024 VM steps with it, 15,021 without; the former statement,
-- returning the expired heads alone, 12,522).
SELECT t.id, t.key, t.created_at, CAST(h.head_offset IS NOT NULL AS INTEGER) AS head
FROM (SELECT x.id, x.key, x.created_at FROM alk_events x INDEXED BY alk_events_tombstones
      WHERE x.stream = sqlc.arg(stream) AND x.payload IS NULL AND x.key IS NOT NULL AND x.id > sqlc.arg(after)
        AND x.id <= CAST(sqlc.arg(through) AS INTEGER)
      ORDER BY x.stream, x.id
      LIMIT CAST(sqlc.arg(batch) AS INTEGER)) t
LEFT JOIN alk_compaction_heads h ON h.stream = sqlc.arg(stream) AND h.key = t.key AND h.head_offset = t.id;

-- name: DeleteKeyOtherVersions :execrows
-- An expiring tombstone's key: its versions other than the tombstone (the
-- ones before it, and later ones that lost to it by rank) older than the
-- compaction lag's cutoff, found on alk_events_key. Compaction deletes them
-- when its cursor walks them and the tombstone, but not one that was
-- younger than the lag then (the lag was raised since). Deleting the
-- tombstone's head row without them left them with no head row through
-- which anything finds them, and a replay saw the deleted key alive.
DELETE FROM alk_events
WHERE id IN (SELECT x.id FROM alk_events x INDEXED BY alk_events_key
             WHERE x.stream = sqlc.arg(stream) AND x.key = sqlc.arg(key) AND x.id <> CAST(sqlc.arg(head_offset) AS INTEGER)
               AND x.created_at < sqlc.arg(cutoff));

-- name: KeyHasOtherVersions :one
-- Whether an expiring tombstone's key still has a version other than the
-- tombstone (DeleteKeyOtherVersions left it: younger than the lag): then the
-- tombstone stays, so the key's head row does too.
SELECT EXISTS (SELECT 1 FROM alk_events y INDEXED BY alk_events_key
               WHERE y.stream = sqlc.arg(stream) AND y.key = sqlc.arg(key)
                 AND y.id <> CAST(sqlc.arg(head_offset) AS INTEGER)) AS remain;

-- name: DeleteHead :exec
DELETE FROM alk_compaction_heads WHERE stream = @stream AND key = @key AND head_offset = CAST(@head_offset AS INTEGER);

-- name: DeleteEvent :exec
DELETE FROM alk_events WHERE id = @id;

-- name: SweepAllExpiredJobs :execrows
-- Expired jobs of every queue end expired: pending ones, and running ones
-- whose claim lapsed. One range of alk_jobs_expiring_by_time up to now
-- (since schema 00025 it holds the running jobs too), in expiry order, so
-- jobs that expire later are never read; the running jobs still in flight
-- in it are skipped. (As two halves, the running one had no index without
-- a queue: it walked alk_jobs_running whole.)
UPDATE alk_jobs
SET state = 'expired', finished_at = CAST(sqlc.arg(now) AS INTEGER), last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT x.id FROM alk_jobs x
             WHERE x.expires_at IS NOT NULL AND x.finished_at IS NULL
               AND x.expires_at <= sqlc.arg(now)
               AND (x.state = 'pending' OR (x.state = 'running' AND x.claim_expires_at <= sqlc.arg(now)))
             ORDER BY x.expires_at
             LIMIT CAST(sqlc.arg(batch) AS INTEGER));

-- name: DeleteFinishedJobs :execrows
-- Finished jobs past their queue's retention: completed ones older than
-- completed_retention_us (all of them once it is 0 again), dead, cancelled
-- and expired ones older than dead_retention_us (none while it is NULL).
-- Driven from the queues table (a queue without a row keeps no completed
-- jobs and keeps its dead ones): per queue one range of alk_jobs_finished
-- for completed jobs and one per final state for the others (CROSS JOIN
-- fixes that loop order; the index's predicate, repeated, lets SQLite use
-- the partial index).
DELETE FROM alk_jobs
WHERE id IN (
    SELECT y.id FROM alk_queues q CROSS JOIN alk_jobs y
    WHERE y.queue = q.name AND y.state = 'completed'
      AND y.finished_at IS NOT NULL
      AND y.finished_at < sqlc.arg(now) - q.completed_retention_us
    UNION ALL
    SELECT y.id FROM alk_queues q CROSS JOIN alk_jobs y
    WHERE q.dead_retention_us IS NOT NULL
      AND y.queue = q.name AND y.state IN ('cancelled', 'expired', 'dead')
      AND y.finished_at IS NOT NULL
      AND y.finished_at < sqlc.arg(now) - q.dead_retention_us
    LIMIT CAST(sqlc.arg(batch) AS INTEGER));

-- Observability (Stats).

-- name: StreamEventStats :many
-- Every stream with events, by a loose scan of alk_events_stream_id (one
-- probe per stream); its newest offset (exact) and its events counted up
-- to @cap.
WITH RECURSIVE st(stream) AS (
    SELECT min(x.stream) FROM alk_events x
    UNION ALL
    SELECT (SELECT min(x.stream) FROM alk_events x WHERE x.stream > st.stream)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT CAST(st.stream AS TEXT) AS stream,
       CAST(COALESCE((SELECT max(e.id) FROM alk_events e WHERE e.stream = st.stream), 0) AS INTEGER) AS head_offset,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_events e WHERE e.stream = st.stream LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS events
FROM st WHERE st.stream IS NOT NULL ORDER BY st.stream;

-- name: StreamHeadStats :many
-- Every stream with key rows (a loose scan of the primary key): its first
-- twice @cap key rows counted on the primary key (key_rows), its headless
-- rows counted up to @cap on alk_compaction_heads_headless, and its oldest
-- headless row (exact: the first entry of alk_compaction_heads_headless).
-- The store's keys with a head are key_rows minus headless, up to @cap:
-- exact while the headless rows are fewer than @cap (PostgreSQL's twin
-- counts the same). Counting the keys with a head directly read every
-- headless row that sorts before them (half a million beside 10^7 rows);
-- this reads three times @cap index entries at most. The headless index
-- holds head_offset (schema 00037), so both headless reads are covering:
-- without it each entry cost a descent of the primary key, which grows
-- with the table (10,000 descents of a million heads beside 10^7 rows).
WITH RECURSIVE st(stream) AS (
    SELECT min(x.stream) FROM alk_compaction_heads x
    UNION ALL
    SELECT (SELECT min(x.stream) FROM alk_compaction_heads x WHERE x.stream > st.stream)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT CAST(st.stream AS TEXT) AS stream,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_compaction_heads h WHERE h.stream = st.stream
                                   LIMIT 2 * CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS key_rows,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_compaction_heads h INDEXED BY alk_compaction_heads_headless
                                   WHERE h.stream = st.stream AND h.head_offset IS NULL
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS headless,
       CAST(COALESCE((SELECT min(h.updated_at) FROM alk_compaction_heads h INDEXED BY alk_compaction_heads_headless
                      WHERE h.stream = st.stream AND h.head_offset IS NULL), sqlc.arg(now)) AS INTEGER) AS oldest_headless
FROM st WHERE st.stream IS NOT NULL ORDER BY st.stream;

-- name: ConsumerLags :many
-- Lag: the consumer's events still unread, counted up to @cap.
SELECT o.stream, o.consumer, o.committed_offset,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_events e
                                   WHERE e.stream = o.stream AND e.id > o.committed_offset LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS unread
FROM alk_consumer_offsets o ORDER BY o.stream, o.consumer;

-- name: StreamsWithHeadless :many
-- A loose scan of alk_compaction_heads_headless: one probe per stream.
WITH RECURSIVE st(stream) AS (
    SELECT min(x.stream) FROM alk_compaction_heads x WHERE x.head_offset IS NULL
    UNION ALL
    SELECT (SELECT min(x.stream) FROM alk_compaction_heads x
            WHERE x.head_offset IS NULL AND x.stream > st.stream)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT CAST(st.stream AS TEXT) AS stream, CAST(COALESCE(s.headless_ttl_us, 3600000000) AS INTEGER) AS headless_ttl_us
FROM st LEFT JOIN alk_streams s ON s.name = st.stream
WHERE st.stream IS NOT NULL;

-- name: CompactedStreams :many
SELECT name FROM alk_streams WHERE compacted ORDER BY name;

-- name: JobQueues :many
-- Every queue with pending, running or finished jobs: a loose scan of each
-- of their partial indexes (one probe per queue).
WITH RECURSIVE p AS (
    SELECT min(x.queue) AS queue FROM alk_jobs x WHERE x.state = 'pending'
    UNION ALL
    SELECT (SELECT min(x.queue) FROM alk_jobs x WHERE x.state = 'pending' AND x.queue > p.queue)
    FROM p WHERE p.queue IS NOT NULL
), r AS (
    SELECT min(x.queue) AS queue FROM alk_jobs x WHERE x.state = 'running'
    UNION ALL
    SELECT (SELECT min(x.queue) FROM alk_jobs x WHERE x.state = 'running' AND x.queue > r.queue)
    FROM r WHERE r.queue IS NOT NULL
), d AS (
    SELECT min(x.queue) AS queue FROM alk_jobs x WHERE x.finished_at IS NOT NULL
    UNION ALL
    SELECT (SELECT min(x.queue) FROM alk_jobs x WHERE x.finished_at IS NOT NULL AND x.queue > d.queue)
    FROM d WHERE d.queue IS NOT NULL
)
SELECT CAST(q.queue AS TEXT) AS queue
FROM (SELECT p.queue AS queue FROM p UNION SELECT r.queue FROM r UNION SELECT d.queue FROM d) AS q
WHERE q.queue IS NOT NULL ORDER BY q.queue;

-- name: PartitionsDenied :one
-- SQLite has no partitions (see the PostgreSQL twin): nothing is denied.
SELECT CAST(0 AS INTEGER) AS denied;
