-- alkstore system schema v1 (PostgreSQL), the baseline. Frozen: databases
-- have applied it, so it never changes; every schema change is a new
-- numbered migration. Every object lives in the schema "alkstore".

-- +goose Up
CREATE SCHEMA IF NOT EXISTS alkstore;

-- Stream offsets come from one uncached sequence shared by every stream.
-- CACHE 1 matters: the settled-horizon proof (docs/design/stream-horizon.md)
-- needs ids to be drawn in real-time order across sessions.
CREATE SEQUENCE alkstore.event_offset_seq AS bigint CACHE 1;

CREATE TABLE alkstore.events (
    id         bigint      PRIMARY KEY,
    stream     text        NOT NULL,
    key        text,
    payload    bytea,
    -- Top-level transaction id of the publisher, assigned before the id is
    -- drawn. Lets a transaction read its own uncommitted events.
    txid       xid8        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_stream_id ON alkstore.events (stream, id);

CREATE TABLE alkstore.consumer_offsets (
    stream           text        NOT NULL,
    consumer         text        NOT NULL,
    committed_offset bigint      NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, consumer)
);

-- Stream settings (absent row: defaults). Durations in microseconds.
CREATE TABLE alkstore.streams (
    name                   text    PRIMARY KEY,
    compacted              boolean NOT NULL DEFAULT false,
    headless_ttl_us        bigint  NOT NULL DEFAULT 3600000000 CHECK (headless_ttl_us > 0),
    retention_us           bigint  CHECK (retention_us > 0),          -- NULL: keep events forever
    min_compaction_lag_us  bigint  NOT NULL DEFAULT 0 CHECK (min_compaction_lag_us >= 0),
    tombstone_retention_us bigint  NOT NULL DEFAULT 86400000000 CHECK (tombstone_retention_us >= 0)
);

-- Compaction heads: per (stream, key) the one durable, lockable identity of
-- the key. A headless row (all three head columns NULL) exists so that a
-- transaction can lock a key before its first value.
CREATE TABLE alkstore.compaction_heads (
    stream          text        NOT NULL,
    key             text        NOT NULL,
    head_offset     bigint,
    schema_version  integer,
    compaction_rank bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, key),
    CHECK ((head_offset IS NULL) = (schema_version IS NULL)
       AND (head_offset IS NULL) = (compaction_rank IS NULL))
);
CREATE INDEX compaction_heads_headless ON alkstore.compaction_heads (stream, updated_at) WHERE head_offset IS NULL;

-- Queues: live and dead jobs in one table. Claiming reads only the partial
-- indexes over pending and running rows, so dead rows and delayed rows of
-- lower priority never slow it down.
CREATE TABLE alkstore.jobs (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text        NOT NULL,
    payload          bytea,
    priority         integer     NOT NULL DEFAULT 0,
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL CHECK (max_attempts > 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    run_at           timestamptz NOT NULL,
    claimed_at       timestamptz,
    claim_expires_at timestamptz,
    -- Fences a claim: settling a job needs the token of its current claim.
    claim_token      bigint,
    expires_at       timestamptz,
    worker           text,
    last_error       text,
    died_at          timestamptz,
    CHECK ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))
);
CREATE INDEX jobs_ready    ON alkstore.jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX jobs_running  ON alkstore.jobs (queue, claim_expires_at) WHERE state = 'running';
CREATE INDEX jobs_expiring ON alkstore.jobs (queue, expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX jobs_dead     ON alkstore.jobs (queue, died_at) WHERE state = 'dead';

-- +goose Down
-- The schema itself stays: goose keeps its version table in it.
DROP TABLE alkstore.jobs;
DROP TABLE alkstore.compaction_heads;
DROP TABLE alkstore.streams;
DROP TABLE alkstore.consumer_offsets;
DROP TABLE alkstore.events;
DROP SEQUENCE alkstore.event_offset_seq;
