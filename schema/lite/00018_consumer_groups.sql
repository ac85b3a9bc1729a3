-- Consumer groups (issue 22): see schema/pg/00018_consumer_groups.sql and
-- docs/design/consumer-groups.md. Times in microseconds since the epoch.

-- +goose Up
CREATE TABLE alk_consumer_groups (
    stream     TEXT    NOT NULL,
    grp        TEXT    NOT NULL,
    partitions INTEGER NOT NULL CHECK (partitions > 0),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (stream, grp)
) WITHOUT ROWID;

CREATE TABLE alk_group_partitions (
    stream           TEXT    NOT NULL,
    grp              TEXT    NOT NULL,
    part             INTEGER NOT NULL,
    owner            TEXT,
    token            INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,
    committed_offset INTEGER NOT NULL DEFAULT 0,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (stream, grp, part)
) WITHOUT ROWID;

CREATE TABLE alk_group_members (
    stream     TEXT    NOT NULL,
    grp        TEXT    NOT NULL,
    member     TEXT    NOT NULL,
    joined_at  INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (stream, grp, member)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE alk_group_members;
DROP TABLE alk_group_partitions;
DROP TABLE alk_consumer_groups;
