-- Consumer groups (docs/design/consumer-groups.md). Every statement is by
-- primary key, or a range of one group's rows of a primary key: a group
-- has a few tens of partitions and members.

-- name: CreateGroup :exec
-- The first member creates the group with its partition count; later
-- creations change nothing (GroupPartitionCount then says what it is).
INSERT INTO alkstore.consumer_groups (stream, grp, partitions, created_at)
VALUES (@stream, @grp, @partitions, @now)
ON CONFLICT (stream, grp) DO NOTHING;

-- name: GroupPartitionCount :one
SELECT partitions FROM alkstore.consumer_groups WHERE stream = @stream AND grp = @grp;

-- name: CreateGroupPartitions :exec
-- The group's partition rows, free and at offset 0; idempotent.
INSERT INTO alkstore.group_partitions (stream, grp, part, updated_at)
SELECT @stream::text, @grp::text, g.n - 1, @now::timestamptz FROM generate_series(1, @partitions::integer) AS g(n)
ON CONFLICT (stream, grp, part) DO NOTHING;

-- name: ListGroups :many
SELECT stream, grp, partitions, created_at FROM alkstore.consumer_groups ORDER BY stream, grp;

-- name: UpsertGroupMember :exec
-- A join (with a wake, so the other members rebalance at once) or a
-- heartbeat (no wake: it changes no one's share), which recreates the row
-- of a member whose row another member deleted as expired.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.group_members (stream, grp, member, joined_at, expires_at)
SELECT @stream::text, @grp::text, @member::text, @now::timestamptz, @expires_at::timestamptz FROM w
ON CONFLICT (stream, grp, member) DO UPDATE SET expires_at = EXCLUDED.expires_at;

-- name: DeleteGroupMember :exec
-- A graceful leave; the wake makes the others take its partitions now.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
DELETE FROM alkstore.group_members AS m USING w
WHERE m.stream = @stream::text AND m.grp = @grp::text AND m.member = @member::text;

-- name: DeleteExpiredGroupMembers :execrows
DELETE FROM alkstore.group_members
WHERE stream = @stream AND grp = @grp AND expires_at <= @now;

-- name: GroupMembers :many
SELECT member, joined_at, expires_at FROM alkstore.group_members
WHERE stream = @stream AND grp = @grp ORDER BY member;

-- name: GroupPartitions :many
SELECT part, owner, token, lease_expires_at, committed_offset FROM alkstore.group_partitions
WHERE stream = @stream AND grp = @grp ORDER BY part;

-- name: ClaimGroupPartition :one
-- Takes a free partition, one whose lease expired, or one the claiming
-- member owns already (it dropped the partition when its lease lapsed in
-- its own view while its heartbeat renewed the row), with a new token.
-- No row: someone else holds it. A commit in flight under the old owner
-- holds the row's lock; the claim waits for it and then sees its outcome.
UPDATE alkstore.group_partitions
SET owner = @member, token = token + 1, lease_expires_at = @expires_at, updated_at = @now
WHERE stream = @stream AND grp = @grp AND part = @part
  AND (owner IS NULL OR lease_expires_at <= @now OR owner = @member)
RETURNING token, committed_offset;

-- name: RenewGroupPartitions :many
-- Extends the leases of every partition the member still owns, and says
-- which they are.
UPDATE alkstore.group_partitions
SET lease_expires_at = @expires_at
WHERE stream = @stream AND grp = @grp AND owner = @member
RETURNING part, token;

-- name: ReleaseGroupPartition :execrows
-- Gives a partition up (a rebalance or a leave), committing its owner's
-- last position on the way; the wake makes the member whose share it is
-- claim it now.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
UPDATE alkstore.group_partitions AS p
SET owner = NULL, lease_expires_at = NULL, updated_at = @now::timestamptz,
    committed_offset = GREATEST(p.committed_offset, @committed_offset::bigint)
FROM w
WHERE p.stream = @stream::text AND p.grp = @grp::text AND p.part = @part::integer
  AND p.owner = @member::text AND p.token = @token::bigint;

-- name: CommitGroupOffset :execrows
-- Fenced by the claim's token: no row when another member claimed the
-- partition since (ErrClaimLost; a claim waits for the row's lock, then
-- re-checks). A lease that ran out with no one claiming it does not fence
-- (no one else handled the partition's events meanwhile) and is renewed:
-- a handler's transaction may have held the only connection the heartbeat
-- needed.
UPDATE alkstore.group_partitions
SET committed_offset = GREATEST(committed_offset, @committed_offset), updated_at = @now,
    lease_expires_at = GREATEST(lease_expires_at, @expires_at::timestamptz)
WHERE stream = @stream AND grp = @grp AND part = @part
  AND owner = @member AND token = @token;

-- name: GroupEventKeys :many
-- The keys of a stream's events after an offset, for a group's lag per
-- partition (Group.Stats): a range of events_stream_id, at most @lim rows.
SELECT id, key FROM alkstore.events
WHERE (stream, id) > (@stream::text, @after::bigint) AND stream >= @stream::text AND stream <= @stream::text
  AND id > @after::bigint
ORDER BY stream, id
LIMIT @lim;
