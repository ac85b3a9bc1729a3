-- Compacted keys: per (stream, key) one head row (SQLite). The writer slot
-- serializes writers, so a SELECT inside a write transaction is a lock.
-- Winner rule: a publish becomes the head when the row is headless or its
-- (rank, offset) is greater than the head's.

-- name: PublishKeyedEvent :execresult
-- A keyed publish's event; UpsertCompactionHead follows in the same
-- transaction. Its offset is the row's id, read as the last inserted
-- rowid rather than through RETURNING, once the store saw one row
-- inserted (a trigger may have skipped it).
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, CAST(@key AS TEXT), sqlc.narg(payload), sqlc.narg(headers));

-- name: PublishKeyedEventWithTxid :execresult
-- PostgreSQL's twin returns the transaction id for a Tx's first publish
-- (the settled horizon); SQLite has no horizon: PublishKeyedEvent's
-- statement.
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, CAST(@key AS TEXT), sqlc.narg(payload), sqlc.narg(headers));

-- name: PublishKeyedEventNotify :execresult
-- PostgreSQL's twin sends the event's wake with NOTIFY; SQLite wakes in
-- the process and through alk_notifications: PublishKeyedEvent's statement.
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, CAST(@key AS TEXT), sqlc.narg(payload), sqlc.narg(headers));

-- name: UpsertCompactionHead :exec
-- SQLite only: PostgreSQL upserts the head inside PublishKeyedEvent and
-- PublishEvents, as one statement with the event. Not an UPDATE of the
-- key's row first with this upsert only when it changed nothing (a new
-- key, a lost publish): both seek the key once, and the UPDATE's program
-- (78 instructions against 127: the upsert makes and checks the row it
-- would insert before its conflict check) saved SQLite 4.0k of an
-- auto-commit keyed publish onto a present key (164.4k -> 160.4k;
-- unkeyed 82.3k), but a new key's publish then costs both statements,
-- +18.6k (161.3k -> 179.9k), and one in a Tx gained nothing (176.0k ->
-- 180.2k, one run a side). Callgrind of a process, 4,000 publishes at
-- 1,024 keys or all new (issue 18, stop 49).
INSERT INTO alk_compaction_heads (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at)
VALUES (@stream, @key, CAST(@head_offset AS INTEGER), CAST(@schema_version AS INTEGER), CAST(@compaction_rank AS INTEGER), @now, @now)
ON CONFLICT (stream, key) DO UPDATE
SET head_offset = excluded.head_offset, schema_version = excluded.schema_version,
    compaction_rank = excluded.compaction_rank, updated_at = excluded.updated_at
WHERE alk_compaction_heads.head_offset IS NULL
   OR (excluded.compaction_rank, excluded.head_offset) > (alk_compaction_heads.compaction_rank, alk_compaction_heads.head_offset);

-- name: GetCompactionHead :one
-- The plain read: only a materialized head (with its event) is returned.
SELECT CAST(h.head_offset AS INTEGER) AS head_offset, CAST(h.schema_version AS INTEGER) AS schema_version,
       CAST(h.compaction_rank AS INTEGER) AS compaction_rank, h.updated_at, e.payload
FROM alk_compaction_heads h
JOIN alk_events e ON e.id = h.head_offset
WHERE h.stream = @stream AND h.key = @key;

-- name: LockCompactionHead :many
-- Inside a write transaction (the writer slot), reading the row holds it;
-- head_offset is NULL for a headless row. No row: the caller inserts a
-- headless one and retries.
SELECT head_offset, schema_version, compaction_rank, updated_at
FROM alk_compaction_heads
WHERE stream = @stream AND key = @key;

-- name: GetEventPayload :many
SELECT payload FROM alk_events WHERE id = @id;

-- name: InsertHeadlessHead :exec
INSERT INTO alk_compaction_heads (stream, key, created_at, updated_at)
VALUES (@stream, @key, @now, @now)
ON CONFLICT (stream, key) DO NOTHING;

-- name: TouchHeadlessHead :exec
-- A headless row locked again stays alive for another TTL.
UPDATE alk_compaction_heads SET updated_at = @now
WHERE stream = @stream AND key = @key AND head_offset IS NULL;

-- name: ListHeads :many
-- The key/value view: current heads in key order, tombstones left out.
SELECT h.key, CAST(h.head_offset AS INTEGER) AS head_offset, CAST(h.schema_version AS INTEGER) AS schema_version,
       CAST(h.compaction_rank AS INTEGER) AS compaction_rank, h.updated_at, e.payload
FROM alk_compaction_heads h
JOIN alk_events e ON e.id = h.head_offset
WHERE h.stream = @stream AND h.key > @after AND e.payload IS NOT NULL
ORDER BY h.key
LIMIT CAST(@lim AS INTEGER);

-- name: ConfigureStream :exec
INSERT INTO alk_streams (name, compacted, headless_ttl_us, retention_us, min_compaction_lag_us, tombstone_retention_us)
VALUES (@name, @compacted, @headless_ttl_us, sqlc.narg(retention_us), @min_compaction_lag_us, @tombstone_retention_us)
ON CONFLICT (name) DO UPDATE
SET compacted = excluded.compacted, headless_ttl_us = excluded.headless_ttl_us, retention_us = excluded.retention_us,
    min_compaction_lag_us = excluded.min_compaction_lag_us, tombstone_retention_us = excluded.tombstone_retention_us;
