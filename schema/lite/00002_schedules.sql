-- +goose Up
-- Schedules: each row enqueues a job into its queue at every boundary of its
-- spec. The scheduler holding the "scheduler" lease fires due rows; a fire
-- and the advance of next_fire_at commit in one transaction, and the advance
-- is conditional on next_fire_at still being the boundary it fires, so each
-- boundary fires once even when two schedulers briefly overlap.
-- Times are unix microseconds.
CREATE TABLE alk_schedules (
    name          TEXT    PRIMARY KEY,
    spec          TEXT    NOT NULL,
    tz            TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    payload       BLOB,
    priority      INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL CHECK (max_attempts > 0),
    next_fire_at  INTEGER NOT NULL,
    paused        BOOLEAN NOT NULL DEFAULT FALSE,
    last_fired_at INTEGER,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
-- (next_fire_at, name): the due scan's order, and a fire's lookup by both, which
-- must never scan every schedule sharing its boundary.
CREATE INDEX alk_schedules_due ON alk_schedules (next_fire_at, name) WHERE NOT paused;

-- Leases elect one holder for a singleton role (the scheduler). token tells
-- apart two runs that share an owner name; the holder renews before
-- expires_at, and anyone may take an expired lease.
CREATE TABLE alk_leases (
    name       TEXT    PRIMARY KEY,
    owner      TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    renewed_at INTEGER NOT NULL, -- when the holder last took or renewed it
    expires_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE alk_leases;
DROP TABLE alk_schedules;
