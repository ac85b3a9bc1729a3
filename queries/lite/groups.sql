-- Consumer groups (docs/design/consumer-groups.md); see queries/pg/groups.sql.
-- Other processes hear of every commit through their watchers: no wakes.

-- name: CreateGroup :exec
INSERT INTO alk_consumer_groups (stream, grp, partitions, created_at)
VALUES (@stream, @grp, @partitions, @now)
ON CONFLICT (stream, grp) DO NOTHING;

-- name: GroupPartitionCount :one
SELECT partitions FROM alk_consumer_groups WHERE stream = @stream AND grp = @grp;

-- name: CreateGroupPartitions :exec
INSERT INTO alk_group_partitions (stream, grp, part, updated_at)
-- @parts is a JSON array of the partition numbers, 0 to the count - 1.
SELECT @stream, @grp, p.value, @now FROM json_each(CAST(@parts AS TEXT)) AS p WHERE true
ON CONFLICT (stream, grp, part) DO NOTHING;

-- name: ListGroups :many
SELECT stream, grp, partitions, created_at FROM alk_consumer_groups ORDER BY stream, grp;

-- name: UpsertGroupMember :exec
INSERT INTO alk_group_members (stream, grp, member, joined_at, expires_at)
VALUES (@stream, @grp, @member, @now, @expires_at)
ON CONFLICT (stream, grp, member) DO UPDATE SET expires_at = excluded.expires_at;

-- name: DeleteGroupMember :exec
DELETE FROM alk_group_members WHERE stream = @stream AND grp = @grp AND member = @member;

-- name: DeleteExpiredGroupMembers :execrows
DELETE FROM alk_group_members
WHERE stream = @stream AND grp = @grp AND expires_at <= @now;

-- name: GroupMembers :many
SELECT member, joined_at, expires_at FROM alk_group_members
WHERE stream = @stream AND grp = @grp ORDER BY member;

-- name: GroupPartitions :many
SELECT part, owner, token, lease_expires_at, committed_offset FROM alk_group_partitions
WHERE stream = @stream AND grp = @grp ORDER BY part;

-- name: ClaimGroupPartition :one
-- Free, expired, or the claiming member's own (see the pg file).
UPDATE alk_group_partitions
SET owner = @member, token = token + 1, lease_expires_at = @expires_at, updated_at = @now
WHERE stream = @stream AND grp = @grp AND part = @part
  AND (owner IS NULL OR lease_expires_at <= @now OR owner = @member)
RETURNING token, committed_offset;

-- name: RenewGroupPartitions :many
UPDATE alk_group_partitions
SET lease_expires_at = @expires_at
WHERE stream = @stream AND grp = @grp AND owner = @member
RETURNING part, token;

-- name: ReleaseGroupPartition :execrows
UPDATE alk_group_partitions
SET owner = NULL, lease_expires_at = NULL, updated_at = @now,
    committed_offset = max(committed_offset, CAST(@committed_offset AS INTEGER))
WHERE stream = @stream AND grp = @grp AND part = @part
  AND owner = @member AND token = @token;

-- name: CommitGroupOffset :execrows
-- Fenced by the claim's token: no row when another member claimed the
-- partition since (ErrClaimLost). A lease that ran out unclaimed (the
-- handler's transaction held the writer the heartbeat needed) is renewed.
UPDATE alk_group_partitions
SET committed_offset = max(committed_offset, CAST(@committed_offset AS INTEGER)), updated_at = @now,
    lease_expires_at = max(lease_expires_at, CAST(@expires_at AS INTEGER))
WHERE stream = @stream AND grp = @grp AND part = @part
  AND owner = @member AND token = @token;

-- name: GroupEventKeys :many
SELECT id, key FROM alk_events INDEXED BY alk_events_stream_id
WHERE stream = @stream AND id > @after
ORDER BY stream, id
LIMIT CAST(@lim AS INTEGER);
