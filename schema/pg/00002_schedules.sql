-- +goose Up
-- Schedules: each row enqueues a job into its queue at every boundary of its
-- spec. The scheduler holding the "scheduler" lease fires due rows; a fire
-- and the advance of next_fire_at commit in one transaction, and the advance
-- is conditional on next_fire_at still being the boundary it fires, so each
-- boundary fires once even when two schedulers briefly overlap.
CREATE TABLE alkstore.schedules (
    name          text        PRIMARY KEY,
    spec          text        NOT NULL,
    tz            text        NOT NULL,
    queue         text        NOT NULL,
    payload       bytea,
    priority      integer     NOT NULL,
    max_attempts  integer     NOT NULL CHECK (max_attempts > 0),
    next_fire_at  timestamptz NOT NULL,
    paused        boolean     NOT NULL DEFAULT false,
    last_fired_at timestamptz,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
-- (next_fire_at, name): the due scan's order, and a fire's lookup by both, which
-- must never scan every schedule sharing its boundary.
CREATE INDEX schedules_due ON alkstore.schedules (next_fire_at, name) WHERE NOT paused;

-- Leases elect one holder for a singleton role (the scheduler). token tells
-- apart two runs that share an owner name; the holder renews before
-- expires_at, and anyone may take an expired lease.
CREATE TABLE alkstore.leases (
    name       text        PRIMARY KEY,
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    renewed_at timestamptz NOT NULL, -- when the holder last took or renewed it
    expires_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE alkstore.leases;
DROP TABLE alkstore.schedules;
