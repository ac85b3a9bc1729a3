-- Schedules and the scheduler's lease (SQLite). Times are unix microseconds
-- from the store's clock; next fire times are computed by the caller from
-- the spec. The writer slot serializes writes, so no row locking is needed.

-- name: UpsertSchedule :exec
-- Registers or replaces a schedule. Registering the same spec and time zone
-- again keeps the pending boundary (and the paused flag), so an application
-- may register its schedules at every start without skipping a fire.
INSERT INTO alk_schedules (name, spec, tz, queue, payload, priority, max_attempts,
                           next_fire_at, created_at, updated_at, headers)
VALUES (@name, @spec, @tz, @queue, sqlc.narg(payload), @priority, @max_attempts,
        @next_fire_at, @now, @now, sqlc.narg(headers))
ON CONFLICT (name) DO UPDATE
SET spec = excluded.spec, tz = excluded.tz, queue = excluded.queue, payload = excluded.payload, headers = excluded.headers,
    priority = excluded.priority, max_attempts = excluded.max_attempts, updated_at = excluded.updated_at,
    next_fire_at = CASE WHEN alk_schedules.spec = excluded.spec AND alk_schedules.tz = excluded.tz
                        THEN alk_schedules.next_fire_at ELSE excluded.next_fire_at END;

-- name: DeleteSchedule :execrows
DELETE FROM alk_schedules WHERE name = @name;

-- name: PauseSchedule :execrows
UPDATE alk_schedules SET paused = TRUE, updated_at = @now WHERE name = @name;

-- name: ResumeSchedule :execrows
-- Only if the spec is still the one the next fire time was computed from.
UPDATE alk_schedules
SET paused = FALSE, next_fire_at = @next_fire_at, updated_at = @now
WHERE name = @name AND paused AND spec = @spec AND tz = @tz;

-- name: GetSchedule :one
SELECT * FROM alk_schedules WHERE name = @name;

-- name: ListSchedules :many
SELECT * FROM alk_schedules ORDER BY name;

-- name: DueSchedules :many
-- A page of the due schedules after (after_at, after_name) in firing order:
-- a scheduler's round pages on past schedules that failed to fire, which
-- stay at their boundary, instead of reading them first again and again.
SELECT * FROM alk_schedules
WHERE NOT paused AND next_fire_at <= @now
  AND (next_fire_at, name) > (CAST(@after_at AS INTEGER), CAST(@after_name AS TEXT))
ORDER BY next_fire_at, name
LIMIT CAST(@max_rows AS INTEGER);

-- name: FireSchedule :many
-- Fires a due schedule: advances it past the boundary it fires, only if no
-- one else did (next_fire_at is still that boundary) and it was not paused
-- or replaced since it was read, and returns the job to enqueue (EnqueueJob,
-- run_at = the boundary) in the same transaction. No row: do not fire.
UPDATE alk_schedules
SET next_fire_at = @next_fire_at, last_fired_at = CAST(@now AS INTEGER)
WHERE name = @name AND next_fire_at = @due_at AND spec = @spec AND tz = @tz AND queue = @queue AND NOT paused
RETURNING queue, payload, priority, max_attempts, headers;

-- name: NextScheduleFire :one
-- The earliest next fire of an active schedule, in unix microseconds; 0 when none.
SELECT CAST(COALESCE(min(next_fire_at), 0) AS INTEGER) AS due_us
FROM alk_schedules WHERE NOT paused;

-- name: AcquireLease :execrows
-- Takes the lease when it is free or expired, or renews it for its holder
-- (same token). Affects no row while someone else holds it.
INSERT INTO alk_leases (name, owner, token, renewed_at, expires_at)
VALUES (@name, @owner, @token, @now, @expires_at)
ON CONFLICT (name) DO UPDATE
SET owner = excluded.owner, token = excluded.token, renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE alk_leases.token = excluded.token OR alk_leases.expires_at <= excluded.renewed_at;

-- name: GetLease :one
SELECT * FROM alk_leases WHERE name = @name;

-- name: ReleaseLease :execrows
DELETE FROM alk_leases WHERE name = @name AND token = @token;
