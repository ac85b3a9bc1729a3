-- Compacted keys: per (stream, key) one head row (PostgreSQL).
-- Winner rule: a publish becomes the head when the row is headless or its
-- (rank, offset) is greater than the head's.

-- name: PublishKeyedEvent :one
-- A keyed publish: the event and the upsert of its key's head, in one
-- statement (see PublishEvent for the transaction id before the offset
-- and the headers: the event is a plain VALUES row, as there), without a
-- NOTIFY: a keyed publish carrying a wake runs PublishKeyedEventNotify, a
-- Tx's first PublishKeyedEventWithTxid. The head's data-modifying CTE
-- runs to completion although nothing reads it. A publish onto a headed row changes no
-- indexed column (headless_at stays NULL, and so does tombstone_at for a
-- value over a value), so it is a HOT update (schema 00031). tombstone_at
-- is the event's created_at (now(), its default) for a tombstone, NULL for
-- a value: the janitor's tombstone pass reads it (schema 00041; the column
-- and its CASE about 3k of a keyed publish's server instructions, the
-- dropped events_tombstones as much). ON CONFLICT rather than an UPDATE first (callgrind on the
-- backend, 1,024 keys, every head present, commit included, with the
-- head table's CHECK of schema 00033): this statement 258k instructions;
-- the event with an UPDATE of its head and no INSERT at all already 265k;
-- with this INSERT as the UPDATE's fallback 302-310k. ON CONFLICT's probe
-- of the key (29k, 12k of it pruning the head's page) is the lookup an
-- UPDATE makes too. Beside the event in its CTE alone (153k; an unkeyed
-- PublishEvent 123k, a keyed one 139k): the winner rule 7k, the probe
-- 29k, and opening a second table, its indexes and ModifyTable about 38k.
-- Since schema 00036 the head table has no CHECK (schema_version and
-- compaction_rank are NOT NULL instead; PostgreSQL parsed and planned the
-- CHECK again for every statement): 263k -> 239k (unkeyed 123k). The
-- NOTIFY's CASE in every statement, notifying or not, and NULLIF(headers,
-- '') 7.8k of 248.5k at 1,024 keys (callgrind on the backend, w42).
WITH ins AS (
    INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
    VALUES (CASE WHEN pg_current_xact_id() IS NULL THEN NULL ELSE nextval('alkstore.event_offset_seq') END,
            @stream::text, @key::text, sqlc.narg(payload)::bytea, pg_current_xact_id(),
            sqlc.narg(headers)::text::jsonb)
    RETURNING id
),
head AS (
    INSERT INTO alkstore.compaction_heads AS h (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at, tombstone_at)
    SELECT @stream::text, @key::text, ins.id, @schema_version::integer, @compaction_rank::bigint, @now::timestamptz, @now::timestamptz, NULL,
           CASE WHEN sqlc.narg(payload)::bytea IS NULL THEN now() END
    FROM ins
    ON CONFLICT (stream, key) DO UPDATE
    SET head_offset = EXCLUDED.head_offset, schema_version = EXCLUDED.schema_version,
        compaction_rank = EXCLUDED.compaction_rank, updated_at = EXCLUDED.updated_at, headless_at = NULL,
        tombstone_at = EXCLUDED.tombstone_at
    WHERE h.head_offset IS NULL
       OR (EXCLUDED.compaction_rank, EXCLUDED.head_offset) > (h.compaction_rank, h.head_offset)
)
SELECT id FROM ins;

-- name: PublishKeyedEventNotify :one
-- PublishKeyedEvent carrying a wake (never empty), sent with NOTIFY in the
-- event's headers expression as PublishEventNotify does
-- (db/pg/notify_twins_test.go holds the two together).
WITH ins AS (
    INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
    VALUES (CASE WHEN pg_current_xact_id() IS NULL THEN NULL ELSE nextval('alkstore.event_offset_seq') END,
            @stream::text, @key::text, sqlc.narg(payload)::bytea, pg_current_xact_id(),
            CASE WHEN pg_notify('alkstore', @wake::text) IS NULL THEN NULL ELSE sqlc.narg(headers)::text::jsonb END)
    RETURNING id
),
head AS (
    INSERT INTO alkstore.compaction_heads AS h (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at, tombstone_at)
    SELECT @stream::text, @key::text, ins.id, @schema_version::integer, @compaction_rank::bigint, @now::timestamptz, @now::timestamptz, NULL,
           CASE WHEN sqlc.narg(payload)::bytea IS NULL THEN now() END
    FROM ins
    ON CONFLICT (stream, key) DO UPDATE
    SET head_offset = EXCLUDED.head_offset, schema_version = EXCLUDED.schema_version,
        compaction_rank = EXCLUDED.compaction_rank, updated_at = EXCLUDED.updated_at, headless_at = NULL,
        tombstone_at = EXCLUDED.tombstone_at
    WHERE h.head_offset IS NULL
       OR (EXCLUDED.compaction_rank, EXCLUDED.head_offset) > (h.compaction_rank, h.head_offset)
)
SELECT id FROM ins;

-- name: PublishKeyedEventWithTxid :one
-- PublishKeyedEventNotify sending its NOTIFY only for a non-empty wake and
-- returning the transaction id too, as PublishEventWithTxid does (a Tx's
-- first publish).
WITH ins AS (
    INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
    VALUES (CASE WHEN pg_current_xact_id() IS NULL THEN NULL ELSE nextval('alkstore.event_offset_seq') END,
            @stream::text, @key::text, sqlc.narg(payload)::bytea, pg_current_xact_id(),
            CASE WHEN @wake::text <> '' AND pg_notify('alkstore', @wake::text) IS NULL THEN NULL ELSE sqlc.narg(headers)::text::jsonb END)
    RETURNING id, txid
),
head AS (
    INSERT INTO alkstore.compaction_heads AS h (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at, tombstone_at)
    SELECT @stream::text, @key::text, ins.id, @schema_version::integer, @compaction_rank::bigint, @now::timestamptz, @now::timestamptz, NULL,
           CASE WHEN sqlc.narg(payload)::bytea IS NULL THEN now() END
    FROM ins
    ON CONFLICT (stream, key) DO UPDATE
    SET head_offset = EXCLUDED.head_offset, schema_version = EXCLUDED.schema_version,
        compaction_rank = EXCLUDED.compaction_rank, updated_at = EXCLUDED.updated_at, headless_at = NULL,
        tombstone_at = EXCLUDED.tombstone_at
    WHERE h.head_offset IS NULL
       OR (EXCLUDED.compaction_rank, EXCLUDED.head_offset) > (h.compaction_rank, h.head_offset)
)
SELECT id, txid FROM ins;

-- name: GetCompactionHead :one
-- The plain read: only a materialized head (with its event) is returned.
SELECT h.head_offset::bigint AS head_offset, h.schema_version::integer AS schema_version,
       h.compaction_rank::bigint AS compaction_rank, h.updated_at, e.payload
FROM alkstore.compaction_heads h
JOIN alkstore.events e ON e.id = h.head_offset
WHERE h.stream = @stream::text AND h.key = @key::text;

-- name: LockCompactionHead :many
-- Locks the key's row until the transaction ends; head_offset is NULL for
-- a headless row. No row: the caller inserts a headless one and retries.
-- No join here: after waiting for the lock, READ COMMITTED re-checks the
-- locked row but would keep a joined row from the old snapshot, so the head
-- event is read by GetEventPayload in the next statement.
SELECT head_offset, schema_version, compaction_rank, updated_at
FROM alkstore.compaction_heads
WHERE stream = @stream::text AND key = @key::text
FOR UPDATE;

-- name: GetEventPayload :many
SELECT payload FROM alkstore.events WHERE id = @id;

-- name: InsertHeadlessHead :exec
-- A headless row: head_offset NULL, schema_version and compaction_rank 0
-- (schema 00036; written here rather than left to the columns' defaults).
INSERT INTO alkstore.compaction_heads (stream, key, schema_version, compaction_rank, created_at, updated_at, headless_at)
VALUES (@stream::text, @key::text, 0, 0, @now::timestamptz, @now::timestamptz, @now::timestamptz)
ON CONFLICT (stream, key) DO NOTHING;

-- name: TouchHeadlessHead :exec
-- A headless row locked again stays alive for another TTL.
UPDATE alkstore.compaction_heads SET updated_at = @now::timestamptz, headless_at = @now::timestamptz
WHERE stream = @stream::text AND key = @key::text AND head_offset IS NULL;

-- name: ListHeads :many
-- The key/value view: current heads in key order, tombstones left out.
SELECT h.key, h.head_offset::bigint AS head_offset, h.schema_version::integer AS schema_version,
       h.compaction_rank::bigint AS compaction_rank, h.updated_at, e.payload
FROM alkstore.compaction_heads h
JOIN alkstore.events e ON e.id = h.head_offset
WHERE h.stream = @stream::text AND h.key > @after::text AND e.payload IS NOT NULL
ORDER BY h.key
LIMIT @lim::integer;

-- name: ConfigureStream :exec
INSERT INTO alkstore.streams (name, compacted, headless_ttl_us, retention_us, min_compaction_lag_us, tombstone_retention_us)
VALUES (@name::text, @compacted::boolean, @headless_ttl_us::bigint, sqlc.narg(retention_us)::bigint,
        @min_compaction_lag_us::bigint, @tombstone_retention_us::bigint)
ON CONFLICT (name) DO UPDATE
SET compacted = EXCLUDED.compacted, headless_ttl_us = EXCLUDED.headless_ttl_us, retention_us = EXCLUDED.retention_us,
    min_compaction_lag_us = EXCLUDED.min_compaction_lag_us, tombstone_retention_us = EXCLUDED.tombstone_retention_us;
