-- Maintenance (SQLite): the janitor's bounded passes. The writer slot
-- serializes them with every other write; the janitor bounds each pass by
-- its time budget so it never waits long for a slot a transaction holds.

-- name: DeleteExpiredHeadless :execrows
-- Headless rows unused for longer than their stream's TTL (a later lock
-- recreates them).
DELETE FROM alk_compaction_heads
WHERE head_offset IS NULL
  AND (stream, key) IN (
    SELECT x.stream, x.key FROM alk_compaction_heads x
    LEFT JOIN alk_streams s ON s.name = x.stream
    WHERE x.head_offset IS NULL
      AND x.updated_at < sqlc.arg(now) - COALESCE(s.headless_ttl_us, 3600000000)
    LIMIT sqlc.arg(batch));

-- name: UnheadExpired :exec
-- Runs before ApplyRetention, in its transaction: on streams that are not
-- compacted, heads whose events are past retention become headless (see
-- UnheadTrimmed).
UPDATE alk_compaction_heads
SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL, updated_at = sqlc.arg(now)
WHERE head_offset IS NOT NULL
  AND (stream, key) IN (
    SELECT x.stream, x.key FROM alk_compaction_heads x
    JOIN alk_streams s ON s.name = x.stream AND NOT s.compacted AND s.retention_us IS NOT NULL
    JOIN alk_events e ON e.id = x.head_offset
    WHERE e.created_at < sqlc.arg(now) - s.retention_us
    ORDER BY x.stream, x.key
    LIMIT sqlc.arg(batch));

-- name: ApplyRetention :execrows
-- Events past their stream's retention. Current heads are spared: those of
-- a compacted stream (UnheadExpired made the others headless). A head row
-- never points at a deleted event.
DELETE FROM alk_events
WHERE id IN (
    SELECT x.id FROM alk_events x
    JOIN alk_streams s ON s.name = x.stream
    WHERE s.retention_us IS NOT NULL
      AND x.created_at < CAST(sqlc.arg(now) AS INTEGER) - s.retention_us
      AND NOT EXISTS (SELECT 1 FROM alk_compaction_heads h
                      WHERE h.stream = x.stream AND h.key = x.key AND h.head_offset = x.id)
    LIMIT sqlc.arg(batch));

-- name: CompactSuperseded :execrows
-- Keyed events of compacted streams that a newer head superseded, once
-- older than the stream's minimum compaction lag.
DELETE FROM alk_events
WHERE id IN (
    SELECT x.id FROM alk_events x
    JOIN alk_streams s ON s.name = x.stream AND s.compacted
    JOIN alk_compaction_heads h ON h.stream = x.stream AND h.key = x.key
    WHERE x.key IS NOT NULL AND h.head_offset > x.id
      AND x.created_at < sqlc.arg(now) - s.min_compaction_lag_us
    LIMIT sqlc.arg(batch));

-- name: ExpiredTombstones :many
-- Heads of compacted streams that are tombstones older than the stream's
-- tombstone retention: the key is deleted for good (row and event).
SELECT h.stream, h.key, CAST(h.head_offset AS INTEGER) AS head_offset
FROM alk_compaction_heads h
JOIN alk_streams s ON s.name = h.stream AND s.compacted
JOIN alk_events e ON e.id = h.head_offset
WHERE e.payload IS NULL
  AND e.created_at < sqlc.arg(now) - s.tombstone_retention_us
LIMIT sqlc.arg(batch);

-- name: DeleteHead :exec
DELETE FROM alk_compaction_heads WHERE stream = @stream AND key = @key AND head_offset = CAST(@head_offset AS INTEGER);

-- name: DeleteEvent :exec
DELETE FROM alk_events WHERE id = @id;

