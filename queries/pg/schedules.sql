-- Schedules and the scheduler's lease (PostgreSQL). Times come from the
-- store's clock; next fire times are computed by the caller from the spec.

-- name: UpsertSchedule :exec
-- Registers or replaces a schedule. Registering the same spec and time zone
-- again keeps the pending boundary (and the paused flag), so an application
-- may register its schedules at every start without skipping a fire. A
-- non-empty wake tells schedulers elsewhere, on commit, to look again.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.schedules AS s (name, spec, tz, queue, payload, priority, max_attempts,
                                     next_fire_at, created_at, updated_at, headers)
SELECT @name::text, @spec::text, @tz::text, @queue::text, sqlc.narg(payload)::bytea, @priority::integer,
       @max_attempts::integer, @next_fire_at::timestamptz, @now::timestamptz, @now::timestamptz,
       NULLIF(@headers::text, '')::jsonb
FROM w
ON CONFLICT (name) DO UPDATE
SET spec = excluded.spec, tz = excluded.tz, queue = excluded.queue, payload = excluded.payload, headers = excluded.headers,
    priority = excluded.priority, max_attempts = excluded.max_attempts, updated_at = excluded.updated_at,
    next_fire_at = CASE WHEN s.spec = excluded.spec AND s.tz = excluded.tz
                        THEN s.next_fire_at ELSE excluded.next_fire_at END;

-- name: DeleteSchedule :execrows
-- The wake is as for UpsertSchedule: schedulers and Store.Changes elsewhere
-- hear of it.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
DELETE FROM alkstore.schedules AS s USING w WHERE s.name = @name::text;

-- name: PauseSchedule :execrows
-- The wake is as for UpsertSchedule.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
UPDATE alkstore.schedules AS s SET paused = true, updated_at = @now::timestamptz
FROM w
WHERE s.name = @name::text;

-- name: ResumeSchedule :execrows
-- Only if the spec is still the one the next fire time was computed from.
-- The wake is as for UpsertSchedule.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
UPDATE alkstore.schedules AS s
SET paused = false, next_fire_at = @next_fire_at::timestamptz, updated_at = @now::timestamptz
FROM w
WHERE s.name = @name::text AND s.paused AND s.spec = @spec::text AND s.tz = @tz::text;

-- name: GetSchedule :one
SELECT * FROM alkstore.schedules WHERE name = @name;

-- name: ListSchedules :many
SELECT * FROM alkstore.schedules ORDER BY name;

-- name: DueSchedules :many
-- A page of the due schedules after (after_at, after_name) in firing order:
-- a scheduler's round pages on past schedules that failed to fire, which
-- stay at their boundary, instead of reading them first again and again.
SELECT * FROM alkstore.schedules
WHERE NOT paused AND next_fire_at <= @now::timestamptz
  AND (next_fire_at, name) > (@after_at::timestamptz, @after_name::text)
ORDER BY next_fire_at, name
LIMIT @max_rows;

-- name: FireSchedule :many
-- Fires a due schedule in one statement: advances it past the boundary it
-- fires and enqueues that boundary's job (run_at = the boundary). Only if no
-- one else did (next_fire_at is still that boundary) and it was not paused
-- or replaced since it was read: a concurrent fire of the same row waits
-- for this one's row lock, then matches nothing and enqueues nothing.
-- Returns the job; no row: nothing fired. The wake is as for EnqueueJob.
-- All or none: when an application's trigger skipped the job (a BEFORE
-- INSERT trigger returning NULL), alkstore.all_inserted fails the statement,
-- so the schedule does not move on past a boundary that enqueued nothing
-- (the fire fails like one a trigger raised in, and is tried again).
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
), fired AS (
    UPDATE alkstore.schedules AS s
    SET next_fire_at = @next_fire_at::timestamptz, last_fired_at = @now::timestamptz
    WHERE s.name = @name::text AND s.next_fire_at = @due_at::timestamptz AND s.spec = @spec::text
      AND s.tz = @tz::text AND s.queue = @queue::text AND NOT s.paused
    RETURNING s.queue, s.payload, s.priority, s.max_attempts, s.headers
), job AS (
    INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, headers)
    SELECT f.queue, f.payload, f.priority, f.max_attempts, @now::timestamptz, @due_at::timestamptz, f.headers
    FROM fired AS f, w
    RETURNING id
)
SELECT COALESCE(j.id, 0)::bigint AS id FROM fired AS f LEFT JOIN job AS j ON true
WHERE alkstore.all_inserted((SELECT count(*) FROM job), (SELECT count(*) FROM fired)::integer);

