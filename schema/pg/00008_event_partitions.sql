-- Events become a declarative RANGE-partitioned table keyed by the offset
-- (id), so that retention and trims can drop a whole partition instead of
-- deleting its rows one by one (docs/design/partitions.md).
--
-- The existing table is not copied: it is renamed and attached as the first
-- partition, covering every offset drawn so far (MINVALUE up to the
-- sequence's position); an empty one is dropped. The new parent copies its columns, defaults,
-- constraints and comments with LIKE, and every index of the old table,
-- whatever migrations defined them, from the catalog under its own name
-- (the old table's indexes are renamed and attached to them). A DEFAULT
-- partition takes any offset no range partition covers, so a publish never
-- fails for want of a partition; the janitor creates range partitions ahead
-- of the sequence (alkstore.add_event_partition). The sequence is untouched.

-- +goose Up
ALTER TABLE alkstore.events RENAME TO events_p0;

CREATE TABLE alkstore.events (LIKE alkstore.events_p0 INCLUDING ALL EXCLUDING INDEXES) PARTITION BY RANGE (id);

-- The range partitions and when each was sealed: the moment every offset
-- below its upper bound had been drawn, so no event in it was published
-- later. A partition is past a stream's retention once sealed_at is, which
-- the janitor checks without reading the partition's rows.
CREATE TABLE alkstore.event_partitions (
    name      text        PRIMARY KEY,
    lo        bigint      NOT NULL,
    hi        bigint      NOT NULL,
    sealed_at timestamptz,
    CHECK (lo < hi)
);
-- +goose StatementBegin
DO $$
DECLARE
    r    record;
    top  bigint;
    path text := current_setting('search_path');
BEGIN
    -- Catalog text (index definitions, regclass) comes schema-qualified
    -- (the caller's search_path is restored at the end: goose records the
    -- version in this transaction).
    PERFORM set_config('search_path', 'pg_catalog', true);
    FOR r IN
        SELECT ic.relname AS name, pg_get_indexdef(i.indexrelid) AS def,
               con.conname, pg_get_constraintdef(con.oid) AS condef,
               obj_description(i.indexrelid, 'pg_class') AS comment,
               obj_description(con.oid, 'pg_constraint') AS concomment
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
        WHERE i.indrelid = 'alkstore.events_p0'::regclass
        ORDER BY ic.relname
    LOOP
        -- Free the name for the parent's index; the partition's own index
        -- is attached to it below.
        EXECUTE format('ALTER INDEX alkstore.%I RENAME TO %I', r.name, left(r.name, 60) || '_p0');
        IF r.conname IS NOT NULL THEN
            EXECUTE format('ALTER TABLE alkstore.events ADD CONSTRAINT %I %s', r.conname, r.condef);
            IF r.concomment IS NOT NULL THEN
                EXECUTE format('COMMENT ON CONSTRAINT %I ON alkstore.events IS %L', r.conname, r.concomment);
            END IF;
        ELSE
            EXECUTE regexp_replace(r.def, ' ON alkstore\.events_p0 ', ' ON alkstore.events ');
        END IF;
        IF r.comment IS NOT NULL THEN
            EXECUTE format('COMMENT ON INDEX alkstore.%I IS %L', r.name, r.comment);
        END IF;
    END LOOP;

    SELECT GREATEST(pg_sequence_last_value('alkstore.event_offset_seq'),
                    (SELECT max(id) FROM alkstore.events_p0), 0) + 1
    INTO top;
    IF EXISTS (SELECT 1 FROM alkstore.events_p0) THEN
        EXECUTE format('ALTER TABLE alkstore.events ATTACH PARTITION alkstore.events_p0 FOR VALUES FROM (MINVALUE) TO (%s)', top);
        -- Every offset it covers has been drawn: sealed now.
        INSERT INTO alkstore.event_partitions (name, lo, hi, sealed_at) VALUES ('events_p0', 0, top, clock_timestamp());
    ELSE
        DROP TABLE alkstore.events_p0; -- nothing to keep (a fresh database)
    END IF;
    PERFORM set_config('search_path', path, true);
END
$$;
-- +goose StatementEnd

CREATE TABLE alkstore.events_default PARTITION OF alkstore.events DEFAULT;

COMMENT ON TABLE alkstore.event_partitions IS 'Range partitions of alkstore.events (not events_default), kept by alkstore.add_event_partition and alkstore.drop_event_partition';
COMMENT ON COLUMN alkstore.event_partitions.name IS 'Partition table name in schema alkstore (events_p<lo>)';
COMMENT ON COLUMN alkstore.event_partitions.lo IS 'Lowest offset the partition holds (events_p0, which starts at MINVALUE: 0, offsets being positive)';
COMMENT ON COLUMN alkstore.event_partitions.hi IS 'Offsets below this one (exclusive upper bound)';
COMMENT ON COLUMN alkstore.event_partitions.sealed_at IS 'A moment (database clock) by which every offset below hi had been drawn, so every event in the partition was published before it (NULL: not sealed yet)';

COMMENT ON TABLE alkstore.events IS 'Stream events, one row per published message; id is the offset; deleted by trim, retention and compaction. Range-partitioned by id (partitions events_p<lower bound> and events_default): the janitor adds partitions ahead of the sequence and drops those whose every event is past retention or trimmed';

-- Partition DDL for the janitor (store/partitions_pg.go). They run with
-- the caller's privileges: a role that does not own alkstore.events gets
-- "must be owner", and the janitor then leaves partitions alone.

-- +goose StatementBegin
CREATE FUNCTION alkstore.add_event_partition(lo bigint, hi bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    EXECUTE format('CREATE TABLE alkstore.%I PARTITION OF alkstore.events FOR VALUES FROM (%s) TO (%s)',
                   'events_p' || lo, lo, hi);
    INSERT INTO alkstore.event_partitions (name, lo, hi) VALUES ('events_p' || lo, lo, hi);
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION alkstore.add_event_partition(bigint, bigint) IS 'Creates the range partition events_p<lo> of alkstore.events for offsets lo <= id < hi';

-- +goose StatementBegin
CREATE FUNCTION alkstore.drop_event_partition(part text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE i.inhparent = 'alkstore.events'::regclass AND n.nspname = 'alkstore'
                     AND c.relname = part AND part <> 'events_default') THEN
        DELETE FROM alkstore.event_partitions WHERE name = part;
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE alkstore.%I', part);
    DELETE FROM alkstore.event_partitions WHERE name = part;
    RETURN true;
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION alkstore.drop_event_partition(text) IS 'Drops a range partition of alkstore.events (never events_default) with every event in it; false when there is no such partition';

-- +goose Down
DROP FUNCTION alkstore.drop_event_partition(text);
DROP FUNCTION alkstore.add_event_partition(bigint, bigint);
DROP TABLE alkstore.event_partitions;
ALTER TABLE alkstore.events RENAME TO events_partitioned;
CREATE TABLE alkstore.events (LIKE alkstore.events_partitioned INCLUDING ALL EXCLUDING INDEXES);
INSERT INTO alkstore.events SELECT * FROM alkstore.events_partitioned;
-- +goose StatementBegin
DO $$
DECLARE
    r    record;
    path text := current_setting('search_path');
BEGIN
    PERFORM set_config('search_path', 'pg_catalog', true);
    FOR r IN
        SELECT ic.relname AS name, pg_get_indexdef(i.indexrelid) AS def,
               con.conname, pg_get_constraintdef(con.oid) AS condef,
               obj_description(i.indexrelid, 'pg_class') AS comment
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
        WHERE i.indrelid = 'alkstore.events_partitioned'::regclass
        ORDER BY ic.relname
    LOOP
        EXECUTE format('ALTER INDEX alkstore.%I RENAME TO %I', r.name, left(r.name, 58) || '_part');
        IF r.conname IS NOT NULL THEN
            EXECUTE format('ALTER TABLE alkstore.events ADD CONSTRAINT %I %s', r.conname, r.condef);
        ELSE
            EXECUTE regexp_replace(r.def, ' ON ONLY alkstore\.events_partitioned ', ' ON alkstore.events ');
        END IF;
        IF r.comment IS NOT NULL THEN
            EXECUTE format('COMMENT ON INDEX alkstore.%I IS %L', r.name, r.comment);
        END IF;
    END LOOP;
    PERFORM set_config('search_path', path, true);
END
$$;
-- +goose StatementEnd
DROP TABLE alkstore.events_partitioned;
COMMENT ON TABLE alkstore.events IS 'Stream events, one row per published message; id is the offset; deleted by trim, retention and compaction';
