-- Event partitions (PostgreSQL only: SQLite has no partitions, its
-- alk_events is one table and retention deletes rows). alkstore.events is
-- range-partitioned by offset (schema/pg/00008_event_partitions.sql,
-- docs/design/partitions.md); the janitor adds partitions ahead of the
-- sequence and drops those whose every event is past retention or trimmed.

-- name: EventPartitions :many
-- The range partitions, by lower bound (MINVALUE reads as the smallest
-- bigint). events_default is not one of them.
SELECT p.name::text AS name, p.lo::bigint AS lo, p.hi::bigint AS hi
FROM (SELECT c.relname AS name,
             CASE WHEN b[1] = 'MINVALUE' THEN -9223372036854775808 ELSE b[1]::bigint END AS lo,
             CASE WHEN b[2] = 'MAXVALUE' THEN 9223372036854775807 ELSE b[2]::bigint END AS hi
      FROM pg_catalog.pg_inherits i
      JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid,
      LATERAL regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                           'FROM \(''?(MINVALUE|-?[0-9]+)''?\) TO \(''?(MAXVALUE|-?[0-9]+)''?\)') AS b
      WHERE i.inhparent = 'alkstore.events'::regclass AND b IS NOT NULL) p
ORDER BY p.lo;

-- name: PartitionFrontier :one
-- The newest offset drawn, and the newest offset the default partition
-- holds (0: none): a new partition starts above both, so creating it never
-- finds rows of its range in the default partition.
SELECT COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'::regclass), 0)::bigint AS last_offset,
       COALESCE((SELECT max(d.id) FROM alkstore.events_default d), 0)::bigint AS default_top;

-- name: TryPartitionLock :one
-- Partition DDL runs under this transaction-scoped advisory lock, so two
-- janitors never create or drop partitions at once; the second skips.
SELECT pg_try_advisory_xact_lock(@lock_id::bigint)::boolean AS locked;

-- name: SetLockTimeout :exec
-- Bounds how long partition DDL waits for its table locks (and so how long
-- publishers and readers queued behind it can wait): past it the statement
-- fails with lock_not_available and the janitor tries again next pass.
SELECT set_config('lock_timeout', @timeout::text, true);

-- name: AddEventPartition :exec
SELECT alkstore.add_event_partition(@lo::bigint, @hi::bigint);

-- name: PartitionHasLiveEvents :one
-- Whether a partition holds an event that is neither past its stream's
-- retention nor trimmed (offset <= @trim_horizon of stream @trim_stream;
-- '' trims nothing). Stops at the first such event.
SELECT EXISTS (
    SELECT 1 FROM alkstore.events x
    LEFT JOIN alkstore.streams s ON s.name = x.stream
    WHERE x.id >= @lo::bigint AND x.id < @hi::bigint
      AND NOT (x.stream = @trim_stream::text AND x.id <= @trim_horizon::bigint)
      AND (s.retention_us IS NULL
           OR x.created_at + (s.retention_us) * '1 microsecond'::interval >= @now::timestamptz))::boolean AS live;

-- name: PartitionStreams :many
-- Per stream in a partition: its events there, the newest offset and the
-- newest publish time (what PartitionStillExpired checks again).
SELECT x.stream, count(*)::bigint AS events, max(x.id)::bigint AS top,
       max(x.created_at)::timestamptz AS newest
FROM alkstore.events x
WHERE x.id >= @lo::bigint AND x.id < @hi::bigint
GROUP BY x.stream
ORDER BY x.stream;

-- name: LockStreamSettings :exec
-- Holds the settings of the given streams until the drop commits, so that
-- a retention lengthened meanwhile cannot be missed.
SELECT s.name FROM alkstore.streams s WHERE s.name = ANY(@names::text[]) ORDER BY s.name FOR SHARE;

-- name: PartitionStillExpired :one
-- PartitionHasLiveEvents again, on the per-stream summary PartitionStreams
-- took, under the settings LockStreamSettings holds.
SELECT NOT EXISTS (
    SELECT 1
    FROM (SELECT unnest(@streams::text[]) AS stream, unnest(@tops::bigint[]) AS top,
                 unnest(@newest::timestamptz[]) AS newest) AS p
    LEFT JOIN alkstore.streams s ON s.name = p.stream
    WHERE NOT (p.stream = @trim_stream::text AND p.top <= @trim_horizon::bigint)
      AND (s.retention_us IS NULL
           OR p.newest + (s.retention_us) * '1 microsecond'::interval >= @now::timestamptz))::boolean AS expired;

-- name: UnheadPartition :exec
-- Before a drop, in its transaction: heads of streams that are not
-- compacted and point into the partition become headless (as UnheadExpired
-- and UnheadTrimmed do), in key order, skipping rows others hold.
UPDATE alkstore.compaction_heads h
SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL, updated_at = @now::timestamptz
WHERE h.head_offset >= @lo::bigint AND h.head_offset < @hi::bigint
  AND (h.stream, h.key) IN (
    SELECT x.stream, x.key FROM alkstore.compaction_heads x
    WHERE x.head_offset >= @lo::bigint AND x.head_offset < @hi::bigint
      AND NOT EXISTS (SELECT 1 FROM alkstore.streams s WHERE s.name = x.stream AND s.compacted)
    ORDER BY x.stream, x.key
    FOR UPDATE OF x SKIP LOCKED);

-- name: PartitionHasHeads :one
-- Whether a head still points into the partition: a compacted stream's
-- current value (kept alive), or a head UnheadPartition skipped.
SELECT EXISTS (SELECT 1 FROM alkstore.compaction_heads h
               WHERE h.head_offset >= @lo::bigint AND h.head_offset < @hi::bigint)::boolean AS held;

-- name: DropEventPartition :one
SELECT alkstore.drop_event_partition(@name::text)::boolean AS dropped;
