-- The settled horizon made visible (PostgreSQL): how far stream delivery
-- trails the newest committed event, and which transaction holds it back.
-- See docs/design/stream-horizon.md.

-- name: FirstEventAbove :many
-- The oldest committed event above the settled horizon: how long delivery
-- has kept it waiting. One entry of events_pkey.
SELECT id, created_at FROM alkstore.events
WHERE id > @horizon::bigint
ORDER BY id
LIMIT 1;

-- name: OldestWriteTransaction :many
-- The oldest transaction holding a transaction id (a write) anywhere on the
-- server, this store's databases or any other: transaction ids and
-- snapshots are cluster-wide, so it is what holds the settled horizon
-- back. A role without pg_read_all_stats (or membership in the session's
-- role) sees the pid and database of another role's session, but not its
-- state, start or statement times (NULL). Prepared transactions hold ids
-- too and are not sessions: they are not listed here (pg_prepared_xacts).
SELECT a.pid::integer AS pid, COALESCE(a.datname, '')::text AS datname,
       COALESCE(a.state, '')::text AS state, a.xact_start AS xact_start, a.query_start AS query_start,
       now()::timestamptz AS now
FROM pg_catalog.pg_stat_activity a
WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
ORDER BY age(a.backend_xid) DESC
LIMIT 1;

-- name: SaveSettledCandidate :exec
-- Records a candidate this store proved settled (a snapshot's xmin reached
-- @next), for stores that have never read (docs/design/stream-horizon.md,
-- step 6). Only forward: a head no greater than the stored one changes
-- nothing (another store got there first), and head and next move together.
UPDATE alkstore.settled_candidate
SET head = @head::bigint, next = @next::bigint
WHERE one AND head < @head::bigint;

-- name: ProvenCandidate :one
-- The candidate some store proved settled and stored (SaveSettledCandidate),
-- with this statement's xmin: a read that finds itself held back takes it
-- (at most once a second), so a store that has never read settles at once
-- up to it (docs/design/stream-horizon.md, step 6). Read only then, not by
-- every read: the one-row table's InitPlan cost each read statement about
-- 18k server instructions (callgrind).
SELECT p.head, p.next, pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin
FROM alkstore.settled_candidate p
WHERE p.one;
