-- Keys in byte order (attack53b F1): compaction_heads.key takes the
-- collation "C". Heads lists "in key order" and pages by `key > after`, and
-- a keyed PublishMany locks its head rows in key order, which a Tx making
-- several keyed publishes is told to follow; all of these followed the
-- database's collation, so on an ICU or glibc en-US database Heads listed
-- ["_x" "1" "a" "A" "b" "B" "é" "z"] where SQLite lists byte order ["1" "A"
-- "B" "_x" "a" "b" "z" "é"], and a Tx locking its keys in Go's sort order
-- deadlocked (40P01) with a PublishMany of the same keys. With "C" every
-- comparison of a head's key (its primary key, Heads' range and order, the
-- lock orders of PublishMany, trims, retention and partition drops) is in
-- byte order, as on SQLite. Equality is the same under every deterministic
-- collation, so no key changes meaning. A key compared with events.key
-- (which keeps the database's collation) compares in "C" too, except where
-- a query looks events up by key (CompactWindow), which names the events
-- index's collation. Changing only a column's collation rewrites no row;
-- PostgreSQL rebuilds the primary key (stream, key) under an ACCESS
-- EXCLUSIVE lock on the heads table (one entry a key: publishes of keyed
-- events wait for it), waiting at most lock_timeout (10 s) for the lock,
-- after which the migration fails and rolls back (the next Open runs it
-- again). On a database whose collation is C already nothing changes but
-- the index's build. Down restores the database's collation the same way.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.compaction_heads ALTER COLUMN key TYPE text COLLATE "C";
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.compaction_heads ALTER COLUMN key TYPE text COLLATE "default";
END
$$;
-- +goose StatementEnd
