-- PostgreSQL: a keyed publish writes its key's head row (compaction_heads)
-- on every publish, and that row's CHECK and page pruning were about a
-- sixth of the backend's instructions a keyed publish (issue 18; callgrind
-- on the backend, 1,024 keys: 299k a keyed publish against 128k unkeyed).
--
-- The head rule (head_offset, schema_version and compaction_rank are NULL
-- together: a headless row, or set together: a head) moves out of the
-- table CHECK into the constraint of a domain, alkstore.head_nulls, over
-- the number of those columns that are NULL; the table keeps one CHECK,
-- compaction_heads_rules_check, which casts that number to it. PostgreSQL
-- reads a table CHECK back from its stored node tree and plans it again for
-- every INSERT and UPDATE statement, at about 29 instructions a character
-- of that tree (1,004 characters before, 675 now), while a domain's
-- constraint is read and planned once per backend (see 00030 for the jobs
-- table). The same rows are accepted; a row breaking the rule still fails
-- with SQLSTATE 23514 and the rule's old name, compaction_heads_check, now
-- the domain's constraint ("value for domain alkstore.head_nulls violates
-- check constraint ..."), with no table name in the error's fields.
--
-- The heads table gets fillfactor 50. A publish onto a headed row is a HOT
-- update (00031), and PostgreSQL prunes a page's dead versions when a
-- statement finds it with less free space than the fillfactor leaves
-- (at least a tenth): with the heads' live rows filling their pages that
-- is nearly every publish, and pruning walks every row of the page (about
-- 95 at fillfactor 100). At 50 a page holds half as many rows to walk. New
-- and moved rows follow the setting; the table is not rewritten.
--
-- Runs outside a transaction: the first step (rerunnable) creates the
-- domain, swaps the CHECK NOT VALID (a brief ACCESS EXCLUSIVE lock on the
-- heads table, no scan, waiting at most lock_timeout for it) and sets the
-- fillfactor; the second validates the CHECK in its own transaction under
-- a SHARE UPDATE EXCLUSIVE lock that lets publishes go on. The Down
-- restores 00001's CHECK and fillfactor 100 the same way. SQLite's 00033 is
-- a no-op: it compiles a table's CHECKs into each prepared statement once,
-- and has no HOT updates to prune.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF to_regtype('alkstore.head_nulls') IS NULL THEN
        CREATE DOMAIN alkstore.head_nulls AS integer
            CONSTRAINT compaction_heads_check CHECK (VALUE = 0 OR VALUE = 3);
        COMMENT ON DOMAIN alkstore.head_nulls IS 'How many of a head row''s head_offset, schema_version and compaction_rank are NULL: none (a head) or all three (a headless row); the CHECK compaction_heads_rules_check on compaction_heads casts to it, which PostgreSQL plans once per backend instead of once per statement';
    END IF;
    ALTER TABLE alkstore.compaction_heads
        DROP CONSTRAINT IF EXISTS compaction_heads_rules_check,
        DROP CONSTRAINT IF EXISTS compaction_heads_check,
        ADD CONSTRAINT compaction_heads_rules_check
            CHECK (num_nulls(head_offset, schema_version, compaction_rank)::alkstore.head_nulls IS NOT NULL) NOT VALID,
        SET (fillfactor = 50);
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.compaction_heads VALIDATE CONSTRAINT compaction_heads_rules_check;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.compaction_heads
        DROP CONSTRAINT IF EXISTS compaction_heads_rules_check,
        DROP CONSTRAINT IF EXISTS compaction_heads_check,
        ADD CONSTRAINT compaction_heads_check
            CHECK ((head_offset IS NULL) = (schema_version IS NULL)
               AND (head_offset IS NULL) = (compaction_rank IS NULL)) NOT VALID,
        RESET (fillfactor);
    DROP DOMAIN IF EXISTS alkstore.head_nulls;
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.compaction_heads VALIDATE CONSTRAINT compaction_heads_check;
