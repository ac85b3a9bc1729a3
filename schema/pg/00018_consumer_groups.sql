-- Consumer groups (issue 22): the members of a named group on a stream
-- share its events. A group has a fixed number of partitions, chosen when
-- it is created; a keyed event belongs to the partition its key hashes to
-- (FNV-1a, computed in Go), an unkeyed one to its offset modulo the count.
-- Each partition has at most one owner at a time, through a lease fenced by
-- a token that every claim increments, and its own committed offset. See
-- docs/design/consumer-groups.md.

-- +goose Up
CREATE TABLE alkstore.consumer_groups (
    stream     text        NOT NULL,
    grp        text        NOT NULL,
    partitions integer     NOT NULL CHECK (partitions > 0),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (stream, grp)
);

CREATE TABLE alkstore.group_partitions (
    stream           text        NOT NULL,
    grp              text        NOT NULL,
    part             integer     NOT NULL,
    owner            text,
    token            bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    committed_offset bigint      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (stream, grp, part)
);

CREATE TABLE alkstore.group_members (
    stream     text        NOT NULL,
    grp        text        NOT NULL,
    member     text        NOT NULL,
    joined_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (stream, grp, member)
);

COMMENT ON TABLE alkstore.consumer_groups IS 'Consumer groups: members sharing a stream''s events, one row per group';
COMMENT ON COLUMN alkstore.consumer_groups.stream IS 'The stream the group consumes';
COMMENT ON COLUMN alkstore.consumer_groups.grp IS 'The group''s name';
COMMENT ON COLUMN alkstore.consumer_groups.partitions IS 'How many partitions the stream''s events are shared in, fixed at creation';
COMMENT ON COLUMN alkstore.consumer_groups.created_at IS 'When the first member created the group';
COMMENT ON TABLE alkstore.group_partitions IS 'A consumer group''s partitions: who owns each, fenced by a token, and how far it was committed';
COMMENT ON COLUMN alkstore.group_partitions.stream IS 'The stream the group consumes';
COMMENT ON COLUMN alkstore.group_partitions.grp IS 'The group''s name';
COMMENT ON COLUMN alkstore.group_partitions.part IS 'Partition number, 0 to the group''s partitions - 1';
COMMENT ON COLUMN alkstore.group_partitions.owner IS 'The member that holds the partition; NULL when free';
COMMENT ON COLUMN alkstore.group_partitions.token IS 'Fencing token, incremented by every claim: a commit under an older one fails (ErrClaimLost)';
COMMENT ON COLUMN alkstore.group_partitions.lease_expires_at IS 'When another member may take the partition unless its owner renews it';
COMMENT ON COLUMN alkstore.group_partitions.committed_offset IS 'Every event of the partition at or below it is handled';
COMMENT ON COLUMN alkstore.group_partitions.updated_at IS 'When the row last changed';
COMMENT ON TABLE alkstore.group_members IS 'The live members of consumer groups, with their heartbeat leases';
COMMENT ON COLUMN alkstore.group_members.stream IS 'The stream the group consumes';
COMMENT ON COLUMN alkstore.group_members.grp IS 'The group''s name';
COMMENT ON COLUMN alkstore.group_members.member IS 'The member''s id: its name and a random suffix, one per running member';
COMMENT ON COLUMN alkstore.group_members.joined_at IS 'When the member joined';
COMMENT ON COLUMN alkstore.group_members.expires_at IS 'Unless it heartbeats before then, the member counts as gone';

-- +goose Down
DROP TABLE alkstore.group_members;
DROP TABLE alkstore.group_partitions;
DROP TABLE alkstore.consumer_groups;
