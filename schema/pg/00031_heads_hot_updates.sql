-- A keyed publish that moves its key's head becomes a HOT update of the
-- head row (issue 18): no new index entry, and the row's versions stay on
-- one heap page, where the next publish's lookup finds them.
--
-- PostgreSQL makes an update HOT only when no column an index holds or
-- filters on changes. compaction_heads_headless held updated_at under the
-- predicate head_offset IS NULL, and every publish changes both, so every
-- publish wrote a new primary-key entry too (and, without vacuum, the key's
-- lookups stepped over the dead ones). Here the janitor's index moves to a
-- column of its own, headless_at: the updated_at of a headless row, NULL
-- while the row has a head. A publish onto a headed row leaves it NULL;
-- only the first value of a key (headless -> headed) and the statements
-- that make or keep a row headless (a lock, an unhead) write it.
-- It has no default: a default cannot look at head_offset, and would put
-- every headed row written without it into the index. Whatever writes
-- head rows by hand sets it with head_offset (the janitor deletes a row
-- only if head_offset is NULL too, so a stray value never costs a head).
-- The table keeps its fillfactor (100): pruning a page of the versions
-- no snapshot needs makes the room, and 99% of the updates were HOT.
-- SQLite's 00031 is a no-op (it has no HOT updates; its head table is
-- already clustered on the key).

-- +goose Up
ALTER TABLE alkstore.compaction_heads ADD COLUMN headless_at timestamptz;
UPDATE alkstore.compaction_heads SET headless_at = updated_at WHERE head_offset IS NULL;
CREATE INDEX compaction_heads_headless_at ON alkstore.compaction_heads (stream, headless_at) WHERE headless_at IS NOT NULL;
DROP INDEX alkstore.compaction_heads_headless;
COMMENT ON COLUMN alkstore.compaction_heads.headless_at IS 'updated_at of a headless row (NULL while the row has a head): what the janitor''s TTL and the headless statistics read, in an index no publish onto a head touches, so moving a head is a HOT update';
COMMENT ON INDEX alkstore.compaction_heads_headless_at IS 'Headless rows of each stream, least recently used first (DeleteExpiredHeadless, StreamHeadStats, StreamsWithHeadless)';

-- +goose Down
CREATE INDEX compaction_heads_headless ON alkstore.compaction_heads (stream, updated_at) WHERE head_offset IS NULL;
DROP INDEX alkstore.compaction_heads_headless_at;
ALTER TABLE alkstore.compaction_heads DROP COLUMN headless_at;
