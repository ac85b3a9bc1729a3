-- Streams: durable, ordered events with per-consumer offsets (SQLite).
-- SQLite has one writer at a time, so offsets commit in order and reads
-- need no horizon: every committed offset is settled.

-- name: PublishEvent :one
INSERT INTO alk_events (stream, key, payload)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload))
RETURNING id;

-- name: PublishEvents :one
-- SQLite runs in process: "many" is this statement repeated inside one
-- transaction on the writer slot.
INSERT INTO alk_events (stream, key, payload)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload))
RETURNING id;

-- name: ReadEvents :many
SELECT id, stream, key, payload, created_at
FROM alk_events
WHERE stream = @stream AND id > @after
ORDER BY id
LIMIT @lim;

-- name: ReadEventsFromConsumer :many
SELECT e.id, e.stream, e.key, e.payload, e.created_at
FROM alk_events e
WHERE e.stream = sqlc.arg(stream)
  AND e.id > COALESCE((SELECT o.committed_offset FROM alk_consumer_offsets o
                       WHERE o.stream = sqlc.arg(stream) AND o.consumer = sqlc.arg(consumer)), 0)
ORDER BY e.id
LIMIT @lim;

-- name: SaveOffset :exec
-- Monotone: a lower save leaves the stored offset as it is.
INSERT INTO alk_consumer_offsets (stream, consumer, committed_offset)
VALUES (@stream, @consumer, @committed_offset)
ON CONFLICT (stream, consumer) DO UPDATE
SET committed_offset = max(committed_offset, excluded.committed_offset),
    updated_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE committed_offset < excluded.committed_offset;

-- name: GetOffset :one
SELECT CAST(COALESCE((SELECT committed_offset FROM alk_consumer_offsets
                      WHERE stream = @stream AND consumer = @consumer), 0) AS INTEGER) AS committed_offset;

-- name: TrimStream :execrows
-- The current heads of a compacted stream are spared.
DELETE FROM alk_events
WHERE alk_events.stream = sqlc.arg(stream) AND alk_events.id <= sqlc.arg(horizon)
  AND alk_events.id NOT IN (SELECT h.head_offset FROM alk_streams s JOIN alk_compaction_heads h ON h.stream = s.name
                            WHERE s.name = sqlc.arg(stream) AND s.compacted AND h.head_offset IS NOT NULL);
