-- PostgreSQL: the janitor's tombstone pass pages through a stream's
-- expired tombstone heads, as SQLite's does through its tombstone events
-- (compact53). A tombstone it keeps (its key still has a version inside
-- MinCompactionLag, see DeleteKeyOtherVersions) stayed at the front of
-- every batch until the lag passed, and more of them than a batch delayed
-- every other expired tombstone of the stream by up to the lag. The pass
-- now reads on after (tombstone_at, key) of the last head of a page, so
-- its index gains key: compaction_heads_tombstones (stream, tombstone_at,
-- key) WHERE tombstone_at IS NOT NULL replaces 00041's
-- compaction_heads_tombstone_at (stream, tombstone_at), whose entries tie
-- on tombstone_at (a transaction's tombstones share its now()), so a page
-- could not say where the next begins without reading the ties again.
-- key never changes in an update, so a publish of a value over a value is
-- still a HOT update (00031); head_offset, which every publish changes,
-- would not be.
-- Runs outside a transaction, each step on its own and able to run again:
-- an invalid build a stopped run left is dropped, the index built
-- CONCURRENTLY, the old one dropped CONCURRENTLY (a library older than
-- this version reads the new index as it read the old: its ORDER BY
-- stream, tombstone_at is the new index's prefix). The Down does the
-- reverse. SQLite's 00042 is a no-op.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.compaction_heads_tombstones') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.compaction_heads_tombstones RENAME TO compaction_heads_tombstones_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.compaction_heads_tombstones_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS compaction_heads_tombstones ON alkstore.compaction_heads (stream, tombstone_at, key)
    WHERE tombstone_at IS NOT NULL;
COMMENT ON INDEX alkstore.compaction_heads_tombstones IS 'Tombstone heads of each stream, oldest first, paged by key within a moment (DeleteExpiredTombstones)';
DROP INDEX CONCURRENTLY IF EXISTS alkstore.compaction_heads_tombstone_at;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.compaction_heads_tombstone_at') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.compaction_heads_tombstone_at RENAME TO compaction_heads_tombstone_at_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.compaction_heads_tombstone_at_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS compaction_heads_tombstone_at ON alkstore.compaction_heads (stream, tombstone_at)
    WHERE tombstone_at IS NOT NULL;
COMMENT ON INDEX alkstore.compaction_heads_tombstone_at IS 'Tombstone heads of each stream, oldest first (DeleteExpiredTombstones)';
DROP INDEX CONCURRENTLY IF EXISTS alkstore.compaction_heads_tombstones;
