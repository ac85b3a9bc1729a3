-- PostgreSQL: the four rules of a job row are checked by the predicate of
-- an index that holds no rows, jobs_rules, instead of by the table's CHECK
-- jobs_rules_check (00030), and each rule becomes the constraint of a
-- domain over one value instead of one constraint of a domain over a
-- composite row (issue 18).
--
-- Why: PostgreSQL reads a table CHECK back from its stored text and plans
-- it again for every INSERT and UPDATE statement (about 24 instructions a
-- character; jobs_rules_check's stored tree had 989), while an index's
-- predicate is read once per backend into its relation cache and only
-- planned per statement. A predicate is tested on every row written into
-- the table's indexes, which is every insert and every update that changes
-- a column some index or predicate reads (and so every update of a rule
-- column: an update that changes none of them is HOT and cannot break a
-- rule its row already kept). The predicate casts the rule columns to the
-- domains below, so a row breaking a rule fails the statement with the
-- domain's error; otherwise the predicate is false (num_nulls of four
-- values that are never NULL is never 4) and the index stays empty. The
-- composite domain formed a row and read each field back for every row
-- written; four scalar domains read the columns themselves.
--
-- Also, jobs_ready and jobs_listing stop deduplicating: their keys end
-- with the job's id, so no two entries are ever equal, and a full leaf
-- page was searched for duplicates (none) before every split, about 1.8k
-- instructions a job enqueued (jobs_ready) or finished and kept
-- (jobs_listing). deduplicate_items applies to later inserts only.
--
-- And jobs_finished and jobs_listing (00009) are built again over
-- state <> ALL ('{pending,running}') instead of state IN the four final
-- states: the same rows (the state rule allows six), but a pending job's
-- state is compared once, not four times, for each (a row of EnqueueMany
-- 43.2k -> 42.5k instructions). The queries that read them name the final
-- states, which imply the new predicate. Each is built CONCURRENTLY under
-- a name of its own, then the old one is dropped and the new one takes its
-- name (a brief lock).
--
-- Server instructions (callgrind on the backends, the bench's statements,
-- this schema against 00033's on copies of one database): a one-row
-- EnqueueJob 241.0k -> 227.7k, with 8 producers 239.2k -> 231.0k, a unique
-- one 267.4k -> 257.6k, a row of a 1,000-job EnqueueMany 47.5k -> 42.5k
-- (raw INSERTs: 84k and 37.1k), and a job enqueued in a batch of 100,
-- claimed and acked 189.7k -> 182.5k (before the finished indexes' new
-- predicate).
--
-- The rules and the rows they accept are the same, and a row breaking one
-- still fails with SQLSTATE 23514 and the rule's name (jobs_state_check,
-- jobs_max_attempts_check, jobs_check, jobs_unique_check), now a
-- constraint of the domain alkstore.job_state, job_max_attempts,
-- job_claim_rule or job_unique_rule ("value for domain alkstore.job_state
-- violates check constraint ..."), with no table name in the error's
-- fields (as since 00030). The table has no CHECK left. The rules are
-- tested as the row enters the indexes, after the heap and the unique
-- indexes: a row that breaks a rule and also duplicates a unique key now
-- fails as the duplicate (23505), or is skipped by ON CONFLICT DO NOTHING;
-- either way it is not stored.
--
-- Runs outside a transaction. The index is built CONCURRENTLY, which tests
-- the predicate on every stored row (all kept the CHECK, so none fails)
-- while enqueues, claims and acks go on, and rows written meanwhile are
-- held by the CHECK, which is dropped only once the index is valid (a
-- brief ACCESS EXCLUSIVE lock, waiting at most lock_timeout for it). A
-- build that failed leaves an invalid index, which the Up drops first (a
-- brief lock too): it can run again from the start. The Down adds 00030's
-- CHECK NOT VALID, validates it, drops the index and the domains, lets
-- jobs_ready deduplicate again, and builds 00009's jobs_finished and
-- jobs_listing again the same way. SQLite's 00035 is a
-- no-op: it compiles a table's CHECKs into each prepared statement once.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regtype('alkstore.job_state') IS NULL THEN
        CREATE DOMAIN alkstore.job_state AS text
            CONSTRAINT jobs_state_check CHECK (VALUE IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead'));
        COMMENT ON DOMAIN alkstore.job_state IS 'The states of a job (jobs.state); the index jobs_rules casts each row''s state to it';
    END IF;
    IF to_regtype('alkstore.job_max_attempts') IS NULL THEN
        CREATE DOMAIN alkstore.job_max_attempts AS integer
            CONSTRAINT jobs_max_attempts_check CHECK (VALUE > 0);
        COMMENT ON DOMAIN alkstore.job_max_attempts IS 'A job allows at least one attempt (jobs.max_attempts); the index jobs_rules casts each row''s max_attempts to it';
    END IF;
    IF to_regtype('alkstore.job_claim_rule') IS NULL THEN
        CREATE DOMAIN alkstore.job_claim_rule AS boolean
            CONSTRAINT jobs_check CHECK (VALUE);
        COMMENT ON DOMAIN alkstore.job_claim_rule IS 'A job is running exactly while it holds a claim (claim_token and claim_expires_at set); the index jobs_rules casts that comparison to it';
    END IF;
    IF to_regtype('alkstore.job_unique_rule') IS NULL THEN
        CREATE DOMAIN alkstore.job_unique_rule AS boolean
            CONSTRAINT jobs_unique_check CHECK (VALUE);
        COMMENT ON DOMAIN alkstore.job_unique_rule IS 'A job''s unique_key comes with its unique_states, and neither without the other; the index jobs_rules casts that comparison to it';
    END IF;
    -- An invalid index a failed build left (the CHECK still holds rows meanwhile).
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('alkstore.jobs_rules') AND NOT indisvalid) THEN
        PERFORM set_config('lock_timeout', '10s', true);
        DROP INDEX alkstore.jobs_rules;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_rules ON alkstore.jobs (id)
    WHERE num_nulls(state::alkstore.job_state, max_attempts::alkstore.job_max_attempts,
                    ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))::alkstore.job_claim_rule,
                    ((unique_key IS NULL) = (unique_states IS NULL))::alkstore.job_unique_rule) = 4;
