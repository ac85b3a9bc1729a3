-- alkstore system schema v1 (SQLite). Pre-release: later issues extend this
-- baseline in place. Every table is prefixed alk_. Times are unix microseconds.

-- +goose Up
-- AUTOINCREMENT: an offset is never reused, even after the newest events
-- are trimmed.
CREATE TABLE alk_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    stream     TEXT    NOT NULL,
    key        TEXT,
    payload    BLOB,
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER))
);
CREATE INDEX alk_events_stream_id ON alk_events (stream, id);

CREATE TABLE alk_consumer_offsets (
    stream           TEXT    NOT NULL,
    consumer         TEXT    NOT NULL,
    committed_offset INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
    PRIMARY KEY (stream, consumer)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE alk_consumer_offsets;
DROP TABLE alk_events;
