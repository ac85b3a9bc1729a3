-- PostgreSQL: compaction_heads gets tombstone_at, the created_at of the
-- head's event while that event is a tombstone, NULL otherwise (and on a
-- headless row). 00041 fills it, indexes it and drops events_tombstones;
-- the reasons are there. Its own migration, in a transaction, so that the
-- column is plain DDL (sqlc reads the schema from these files) added under
-- lock_timeout: a brief ACCESS EXCLUSIVE lock on the heads table, waited
-- for at most 10 s (then the migration rolls back and the next Open runs
-- it again); no default, so no rewrite. The Down drops it the same way.

-- +goose Up
SET LOCAL lock_timeout = '10s';
ALTER TABLE alkstore.compaction_heads ADD COLUMN tombstone_at timestamptz;
COMMENT ON COLUMN alkstore.compaction_heads.tombstone_at IS 'created_at of the head''s event while it is a tombstone (NULL otherwise, and on a headless row): what the janitor''s tombstone retention reads, in an index no publish of a value over a value touches';

-- +goose Down
SET LOCAL lock_timeout = '10s';
ALTER TABLE alkstore.compaction_heads DROP COLUMN tombstone_at;
