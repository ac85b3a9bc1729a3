-- Streams: durable, ordered events with per-consumer offsets (SQLite).
-- SQLite has one writer at a time, so offsets commit in order and reads
-- need no horizon: every committed offset is settled.

-- name: PublishEvent :execresult
-- Without RETURNING, which SQLite runs as a trigger program (and
-- database/sql as rows to step, scan and close), as EnqueueJobCounted: the
-- event's offset is the statement's last_insert_rowid (an application's
-- trigger that inserts rows leaves it as it was once the trigger ends),
-- and a trigger that skipped the row (RAISE(IGNORE)) leaves it stored
-- nothing (changes() is 0).
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload), sqlc.narg(headers));

-- name: PublishEventNotify :execresult
-- PostgreSQL's twin sends the event's wake with NOTIFY; SQLite wakes in
-- the process and through alk_notifications: PublishEvent's statement.
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload), sqlc.narg(headers));

-- name: PublishEvents :execresult
-- SQLite runs in process: "many" is this statement repeated inside one
-- transaction on the writer slot, each event's offset read as
-- PublishEvent's.
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload), sqlc.narg(headers));

-- name: PublishEventWithTxid :execresult
-- PostgreSQL's twin returns the transaction id for a Tx's first publish
-- (the settled horizon); SQLite has no horizon: PublishEvent's statement.
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload), sqlc.narg(headers));

-- name: PublishEventsWithTxid :execresult
-- As PublishEventWithTxid, PublishEvents' statement.
INSERT INTO alk_events (stream, key, payload, headers)
VALUES (@stream, sqlc.narg(key), sqlc.narg(payload), sqlc.narg(headers));

-- name: ReadEvents :many
-- On the stream's index by name: with ANALYZE statistics SQLite may
-- otherwise walk the rowid in offset order and filter other streams' rows.
-- No row names the stream: the events share the caller's string (as on
-- PostgreSQL), where reading it made a string a row.
SELECT id, key, payload, created_at, headers
FROM alk_events INDEXED BY alk_events_stream_id
WHERE stream = @stream AND id > @after
ORDER BY stream, id
LIMIT CAST(@lim AS INTEGER);

-- name: ReadEventsOutsideTx :many
-- PostgreSQL's twin leaves out the lookup of a transaction's own events;
-- SQLite reads no horizon: ReadEvents's statement.
SELECT id, key, payload, created_at, headers
FROM alk_events INDEXED BY alk_events_stream_id
WHERE stream = @stream AND id > @after
ORDER BY stream, id
LIMIT CAST(@lim AS INTEGER);

-- name: ReadEventsFromConsumer :many
SELECT e.id, e.key, e.payload, e.created_at, e.headers
FROM alk_events e INDEXED BY alk_events_stream_id
WHERE e.stream = sqlc.arg(stream)
  AND e.id > COALESCE((SELECT o.committed_offset FROM alk_consumer_offsets o
                       WHERE o.stream = sqlc.arg(stream) AND o.consumer = sqlc.arg(consumer)), 0)
ORDER BY e.stream, e.id
LIMIT CAST(@lim AS INTEGER);

-- name: SaveOffset :execrows
-- Monotone: a lower save leaves the stored offset as it is. An offset
-- above the newest one drawn for any event (AUTOINCREMENT: sqlite_sequence's
-- seq, or a row's id if higher, never lower than an offset a reader was
-- given, whether its event was trimmed since or not) is not saved: no
-- event has it yet, and it would skip the stream's next events (attack59
-- F1). @accept_upto raises that bound, as PostgreSQL's does (a reader's
-- offset; an event's at or above it: OffsetBounds), which here only
-- repeats what the bound holds. 0 rows: a save that moved nothing, or
-- that refusal; OffsetBounds, run only then, tells which, so a save that
-- moves the offset stays this one statement.
INSERT INTO alk_consumer_offsets (stream, consumer, committed_offset)
SELECT CAST(@stream AS TEXT), CAST(@consumer AS TEXT), CAST(@committed_offset AS INTEGER)
WHERE CAST(@committed_offset AS INTEGER) <= max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'alk_events'), 0),
                                                coalesce((SELECT max(id) FROM alk_events), 0), CAST(@accept_upto AS INTEGER))
ON CONFLICT (stream, consumer) DO UPDATE
SET committed_offset = max(committed_offset, excluded.committed_offset),
    updated_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE committed_offset < excluded.committed_offset;

