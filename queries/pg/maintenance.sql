-- Maintenance (PostgreSQL): the janitor's bounded passes. Each takes at
-- most @batch rows through a partial or leading index, FOR UPDATE SKIP
-- LOCKED, so janitors never wait on each other or on active keys.

-- name: DeleteExpiredHeadless :execrows
-- Headless rows unused for longer than their stream's TTL (a later lock
-- recreates them).
DELETE FROM alkstore.compaction_heads h
WHERE h.head_offset IS NULL
  AND (h.stream, h.key) IN (
    SELECT x.stream, x.key FROM alkstore.compaction_heads x
    LEFT JOIN alkstore.streams s ON s.name = x.stream
    WHERE x.head_offset IS NULL
      AND x.updated_at + (COALESCE(s.headless_ttl_us, 3600000000)) * '1 microsecond'::interval < @now::timestamptz
    LIMIT @batch::integer
    FOR UPDATE OF x SKIP LOCKED);

-- name: UnheadExpired :exec
-- Runs before ApplyRetention, in its transaction: on streams that are not
-- compacted, heads whose events are past retention become headless (see
-- UnheadTrimmed), in key order, skipping rows others hold (their events
-- stay for a later pass).
UPDATE alkstore.compaction_heads h
SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL, updated_at = @now::timestamptz
WHERE h.head_offset IS NOT NULL
  AND (h.stream, h.key) IN (
    SELECT x.stream, x.key FROM alkstore.compaction_heads x
    JOIN alkstore.streams s ON s.name = x.stream AND NOT s.compacted AND s.retention_us IS NOT NULL
    JOIN alkstore.events e ON e.id = x.head_offset
    WHERE e.created_at + (s.retention_us) * '1 microsecond'::interval < @now::timestamptz
    ORDER BY x.stream, x.key
    LIMIT @batch::integer
    FOR UPDATE OF x SKIP LOCKED);

-- name: ApplyRetention :execrows
-- Events past their stream's retention. Current heads are spared: those of
-- a compacted stream, and any UnheadExpired skipped. A head row never
-- points at a deleted event.
DELETE FROM alkstore.events e
WHERE e.id IN (
    SELECT x.id FROM alkstore.events x
    JOIN alkstore.streams s ON s.name = x.stream
    WHERE s.retention_us IS NOT NULL
      AND x.created_at + (s.retention_us) * '1 microsecond'::interval < @now::timestamptz
      AND NOT EXISTS (SELECT 1 FROM alkstore.compaction_heads h
                      WHERE h.stream = x.stream AND h.key = x.key AND h.head_offset = x.id)
    LIMIT @batch::integer
    FOR UPDATE OF x SKIP LOCKED);

-- name: CompactSuperseded :execrows
-- Keyed events of compacted streams that a newer head superseded, once
-- older than the stream's minimum compaction lag.
DELETE FROM alkstore.events e
WHERE e.id IN (
    SELECT x.id FROM alkstore.events x
    JOIN alkstore.streams s ON s.name = x.stream AND s.compacted
    JOIN alkstore.compaction_heads h ON h.stream = x.stream AND h.key = x.key
    WHERE x.key IS NOT NULL AND h.head_offset > x.id
      AND x.created_at + (s.min_compaction_lag_us) * '1 microsecond'::interval < @now::timestamptz
    LIMIT @batch::integer
    FOR UPDATE OF x SKIP LOCKED);

-- name: ExpiredTombstones :many
-- Heads of compacted streams that are tombstones older than the stream's
-- tombstone retention: the key is deleted for good (row and event).
SELECT h.stream, h.key, h.head_offset::bigint AS head_offset
FROM alkstore.compaction_heads h
JOIN alkstore.streams s ON s.name = h.stream AND s.compacted
JOIN alkstore.events e ON e.id = h.head_offset
WHERE e.payload IS NULL
  AND e.created_at + (s.tombstone_retention_us) * '1 microsecond'::interval < @now::timestamptz
LIMIT @batch::integer
FOR UPDATE OF h SKIP LOCKED;

-- name: DeleteHead :exec
DELETE FROM alkstore.compaction_heads WHERE stream = @stream AND key = @key AND head_offset = @head_offset::bigint;

-- name: DeleteEvent :exec
DELETE FROM alkstore.events WHERE id = @id;

