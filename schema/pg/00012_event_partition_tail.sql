-- Creating a range partition of alkstore.events made PostgreSQL scan the
-- whole DEFAULT partition under ACCESS EXCLUSIVE, to prove it held no row
-- of the new range (issue 26): with millions of rows there, every creation
-- blocked publishers for as long, or gave up. The default partition now
-- holds only offsets below a fence, by a CHECK constraint PostgreSQL reads
-- instead of scanning; offsets at or above the fence that no range covers
-- go to events_tail, a partition FROM the fence TO MAXVALUE. An empty
-- default partition is dropped instead (an empty partition no read can
-- prune only misleads the planner). The janitor
-- creates ranges by carving them out of the tail
-- (alkstore.extend_event_partitions): when the tail is empty, as in steady
-- state, that is catalog work only.
--
-- This migration scans the default partition once (the constraint's
-- validation), under the lock it takes on events.

-- +goose Up
LOCK TABLE alkstore.events IN ACCESS EXCLUSIVE MODE;
-- +goose StatementBegin
DO $$
DECLARE
    fence bigint;
BEGIN
    SELECT GREATEST(COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'), 0) + 1,
                    (SELECT max(hi) FROM alkstore.event_partitions),
                    (SELECT max(id) + 1 FROM alkstore.events_default), 1)
    INTO fence;
    IF EXISTS (SELECT 1 FROM alkstore.events_default) THEN
        EXECUTE format('ALTER TABLE alkstore.events_default ADD CONSTRAINT events_default_fence CHECK (id < %s)', fence);
    ELSE
        -- Nothing to keep (a fresh database, or a janitor that kept up):
        -- every offset from now on is at or above the fence.
        DROP TABLE alkstore.events_default;
    END IF;
    EXECUTE format('CREATE TABLE alkstore.events_tail PARTITION OF alkstore.events FOR VALUES FROM (%s) TO (MAXVALUE)', fence);
END
$$;
-- +goose StatementEnd

DROP FUNCTION alkstore.add_event_partition(bigint, bigint);

-- +goose StatementBegin
CREATE FUNCTION alkstore.extend_event_partitions(size bigint, upto bigint) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
    lo  bigint;
    top bigint;
    n   integer := 0;
BEGIN
    -- Publishers queue behind this lock for at most the caller's
    -- lock_timeout; once held, nothing below scans a table but the tail.
    LOCK TABLE alkstore.events IN ACCESS EXCLUSIVE MODE;
    SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?[0-9]+)''?\)'))[1]::bigint
    INTO lo FROM pg_class c WHERE c.oid = 'alkstore.events_tail'::regclass;
    SELECT max(id) INTO top FROM alkstore.events_tail;
    IF top IS NOT NULL THEN
        -- Offsets drawn while no range was ready: the tail becomes the
        -- range partition [lo, top + 1), validated by one scan of its rows.
        ALTER TABLE alkstore.events DETACH PARTITION alkstore.events_tail;
        EXECUTE format('ALTER TABLE alkstore.events_tail RENAME TO %I', 'events_p' || lo);
        EXECUTE format('ALTER TABLE alkstore.events ATTACH PARTITION alkstore.%I FOR VALUES FROM (%s) TO (%s)',
                       'events_p' || lo, lo, top + 1);
        INSERT INTO alkstore.event_partitions (name, lo, hi) VALUES ('events_p' || lo, lo, top + 1);
        lo := top + 1;
        n := n + 1;
    ELSE
        DROP TABLE alkstore.events_tail;
    END IF;
    -- The default partition's fence is below lo: PostgreSQL reads it
    -- instead of scanning the default partition.
    WHILE lo <= upto LOOP
        EXECUTE format('CREATE TABLE alkstore.%I PARTITION OF alkstore.events FOR VALUES FROM (%s) TO (%s)',
                       'events_p' || lo, lo, lo + size);
        INSERT INTO alkstore.event_partitions (name, lo, hi) VALUES ('events_p' || lo, lo, lo + size);
        lo := lo + size;
        n := n + 1;
    END LOOP;
    EXECUTE format('CREATE TABLE alkstore.events_tail PARTITION OF alkstore.events FOR VALUES FROM (%s) TO (MAXVALUE)', lo);
    RETURN n;
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION alkstore.extend_event_partitions(bigint, bigint) IS 'Creates range partitions of alkstore.events of size offsets from the tail''s lower bound while it is <= upto (the tail''s rows, if any, first become a partition of their own), then the tail above them; returns how many it created';

-- +goose Down
DROP FUNCTION alkstore.extend_event_partitions(bigint, bigint);
ALTER TABLE alkstore.events DETACH PARTITION alkstore.events_tail;
CREATE TABLE IF NOT EXISTS alkstore.events_default PARTITION OF alkstore.events DEFAULT;
ALTER TABLE alkstore.events_default DROP CONSTRAINT IF EXISTS events_default_fence;
INSERT INTO alkstore.events SELECT * FROM alkstore.events_tail;
DROP TABLE alkstore.events_tail;
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