COMMENT ON INDEX alkstore.jobs_rules IS 'Holds no rows: its predicate casts the rule columns of each row written to the domains job_state, job_max_attempts, job_claim_rule and job_unique_rule, so a row breaking a job rule fails with the rule''s name (schema 00035; a table CHECK was planned again by every statement)';
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER TABLE alkstore.jobs DROP CONSTRAINT IF EXISTS jobs_rules_check;
    DROP DOMAIN IF EXISTS alkstore.job_rules;
    DROP TYPE IF EXISTS alkstore.job_rules_row;
    ALTER INDEX alkstore.jobs_ready SET (deduplicate_items = off);
    -- Invalid indexes a failed build of the next two left.
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('alkstore.jobs_finished_00035') AND NOT indisvalid) THEN
        DROP INDEX alkstore.jobs_finished_00035;
    END IF;
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('alkstore.jobs_listing_00035') AND NOT indisvalid) THEN
        DROP INDEX alkstore.jobs_listing_00035;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_finished_00035 ON alkstore.jobs (queue, state, finished_at)
    WHERE state <> ALL ('{pending,running}');
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_listing_00035 ON alkstore.jobs (queue, state, id) WITH (deduplicate_items = off)
    WHERE state <> ALL ('{pending,running}');
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    DROP INDEX alkstore.jobs_finished;
    ALTER INDEX alkstore.jobs_finished_00035 RENAME TO jobs_finished;
    COMMENT ON INDEX alkstore.jobs_finished IS 'Finished jobs by queue, state and age: retention and RequeueDead';
    DROP INDEX alkstore.jobs_listing;
    ALTER INDEX alkstore.jobs_listing_00035 RENAME TO jobs_listing;
    COMMENT ON INDEX alkstore.jobs_listing IS 'Finished jobs by queue and state in id order (Queue.Jobs)';
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF to_regtype('alkstore.job_rules') IS NULL THEN
        DROP TYPE IF EXISTS alkstore.job_rules_row;
        CREATE TYPE alkstore.job_rules_row AS (
            state text, max_attempts integer, claim_token bigint, claim_expires_at timestamptz,
            unique_key bytea, unique_states text);
        CREATE DOMAIN alkstore.job_rules AS alkstore.job_rules_row
            CONSTRAINT jobs_state_check
                CHECK ((VALUE).state IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead'))
            CONSTRAINT jobs_max_attempts_check CHECK ((VALUE).max_attempts > 0)
            CONSTRAINT jobs_check
                CHECK (((VALUE).state = 'running') = ((VALUE).claim_token IS NOT NULL AND (VALUE).claim_expires_at IS NOT NULL))
            CONSTRAINT jobs_unique_check CHECK (((VALUE).unique_key IS NULL) = ((VALUE).unique_states IS NULL));
        COMMENT ON TYPE alkstore.job_rules_row IS 'The columns of a job the rules of alkstore.job_rules read';
        COMMENT ON DOMAIN alkstore.job_rules IS 'The rules of a job row (jobs_state_check, jobs_max_attempts_check, jobs_check, jobs_unique_check): the CHECK jobs_rules_check on jobs casts the row to it, which PostgreSQL plans once per backend instead of once per statement';
    END IF;
    ALTER TABLE alkstore.jobs
        DROP CONSTRAINT IF EXISTS jobs_rules_check,
        ADD CONSTRAINT jobs_rules_check
            CHECK (ROW(state, max_attempts, claim_token, claim_expires_at, unique_key, unique_states)::alkstore.job_rules
                   IS DISTINCT FROM NULL) NOT VALID;
    ALTER INDEX alkstore.jobs_ready RESET (deduplicate_items);
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('alkstore.jobs_finished_00009') AND NOT indisvalid) THEN
        DROP INDEX alkstore.jobs_finished_00009;
    END IF;
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('alkstore.jobs_listing_00009') AND NOT indisvalid) THEN
        DROP INDEX alkstore.jobs_listing_00009;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_finished_00009 ON alkstore.jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_listing_00009 ON alkstore.jobs (queue, state, id)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    DROP INDEX alkstore.jobs_finished;
    ALTER INDEX alkstore.jobs_finished_00009 RENAME TO jobs_finished;
    COMMENT ON INDEX alkstore.jobs_finished IS 'Finished jobs by queue, state and age: retention and RequeueDead';
    DROP INDEX alkstore.jobs_listing;
    ALTER INDEX alkstore.jobs_listing_00009 RENAME TO jobs_listing;
    COMMENT ON INDEX alkstore.jobs_listing IS 'Finished jobs by queue and state in id order (Queue.Jobs)';
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.jobs VALIDATE CONSTRAINT jobs_rules_check;
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_rules;
DROP DOMAIN IF EXISTS alkstore.job_state;
DROP DOMAIN IF EXISTS alkstore.job_max_attempts;
DROP DOMAIN IF EXISTS alkstore.job_claim_rule;
DROP DOMAIN IF EXISTS alkstore.job_unique_rule;
