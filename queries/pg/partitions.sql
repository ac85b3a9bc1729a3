-- Event partitions (PostgreSQL only: SQLite has no partitions, its
-- alk_events is one table and retention deletes rows). alkstore.events is
-- range-partitioned by offset (schema/pg/00008_event_partitions.sql,
-- docs/design/partitions.md); the janitor adds partitions ahead of the
-- sequence and drops those whose every event is past retention or trimmed.

-- name: EventPartitions :many
-- The range partitions, by lower bound (events_default is not one).
SELECT name, lo, hi, sealed_at FROM alkstore.event_partitions ORDER BY lo;

-- name: SealEventPartitions :exec
-- Partitions whose every offset has been drawn are sealed at a moment
-- after that, the clock being read after the sequence: each event in them
-- was published (created_at) before sealed_at.
UPDATE alkstore.event_partitions
SET sealed_at = clock_timestamp()
WHERE sealed_at IS NULL
  AND hi - 1 <= COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'::regclass), 0);

-- name: PartitionFrontier :one
-- The newest offset drawn, and the lower bound of events_tail (schema
-- 00012), where the next range partition starts.
SELECT COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'::regclass), 0)::bigint AS last_offset,
       (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?[0-9]+)''?\)'))[1]
        FROM pg_catalog.pg_class c WHERE c.oid = 'alkstore.events_tail'::regclass)::bigint AS tail_lo;

-- name: TryPartitionLock :one
-- Partition DDL runs under this transaction-scoped advisory lock, so two
-- janitors never create or drop partitions at once; the second skips.
SELECT pg_try_advisory_xact_lock(@lock_id::bigint)::boolean AS locked;

-- name: SetLockTimeout :exec
-- Bounds how long partition DDL waits for its table locks (and so how long
-- publishers and readers queued behind it can wait): past it the statement
-- fails with lock_not_available and the janitor tries again next pass.
SELECT set_config('lock_timeout', @timeout::text, true);

-- name: ExtendEventPartitions :one
-- Range partitions of @size offsets carved from the tail up to @upto
-- (alkstore.extend_event_partitions): how many it created.
SELECT alkstore.extend_event_partitions(@size::bigint, @upto::bigint)::integer AS created;

-- name: PartitionStreams :many
-- The streams a partition holds and the newest offset of each there, by a
-- skip scan of its (stream, id) index: one probe per stream, whatever the
-- number of events.
WITH RECURSIVE st(stream) AS (
    (SELECT e.stream FROM alkstore.events e
     WHERE e.id >= @lo::bigint AND e.id < @hi::bigint
     ORDER BY e.stream LIMIT 1)
  UNION ALL
    SELECT (SELECT e.stream FROM alkstore.events e
            WHERE e.id >= @lo::bigint AND e.id < @hi::bigint AND e.stream > st.stream
            ORDER BY e.stream LIMIT 1)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT st.stream::text AS stream,
       (SELECT max(e.id) FROM alkstore.events e
        WHERE e.stream = st.stream AND e.id >= @lo::bigint AND e.id < @hi::bigint)::bigint AS top
FROM st
WHERE st.stream IS NOT NULL;

-- name: PartitionExpired :one
-- Whether every event of a sealed partition is past its stream's retention
-- or trimmed (offset <= @trim_horizon of stream @trim_stream; '' trims
-- nothing), from PartitionStreams' summary: streams without retention keep
-- theirs.
SELECT NOT EXISTS (
    SELECT 1
    FROM (SELECT unnest(@streams::text[]) AS stream, unnest(@tops::bigint[]) AS top) AS p
    LEFT JOIN alkstore.streams s ON s.name = p.stream
    WHERE NOT (p.stream = @trim_stream::text AND p.top <= @trim_horizon::bigint)
      AND (s.retention_us IS NULL
           OR (s.retention_us) * '1 microsecond'::interval + @sealed_at::timestamptz >= @now::timestamptz))::boolean AS expired;

-- name: PartitionEventCount :one
-- A stream's events in a partition, which TrimTo reports when it drops it.
SELECT count(*)::bigint AS events FROM alkstore.events e
WHERE e.stream = @stream::text AND e.id >= @lo::bigint AND e.id < @hi::bigint;

-- name: LockStreamSettings :exec
-- Holds the settings of the given streams until the drop commits, so that
-- a retention lengthened meanwhile cannot be missed.
SELECT s.name FROM alkstore.streams s WHERE s.name = ANY(@names::text[]) ORDER BY s.name FOR SHARE;

-- name: UnheadPartition :exec
-- Before a drop, in its transaction: heads of streams that are not
-- compacted and point into the partition become headless (as UnheadExpired
-- and UnheadTrimmed do), in key order, skipping rows others hold.
UPDATE alkstore.compaction_heads h
SET head_offset = NULL, schema_version = 0, compaction_rank = 0, updated_at = @now::timestamptz, headless_at = @now::timestamptz,
    tombstone_at = NULL
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
