-- PostgreSQL: a keyed publish writes its key's head row (compaction_heads)
-- on every publish, and the table's one CHECK (00033's
-- compaction_heads_rules_check, casting to the domain alkstore.head_nulls)
-- was still about a tenth of the backend's instructions a keyed publish:
-- PostgreSQL reads a table CHECK back from its stored node tree and plans
-- it again for every INSERT and UPDATE statement (issue 18).
--
-- Here schema_version and compaction_rank become NOT NULL, DEFAULT 0, and
-- the CHECK and the domain go. head_offset NULL alone marks a headless row,
-- whose schema_version and compaction_rank are 0 (alkstore's statements
-- write zeros; nothing reads them while head_offset is NULL). A head keeps
-- all three set. A NOT NULL column is checked from the table's descriptor,
-- which costs nothing to prepare. What the rule refused and can still
-- happen (a head, or any row, without its schema_version or its rank) is
-- refused by NOT NULL, with SQLSTATE 23502 naming the column and the table;
-- a row written by hand without those columns (a lock's headless row) gets
-- the zeros from the defaults.
--
-- Runs outside a transaction, each step in its own, none rewriting the
-- table or holding a lock while it scans:
-- 1. the defaults, the CHECK dropped (a brief ACCESS EXCLUSIVE lock on the
--    heads table, waiting at most lock_timeout for it);
-- 2. headless rows get their zeros, walking the primary key in batches of
--    1,000 rows, each batch committed (a publish or lock of a key waits at
--    most for one batch), skipping rows a transaction holds (a lock of a
--    key, a publish in flight) rather than waiting for them;
-- 3. CHECK (schema_version IS NOT NULL AND compaction_rank IS NOT NULL)
--    NOT VALID (brief lock; from here new rows are checked), and one more
--    pass for the rows step 2 skipped or that were written since (a library
--    older than 00036 writes NULLs), which waits for a held row at most
--    lock_timeout;
-- 4. the CHECK validated in its own transaction, under a SHARE UPDATE
--    EXCLUSIVE lock that lets publishes go on;
-- 5. SET NOT NULL on both columns, which the validated CHECK proves without
--    a scan, then that CHECK and the domain dropped (one brief lock).
-- Every step can run again. The Down restores 00035's state (00033's CHECK
-- and domain, NULLs on headless rows, no defaults) the same way.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.compaction_heads
        ALTER COLUMN schema_version SET DEFAULT 0,
        ALTER COLUMN compaction_rank SET DEFAULT 0,
        DROP CONSTRAINT IF EXISTS compaction_heads_rules_check;
    COMMENT ON TABLE alkstore.compaction_heads IS 'Per (stream, key) the newest value''s offset and the row transactions lock to serialise writes of the key; headless (head_offset NULL, schema_version and compaction_rank 0) while the key has no value';
    COMMENT ON COLUMN alkstore.compaction_heads.schema_version IS 'SchemaVersion() the application''s payload type reported for the head (0 on a headless row)';
    COMMENT ON COLUMN alkstore.compaction_heads.compaction_rank IS 'Rank of the head (ProduceOpts.Rank): only a value with a greater (rank, offset) replaces it (0 on a headless row)';
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    s text := '';
    k text := '';
    ls text;
    lk text;