-- name: SweepAllExpiredJobs :execrows
-- Expired jobs of every queue end expired: pending ones, and running ones
-- whose claim lapsed.
UPDATE alk_jobs
SET state = 'expired', finished_at = CAST(sqlc.arg(now) AS INTEGER), last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT x.id FROM alk_jobs x
             WHERE x.state = 'pending' AND x.expires_at IS NOT NULL AND x.expires_at <= sqlc.arg(now)
             UNION ALL
             SELECT r.id FROM alk_jobs r
             WHERE r.state = 'running' AND r.claim_expires_at <= sqlc.arg(now)
               AND r.expires_at IS NOT NULL AND r.expires_at <= sqlc.arg(now)
             LIMIT sqlc.arg(batch));

-- name: DeleteFinishedJobs :execrows
-- Finished jobs past their queue's retention: completed ones older than
-- completed_retention_us (all of them once it is 0 again), dead, cancelled
-- and expired ones older than dead_retention_us (none while it is NULL).
-- Driven from the queues table (a queue without a row keeps no completed
-- jobs and keeps its dead ones): per queue one range of alk_jobs_finished
-- for completed jobs and one per final state for the others (CROSS JOIN
-- fixes that loop order; the literal state list lets SQLite use the
-- partial index).
DELETE FROM alk_jobs
WHERE id IN (
    SELECT y.id FROM alk_queues q CROSS JOIN alk_jobs y
    WHERE y.queue = q.name AND y.state = 'completed'
      AND y.state IN ('completed', 'cancelled', 'expired', 'dead')
      AND y.finished_at < sqlc.arg(now) - q.completed_retention_us
    UNION ALL
    SELECT y.id FROM alk_queues q CROSS JOIN alk_jobs y
    WHERE q.dead_retention_us IS NOT NULL
      AND y.queue = q.name AND y.state IN ('cancelled', 'expired', 'dead')
      AND y.state IN ('completed', 'cancelled', 'expired', 'dead')
      AND y.finished_at < sqlc.arg(now) - q.dead_retention_us
    LIMIT sqlc.arg(batch));

-- Observability (Stats).

-- name: StreamEventStats :many
SELECT stream, CAST(max(id) AS INTEGER) AS head_offset, CAST(count(*) AS INTEGER) AS events
FROM alk_events GROUP BY stream ORDER BY stream;

-- name: StreamHeadStats :many
SELECT stream,
       CAST(count(*) FILTER (WHERE head_offset IS NOT NULL) AS INTEGER) AS key_count,
       CAST(count(*) FILTER (WHERE head_offset IS NULL) AS INTEGER) AS headless,
       CAST(COALESCE(min(updated_at) FILTER (WHERE head_offset IS NULL), @now) AS INTEGER) AS oldest_headless
FROM alk_compaction_heads GROUP BY stream ORDER BY stream;

-- name: ConsumerLags :many
-- Lag: the consumer's events still unread.
SELECT o.stream, o.consumer, o.committed_offset,
       CAST((SELECT count(*) FROM alk_events e WHERE e.stream = o.stream AND e.id > o.committed_offset) AS INTEGER) AS unread
FROM alk_consumer_offsets o ORDER BY o.stream, o.consumer;

-- name: CompactedStreams :many
SELECT name FROM alk_streams WHERE compacted ORDER BY name;

-- name: AllQueueStats :many
SELECT queue,
       CAST(count(*) FILTER (WHERE state = 'pending' AND run_at <= @now) AS INTEGER) AS ready,
       CAST(count(*) FILTER (WHERE state = 'pending' AND run_at > @now) AS INTEGER) AS scheduled,
       CAST(count(*) FILTER (WHERE state = 'running') AS INTEGER) AS running,
       CAST(count(*) FILTER (WHERE state = 'dead') AS INTEGER) AS dead,
       CAST(COALESCE(min(run_at) FILTER (WHERE state = 'pending' AND run_at <= @now), @now) AS INTEGER) AS oldest_ready
FROM alk_jobs GROUP BY queue ORDER BY queue;
