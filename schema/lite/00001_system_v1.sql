-- alkstore system schema v1 (SQLite), the baseline. Frozen: databases have
-- applied it, so it never changes; every schema change is a new numbered
-- migration. Every table is prefixed alk_. Times are unix microseconds.

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

-- Stream settings (absent row: defaults). Durations in microseconds.
CREATE TABLE alk_streams (
    name                   TEXT    PRIMARY KEY,
    compacted              INTEGER NOT NULL DEFAULT 0,
    headless_ttl_us        INTEGER NOT NULL DEFAULT 3600000000 CHECK (headless_ttl_us > 0),
    retention_us           INTEGER CHECK (retention_us > 0),          -- NULL: keep events forever
    min_compaction_lag_us  INTEGER NOT NULL DEFAULT 0 CHECK (min_compaction_lag_us >= 0),
    tombstone_retention_us INTEGER NOT NULL DEFAULT 86400000000 CHECK (tombstone_retention_us >= 0)
) WITHOUT ROWID;

-- Compaction heads: per (stream, key) the one durable, lockable identity of
-- the key. A headless row (all three head columns NULL) exists so that a
-- transaction can lock a key before its first value.
CREATE TABLE alk_compaction_heads (
    stream          TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    head_offset     INTEGER,
    schema_version  INTEGER,
    compaction_rank INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (stream, key),
    CHECK ((head_offset IS NULL) = (schema_version IS NULL)
       AND (head_offset IS NULL) = (compaction_rank IS NULL))
) WITHOUT ROWID;
CREATE INDEX alk_compaction_heads_headless ON alk_compaction_heads (stream, updated_at) WHERE head_offset IS NULL;

-- Queues: live and dead jobs in one table. Claiming reads only the partial
-- indexes over pending and running rows, so dead rows and delayed rows of
-- lower priority never slow it down.
CREATE TABLE alk_jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    payload          BLOB,
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
    created_at       INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    claimed_at       INTEGER,
    claim_expires_at INTEGER,
    -- Fences a claim: settling a job needs the token of its current claim.
    claim_token      INTEGER,
    expires_at       INTEGER,
    worker           TEXT,
    last_error       TEXT,
    died_at          INTEGER,
    CHECK ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))
);
CREATE INDEX alk_jobs_ready    ON alk_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX alk_jobs_running  ON alk_jobs (queue, claim_expires_at) WHERE state = 'running';
CREATE INDEX alk_jobs_expiring ON alk_jobs (queue, expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX alk_jobs_dead     ON alk_jobs (queue, died_at) WHERE state = 'dead';

-- Notifications: ephemeral messages; listeners read rows newer than the
-- newest at the moment they started. Pruned by age and count.
CREATE TABLE alk_notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    channel    TEXT    NOT NULL,
    payload    BLOB,
    created_at INTEGER NOT NULL
);
CREATE INDEX alk_notifications_channel_id ON alk_notifications (channel, id);
CREATE INDEX alk_notifications_created_at ON alk_notifications (created_at);

-- +goose Down
DROP TABLE alk_compaction_heads;
DROP TABLE alk_streams;
DROP TABLE alk_notifications;
DROP TABLE alk_jobs;
DROP TABLE alk_consumer_offsets;
DROP TABLE alk_events;