-- name: FireSchedules :many
-- FireSchedule for a batch of due schedules in one statement (the
-- scheduler's fire path on PostgreSQL: one round trip for up to a hundred
-- fires instead of one each; issue 18). Each row advances and enqueues
-- under FireSchedule's conditions, independently of the others; a row
-- another scheduler fired, or that was paused or replaced since it was
-- read, is left alone. A NOTIFY per non-empty wake (one per queue), only
-- when something fired. Returns the names that fired. All or none as
-- FireSchedule: a job an application's trigger skipped fails the batch
-- (alkstore.all_inserted), which the scheduler then fires one at a time.
WITH w AS MATERIALIZED (
    SELECT max(pg_notify('alkstore', x.wake)::text) AS woke
    FROM (SELECT unnest(@wakes::text[]) AS wake) AS x WHERE x.wake <> ''
), d AS (
    SELECT unnest(@names::text[]) AS name, unnest(@specs::text[]) AS spec, unnest(@tzs::text[]) AS tz,
           unnest(@queues::text[]) AS queue, unnest(@due_ats::timestamptz[]) AS due_at,
           unnest(@next_fire_ats::timestamptz[]) AS next_fire_at
), fired AS (
    UPDATE alkstore.schedules AS s
    SET next_fire_at = d.next_fire_at, last_fired_at = @now::timestamptz
    FROM d
    WHERE s.name = d.name AND s.next_fire_at = d.due_at AND s.spec = d.spec
      AND s.tz = d.tz AND s.queue = d.queue AND NOT s.paused
    RETURNING s.name, s.queue, s.payload, s.priority, s.max_attempts, s.headers, d.due_at
), jobs AS (
    INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, headers)
    SELECT f.queue, f.payload, f.priority, f.max_attempts, @now::timestamptz, f.due_at, f.headers
    FROM fired AS f, w
    RETURNING 1
)
SELECT f.name::text AS name FROM fired AS f
WHERE alkstore.all_inserted((SELECT count(*) FROM jobs), (SELECT count(*) FROM fired)::integer);

-- name: NextScheduleFire :one
-- The earliest next fire of an active schedule, in unix microseconds; 0 when none.
SELECT COALESCE(EXTRACT(EPOCH FROM min(next_fire_at)) * 1000000, 0)::bigint AS due_us
FROM alkstore.schedules WHERE NOT paused;

-- name: AcquireLease :execrows
-- Takes the lease when it is free or expired, or renews it for its holder
-- (same token). Affects no row while someone else holds it.
INSERT INTO alkstore.leases AS l (name, owner, token, renewed_at, expires_at)
VALUES (@name, @owner, @token, @now, @expires_at)
ON CONFLICT (name) DO UPDATE
SET owner = excluded.owner, token = excluded.token, renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE l.token = excluded.token OR l.expires_at <= excluded.renewed_at;

-- name: GetLease :one
SELECT * FROM alkstore.leases WHERE name = @name;

-- name: ReleaseLease :execrows
-- The wake tells standbys, on commit, to take the lease now.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
DELETE FROM alkstore.leases AS l USING w WHERE l.name = @name::text AND l.token = @token::bigint;
