-- alkstore system schema v1 (PostgreSQL). Pre-release: later issues extend
-- this baseline in place. Every object lives in the schema "alkstore".

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

-- +goose Down
-- The schema itself stays: goose keeps its version table in it.
DROP TABLE alkstore.consumer_offsets;
DROP TABLE alkstore.events;
DROP SEQUENCE alkstore.event_offset_seq;
