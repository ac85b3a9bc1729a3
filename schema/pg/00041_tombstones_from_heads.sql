-- PostgreSQL: the janitor's tombstone pass (ExpiredTombstones) finds a
-- stream's tombstones from the heads instead of from the events, and the
-- partial index events_tombstones goes (issue 18). An unkeyed event never
-- entered it, yet PostgreSQL opens every index of the partition for each
-- INSERT, plans and compiles each partial index's predicate and closes it:
-- events_tombstones cost every publish, keyed or not, about 8k of the
-- backend's instructions (an unkeyed PublishEvent 115.3k against 107.3k
-- without it; README, Performance).
--
-- compaction_heads has tombstone_at (00040): the created_at of the head's
-- event while that event is a tombstone (the same now() the event's
-- default takes, in the same statement), NULL otherwise. Every statement
-- that writes a head sets it with the head (the keyed publishes and
-- PublishEvents; a value over a value keeps it NULL, so that update stays
-- HOT, 00031), and every one that makes a row headless clears it. A
-- partial index on (stream, tombstone_at) holds the tombstone heads alone,
-- oldest first: the pass reads exactly the expired ones, where it read a
-- stream's oldest tombstone events, heads or not, and kept those still
-- heads.
--
-- Runs outside a transaction, each step in its own, none rewriting a table
-- or holding a lock while it scans:
-- 1. the tombstone heads marked, walking events_tombstones (the tombstone
--    events, not every head) in committed batches of 1,000, skipping head
--    rows a transaction holds; then one pass over every tombstone for the
--    rows skipped or written since, which waits for a held row at most
--    lock_timeout 10 s;
-- 2. compaction_heads_tombstone_at built CONCURRENTLY (an invalid build a
--    stopped run left is dropped first);
-- 3. events_tombstones dropped: a partitioned index cannot be dropped
--    CONCURRENTLY, so this takes a brief ACCESS EXCLUSIVE lock on events
--    and its partitions (catalog work only), waiting at most lock_timeout
--    for the transactions using events (a publish, a read) to end.
-- A step that stops at its lock timeout stops the migration; the next Open
-- runs it again from the start, and every step can run again.
-- A library older than 00040 on the new schema leaves tombstone_at alone:
-- a tombstone it publishes is not marked (the janitor deletes it after the
-- key's next tombstone, or never: upgrade every process), one of its values
-- over a marked tombstone leaves the mark (the pass checks the head's event
-- is still a tombstone, so nothing wrong is deleted), and its own tombstone
-- pass, without events_tombstones, reads a stream's events through
-- events_stream_id. The Down builds events_tombstones again one partition
-- at a time, each in its own transaction (a partition's build blocks
-- publishes into that partition alone, for its scan), then the partitioned
-- index over them (catalog work), and drops the column's index (00040's
-- Down the column).
-- SQLite's 00040 and 00041 are no-ops (see there).

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    s  text := '';
    i  bigint := 0;
    ls text;
    li bigint;
BEGIN
    IF to_regclass('alkstore.events_tombstones') IS NULL THEN
        RETURN; -- a rerun after step 3, which ran after this
    END IF;
    LOOP
        PERFORM set_config('lock_timeout', '10s', true);
        SELECT b.stream, b.id INTO ls, li
        FROM (SELECT e.stream, e.id FROM alkstore.events e
              WHERE e.payload IS NULL AND e.key IS NOT NULL AND (e.stream, e.id) > (s, i)
              ORDER BY e.stream, e.id LIMIT 1000) b
        ORDER BY b.stream DESC, b.id DESC LIMIT 1;
        EXIT WHEN ls IS NULL;
        UPDATE alkstore.compaction_heads h SET tombstone_at = c.created_at
        FROM (SELECT x.stream, x.key, e.created_at
              FROM alkstore.events e
              JOIN alkstore.compaction_heads x ON x.stream = e.stream AND x.key = e.key AND x.head_offset = e.id
              WHERE e.payload IS NULL AND e.key IS NOT NULL AND (e.stream, e.id) > (s, i) AND (e.stream, e.id) <= (ls, li)
                AND x.tombstone_at IS NULL
              FOR UPDATE OF x SKIP LOCKED) c
        WHERE h.stream = c.stream AND h.key = c.key;
        COMMIT;
        s := ls;
        i := li;
    END LOOP;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('alkstore.events_tombstones') IS NULL THEN
        RETURN; -- a rerun after step 3, which ran after this
    END IF;
    PERFORM set_config('lock_timeout', '10s', true);
    UPDATE alkstore.compaction_heads h SET tombstone_at = c.created_at
    FROM (SELECT x.stream, x.key, e.created_at
          FROM alkstore.events e
          JOIN alkstore.compaction_heads x ON x.stream = e.stream AND x.key = e.key AND x.head_offset = e.id
          WHERE e.payload IS NULL AND e.key IS NOT NULL AND x.tombstone_at IS NULL
          FOR UPDATE OF x) c
    WHERE h.stream = c.stream AND h.key = c.key;
END
$$;
-- +goose StatementEnd
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
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    DROP INDEX IF EXISTS alkstore.events_tombstones;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    IF to_regclass('alkstore.events_tombstones') IS NOT NULL THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'alkstore.events'::regclass ORDER BY c.relname
    LOOP
        PERFORM set_config('lock_timeout', '10s', true);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON alkstore.%I (stream, id) WHERE payload IS NULL AND key IS NOT NULL',
                       left(r.relname, 52) || '_tombstones', r.relname);
        COMMIT;
    END LOOP;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    -- Attaches the partitions' indexes built above (same definition);
    -- builds one only on a partition created since.
    CREATE INDEX IF NOT EXISTS events_tombstones ON alkstore.events (stream, id) WHERE payload IS NULL AND key IS NOT NULL;
    COMMENT ON INDEX alkstore.events_tombstones IS 'Tombstones of each stream, oldest first (DeleteExpiredTombstones)';
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.compaction_heads_tombstone_at;
