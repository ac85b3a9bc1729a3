-- PostgreSQL: the four rules of a job row (its state is one of the six, it
-- allows at least one attempt, it is running exactly while it holds a
-- claim, a unique key comes with its states) move out of four table CHECKs
-- into the constraints of one domain, alkstore.job_rules (over the
-- composite type alkstore.job_rules_row), and the table keeps one CHECK,
-- jobs_rules_check, which casts the row's six columns to it (issue 18).
-- PostgreSQL reads a table CHECK back from its stored node tree and plans
-- it again for every INSERT and UPDATE statement, at about 24 instructions
-- a character of that tree, while a domain's constraints are read and
-- planned once per backend and kept in its type cache. The three CHECKs
-- 00027 left and its cast took 73k of the 265k instructions a one-row
-- EnqueueJob cost the backend (callgrind); one cast of one row takes 46k:
-- a one-row EnqueueJob 265k -> 238k. Each row pays a little more (the row
-- is formed and its fields read): a 1,000-job EnqueueMany 47.0k -> 48.7k
-- instructions a job.
--
-- The rules and the rows they accept are the same. A row breaking one
-- still fails with SQLSTATE 23514 and the name of its rule
-- (jobs_state_check, jobs_max_attempts_check, jobs_check,
-- jobs_unique_check), now the domain's constraint: "value for domain
-- alkstore.job_rules violates check constraint ...", with no table name in
-- the error's fields (as since 00027 for the state rule). No column changes
-- type: no table rewrite.
--
-- Runs outside a transaction: the first step drops the four CHECKs and adds
-- jobs_rules_check NOT VALID (a brief ACCESS EXCLUSIVE lock on jobs, no
-- scan; a NOT VALID CHECK holds for every row written from then on), and
-- the second validates it in its own transaction, scanning the table under
-- a SHARE UPDATE EXCLUSIVE lock that lets enqueues, claims and acks go on
-- (every stored row passed the old CHECKs, which hold the same rules). The
-- first step can run again. The Down restores 00027's four CHECKs the same
-- way.
--
-- It also drops jobs_expirable_by_time (00029), whose only reader was the
-- sweep of every queue (SweepAllExpiredJobs): that sweep now walks the
-- queues down jobs_expirable, one descent per queue with jobs that can
-- expire, and reads each queue's expired range of it. Every INSERT and
-- UPDATE of jobs opens each index of the table and tests each partial
-- index's predicate, whether or not the row enters it: a one-row EnqueueJob
-- 238k -> 227k. DROP INDEX CONCURRENTLY waits for the transactions using
-- the table but takes no lock that stops them; the Down builds it again
-- CONCURRENTLY (one scan of the table, writes going on). SQLite's 00030 is
-- a no-op: it compiles a table's CHECKs into each prepared statement once,
-- and its sweep of every queue has the index it had.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
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
        DROP CONSTRAINT IF EXISTS jobs_state_check,
        DROP CONSTRAINT IF EXISTS jobs_max_attempts_check,
        DROP CONSTRAINT IF EXISTS jobs_check,
        DROP CONSTRAINT IF EXISTS jobs_unique_check,
        ADD CONSTRAINT jobs_rules_check
            CHECK (ROW(state, max_attempts, claim_token, claim_expires_at, unique_key, unique_states)::alkstore.job_rules
                   IS DISTINCT FROM NULL) NOT VALID;
    DROP DOMAIN IF EXISTS alkstore.job_state;
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.jobs VALIDATE CONSTRAINT jobs_rules_check;
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_expirable_by_time;

-- +goose Down
-- (an invalid index a failed build left first)
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_expirable_by_time;
CREATE INDEX CONCURRENTLY jobs_expirable_by_time ON alkstore.jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('pending', 'running') AND priority IS NOT NULL;
COMMENT ON INDEX alkstore.jobs_expirable_by_time IS 'Pending and running jobs that can expire, by expires_at: the janitor''s sweep of every queue (SweepAllExpiredJobs)';
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regtype('alkstore.job_state') IS NULL THEN
        CREATE DOMAIN alkstore.job_state AS text
            CONSTRAINT jobs_state_check CHECK (VALUE IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead'));
        COMMENT ON DOMAIN alkstore.job_state IS 'The states of a job (jobs.state): the CHECK jobs_state_check on jobs casts to it, which PostgreSQL plans once per backend instead of once per statement';
    END IF;
    ALTER TABLE alkstore.jobs
        DROP CONSTRAINT IF EXISTS jobs_rules_check,
        DROP CONSTRAINT IF EXISTS jobs_state_check,
        DROP CONSTRAINT IF EXISTS jobs_max_attempts_check,
        DROP CONSTRAINT IF EXISTS jobs_check,
        DROP CONSTRAINT IF EXISTS jobs_unique_check,
        ADD CONSTRAINT jobs_state_check CHECK (state::alkstore.job_state IS NOT NULL) NOT VALID,
        ADD CONSTRAINT jobs_max_attempts_check CHECK (max_attempts > 0) NOT VALID,
        ADD CONSTRAINT jobs_check CHECK ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL)) NOT VALID,
        ADD CONSTRAINT jobs_unique_check CHECK ((unique_key IS NULL) = (unique_states IS NULL)) NOT VALID;
    DROP DOMAIN IF EXISTS alkstore.job_rules;
    DROP TYPE IF EXISTS alkstore.job_rules_row;
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.jobs
    VALIDATE CONSTRAINT jobs_state_check,
    VALIDATE CONSTRAINT jobs_max_attempts_check,
    VALIDATE CONSTRAINT jobs_check,
    VALIDATE CONSTRAINT jobs_unique_check;