-- name: SweepAllExpiredJobs :execrows
-- Expired jobs of every queue end expired: pending ones, and running ones
-- whose claim lapsed.
UPDATE alkstore.jobs
SET state = 'expired', finished_at = @now::timestamptz, last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT x.id FROM alkstore.jobs x
             WHERE x.expires_at IS NOT NULL AND x.expires_at <= @now::timestamptz
               AND (x.state = 'pending' OR (x.state = 'running' AND x.claim_expires_at <= @now::timestamptz))
             LIMIT @batch::integer
             FOR UPDATE SKIP LOCKED);

-- name: DeleteFinishedJobs :execrows
-- Finished jobs past their queue's retention: completed ones older than
-- completed_retention_us (all of them once it is 0 again), dead, cancelled
-- and expired ones older than dead_retention_us (none while it is NULL).
-- Driven from the queues table (a queue without a row keeps no completed
-- jobs and keeps its dead ones): per queue one range of jobs_finished for
-- completed jobs and one per final state for the others (the literal
-- state list lets a generic plan use the partial index). (sqlc.arg: sqlc
-- misreads "@now::timestamptz -".)
DELETE FROM alkstore.jobs j
WHERE j.id IN (
    (SELECT y.id FROM alkstore.queues q CROSS JOIN LATERAL (
         SELECT x.id FROM alkstore.jobs x
         WHERE x.queue = q.name AND x.state = 'completed'
           AND x.state IN ('completed', 'cancelled', 'expired', 'dead')
           AND x.finished_at < sqlc.arg(now)::timestamptz - q.completed_retention_us * '1 microsecond'::interval
         LIMIT @batch::integer
         FOR UPDATE SKIP LOCKED) AS y
     LIMIT @batch::integer)
    UNION ALL
    (SELECT y.id FROM alkstore.queues q CROSS JOIN LATERAL (
         SELECT x.id FROM alkstore.jobs x
         WHERE x.queue = q.name AND x.state IN ('cancelled', 'expired', 'dead')
           AND x.state IN ('completed', 'cancelled', 'expired', 'dead')
           AND x.finished_at < sqlc.arg(now)::timestamptz - q.dead_retention_us * '1 microsecond'::interval
         LIMIT @batch::integer
         FOR UPDATE SKIP LOCKED) AS y
     WHERE q.dead_retention_us IS NOT NULL
     LIMIT @batch::integer));

-- Observability (Stats).

-- name: StreamEventStats :many
SELECT stream, max(id)::bigint AS head_offset, count(*)::bigint AS events
FROM alkstore.events GROUP BY stream ORDER BY stream;

-- name: StreamHeadStats :many
SELECT stream,
       count(*) FILTER (WHERE head_offset IS NOT NULL)::bigint AS key_count,
       count(*) FILTER (WHERE head_offset IS NULL)::bigint AS headless,
       COALESCE(min(updated_at) FILTER (WHERE head_offset IS NULL), @now::timestamptz)::timestamptz AS oldest_headless
FROM alkstore.compaction_heads GROUP BY stream ORDER BY stream;

-- name: ConsumerLags :many
-- Lag: the consumer's events still unread.
SELECT o.stream, o.consumer, o.committed_offset,
       (SELECT count(*) FROM alkstore.events e WHERE e.stream = o.stream AND e.id > o.committed_offset)::bigint AS unread
FROM alkstore.consumer_offsets o ORDER BY o.stream, o.consumer;

-- name: CompactedStreams :many
SELECT name FROM alkstore.streams WHERE compacted ORDER BY name;

-- name: AllQueueStats :many
SELECT queue,
       count(*) FILTER (WHERE state = 'pending' AND run_at <= @now::timestamptz)::bigint AS ready,
       count(*) FILTER (WHERE state = 'pending' AND run_at > @now::timestamptz)::bigint AS scheduled,
       count(*) FILTER (WHERE state = 'running')::bigint AS running,
       count(*) FILTER (WHERE state = 'dead')::bigint AS dead,
       COALESCE(min(run_at) FILTER (WHERE state = 'pending' AND run_at <= @now::timestamptz), @now::timestamptz)::timestamptz AS oldest_ready
FROM alkstore.jobs GROUP BY queue ORDER BY queue;