-- name: ResetOffset :execrows
-- Sets the consumer's offset to exactly @committed_offset, lower or higher
-- (a deliberate rewind or skip, unlike the monotone SaveOffset), of any
-- stream, one nothing was published to yet included (a consumer placed
-- at deploy time). 0 rows: refused, as SaveOffset refuses; OffsetBounds
-- says why.
INSERT INTO alk_consumer_offsets (stream, consumer, committed_offset)
SELECT CAST(@stream AS TEXT), CAST(@consumer AS TEXT), CAST(@committed_offset AS INTEGER)
WHERE CAST(@committed_offset AS INTEGER) <= max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'alk_events'), 0),
                                                coalesce((SELECT max(id) FROM alk_events), 0), CAST(@accept_upto AS INTEGER))
ON CONFLICT (stream, consumer) DO UPDATE
SET committed_offset = excluded.committed_offset,
    updated_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER);

-- name: OffsetBounds :one
-- Why SaveOffset or ResetOffset stored nothing: the consumer's offset (-1
-- when it has none) and the newest offset drawn for any event (their
-- bound, which counts the highest event id already).
SELECT CAST(COALESCE((SELECT o.committed_offset FROM alk_consumer_offsets o
                      WHERE o.stream = CAST(@stream AS TEXT) AND o.consumer = CAST(@consumer AS TEXT)), -1) AS INTEGER) AS committed_offset,
       CAST(max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'alk_events'), 0),
                coalesce((SELECT max(id) FROM alk_events), 0)) AS INTEGER) AS newest_offset;

-- name: FirstEventFrom :one
-- The first event id at or above @committed_offset, 0 for none: for an
-- offset past OffsetBounds' newest (none here: the bound counts max(id);
-- the same as PostgreSQL's for the shared code).
SELECT CAST(coalesce((SELECT id FROM alk_events WHERE id >= CAST(@committed_offset AS INTEGER) ORDER BY id LIMIT 1), 0) AS INTEGER) AS id;

-- name: StreamExists :one
-- Whether anything of the stream is stored: an event, a head (headless
-- ones too), settings, a consumer's offset or a consumer group (the
-- operator tools' check before a reset, not the library's). Each probe is
-- a scalar subquery ordered by its index, as PostgreSQL's.
SELECT CAST(((SELECT x.stream FROM alk_consumer_offsets x WHERE x.stream = CAST(@stream AS TEXT) ORDER BY x.stream, x.consumer LIMIT 1) IS NOT NULL
       OR EXISTS (SELECT 1 FROM alk_streams s WHERE s.name = CAST(@stream AS TEXT))
       OR (SELECT h.stream FROM alk_compaction_heads h WHERE h.stream = CAST(@stream AS TEXT) ORDER BY h.stream, h.key LIMIT 1) IS NOT NULL
       OR (SELECT e.stream FROM alk_events e WHERE e.stream = CAST(@stream AS TEXT) ORDER BY e.stream, e.id LIMIT 1) IS NOT NULL
       OR (SELECT g.stream FROM alk_consumer_groups g WHERE g.stream = CAST(@stream AS TEXT) ORDER BY g.stream, g.grp LIMIT 1) IS NOT NULL) AS INTEGER) AS known;

-- name: GetOffset :one
SELECT CAST(COALESCE((SELECT committed_offset FROM alk_consumer_offsets
                      WHERE stream = @stream AND consumer = @consumer), 0) AS INTEGER) AS committed_offset;

-- name: UnheadTrimmed :exec
-- Runs before TrimStream, in its transaction. On a stream that is not
-- compacted, the heads whose events the trim deletes become headless, so
-- the key takes its next value by the winner rule instead of keeping a head
-- that no longer exists.
UPDATE alk_compaction_heads
SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL, updated_at = sqlc.arg(now)
WHERE alk_compaction_heads.stream = sqlc.arg(stream) AND alk_compaction_heads.head_offset <= CAST(sqlc.arg(horizon) AS INTEGER)
  AND NOT EXISTS (SELECT 1 FROM alk_streams s WHERE s.name = sqlc.arg(stream) AND s.compacted);

-- name: TrimStream :execrows
-- Current heads are spared: those of a compacted stream (UnheadTrimmed
-- made the others headless). A head row never points at a deleted event.
DELETE FROM alk_events
WHERE alk_events.stream = sqlc.arg(stream) AND alk_events.id <= sqlc.arg(horizon)
  AND alk_events.id NOT IN (SELECT h.head_offset FROM alk_compaction_heads h
                            WHERE h.stream = sqlc.arg(stream) AND h.head_offset IS NOT NULL);