BEGIN
    LOOP
        PERFORM set_config('lock_timeout', '10s', true);
        SELECT b.stream, b.key INTO ls, lk
        FROM (SELECT h.stream, h.key FROM alkstore.compaction_heads h
              WHERE (h.stream, h.key) > (s, k) ORDER BY h.stream, h.key LIMIT 1000) b
        ORDER BY b.stream DESC, b.key DESC LIMIT 1;
        EXIT WHEN ls IS NULL;
        UPDATE alkstore.compaction_heads h SET schema_version = 0, compaction_rank = 0
        WHERE (h.stream, h.key) IN (
            SELECT x.stream, x.key FROM alkstore.compaction_heads x
            WHERE (x.stream, x.key) > (s, k) AND (x.stream, x.key) <= (ls, lk)
              AND x.head_offset IS NULL AND (x.schema_version IS NULL OR x.compaction_rank IS NULL)
            FOR UPDATE SKIP LOCKED);
        COMMIT;
        s := ls;
        k := lk;
    END LOOP;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'alkstore.compaction_heads'::regclass
                 AND attname IN ('schema_version', 'compaction_rank') AND NOT attnotnull)
       AND NOT EXISTS (SELECT 1 FROM pg_constraint
                       WHERE conrelid = 'alkstore.compaction_heads'::regclass AND conname = 'compaction_heads_set_check') THEN
        ALTER TABLE alkstore.compaction_heads ADD CONSTRAINT compaction_heads_set_check
            CHECK (schema_version IS NOT NULL AND compaction_rank IS NOT NULL) NOT VALID;
    END IF;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    UPDATE alkstore.compaction_heads SET schema_version = 0, compaction_rank = 0
    WHERE head_offset IS NULL AND (schema_version IS NULL OR compaction_rank IS NULL);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = 'alkstore.compaction_heads'::regclass AND conname = 'compaction_heads_set_check'
                 AND NOT convalidated) THEN
        ALTER TABLE alkstore.compaction_heads VALIDATE CONSTRAINT compaction_heads_set_check;
    END IF;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.compaction_heads
        ALTER COLUMN schema_version SET NOT NULL,
        ALTER COLUMN compaction_rank SET NOT NULL;
    ALTER TABLE alkstore.compaction_heads DROP CONSTRAINT IF EXISTS compaction_heads_set_check;
    DROP DOMAIN IF EXISTS alkstore.head_nulls;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.compaction_heads
        DROP CONSTRAINT IF EXISTS compaction_heads_set_check,
        ALTER COLUMN schema_version DROP NOT NULL,
        ALTER COLUMN compaction_rank DROP NOT NULL,
        ALTER COLUMN schema_version DROP DEFAULT,
        ALTER COLUMN compaction_rank DROP DEFAULT;
    COMMENT ON TABLE alkstore.compaction_heads IS 'Per (stream, key) the newest value''s offset and the row transactions lock to serialise writes of the key; headless (head columns NULL) while the key has no value';
    COMMENT ON COLUMN alkstore.compaction_heads.schema_version IS 'SchemaVersion() the application''s payload type reported for the head (NULL: headless)';
    COMMENT ON COLUMN alkstore.compaction_heads.compaction_rank IS 'Rank of the head (ProduceOpts.Rank): only a value with a greater (rank, offset) replaces it (NULL: headless)';
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    s text := '';
    k text := '';
    ls text;
    lk text;
BEGIN
    LOOP
        PERFORM set_config('lock_timeout', '10s', true);
        SELECT b.stream, b.key INTO ls, lk
        FROM (SELECT h.stream, h.key FROM alkstore.compaction_heads h
              WHERE (h.stream, h.key) > (s, k) ORDER BY h.stream, h.key LIMIT 1000) b
        ORDER BY b.stream DESC, b.key DESC LIMIT 1;
        EXIT WHEN ls IS NULL;
        UPDATE alkstore.compaction_heads h SET schema_version = NULL, compaction_rank = NULL
        WHERE (h.stream, h.key) IN (
            SELECT x.stream, x.key FROM alkstore.compaction_heads x
            WHERE (x.stream, x.key) > (s, k) AND (x.stream, x.key) <= (ls, lk)
              AND x.head_offset IS NULL AND (x.schema_version IS NOT NULL OR x.compaction_rank IS NOT NULL)
            FOR UPDATE SKIP LOCKED);
        COMMIT;
        s := ls;
        k := lk;
    END LOOP;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF to_regtype('alkstore.head_nulls') IS NULL THEN
        CREATE DOMAIN alkstore.head_nulls AS integer
            CONSTRAINT compaction_heads_check CHECK (VALUE = 0 OR VALUE = 3);
        COMMENT ON DOMAIN alkstore.head_nulls IS 'How many of a head row''s head_offset, schema_version and compaction_rank are NULL: none (a head) or all three (a headless row); the CHECK compaction_heads_rules_check on compaction_heads casts to it, which PostgreSQL plans once per backend instead of once per statement';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'alkstore.compaction_heads'::regclass AND conname = 'compaction_heads_rules_check') THEN
        ALTER TABLE alkstore.compaction_heads ADD CONSTRAINT compaction_heads_rules_check
            CHECK (num_nulls(head_offset, schema_version, compaction_rank)::alkstore.head_nulls IS NOT NULL) NOT VALID;
    END IF;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    UPDATE alkstore.compaction_heads SET schema_version = NULL, compaction_rank = NULL
    WHERE head_offset IS NULL AND (schema_version IS NOT NULL OR compaction_rank IS NOT NULL);
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.compaction_heads VALIDATE CONSTRAINT compaction_heads_rules_check;
