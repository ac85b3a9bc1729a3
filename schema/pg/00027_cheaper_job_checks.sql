-- PostgreSQL: the CHECK on jobs.state casts to a domain, alkstore.job_state,
-- instead of testing an IN list of six constants itself (issue 18). A table
-- CHECK is read back from its stored node tree and planned again by every
-- INSERT or UPDATE statement on the table (once per statement, not per
-- backend), and the IN list of six text constants made that the largest
-- part of a single-row enqueue's server cost: about 51k of the 326k
-- instructions a single-row EnqueueJob cost the backend (callgrind), 40k
-- more than the cast. A domain's constraint is planned once per backend and
-- kept in its type cache, so the cast costs about 11k. The rule is the same
-- (the six states), a row breaking it still fails with SQLSTATE 23514 and the
-- constraint name jobs_state_check ("value for domain alkstore.job_state
-- violates check constraint ..."), and the column keeps its type: changing
-- the column's type to the domain would rewrite the table.
--
-- The new CHECK is added NOT VALID (no scan, a brief ACCESS EXCLUSIVE lock)
-- and validated in a second transaction, which scans the table under a
-- SHARE UPDATE EXCLUSIVE lock that lets enqueues, claims and acks go on
-- (every stored row already passed the old CHECK, which accepts exactly the
-- same rows). So this migration runs outside a transaction, and its first
-- step can run again: after a failed VALIDATE, applying it again redoes
-- both steps. The other three CHECKs (max_attempts > 0, a running job has a
-- claim, a unique key has its states) stay: together they cost about 55k
-- instructions, and none has a cheaper form that keeps the rule.
-- SQLite's 00027 is a no-op: its CHECKs are compiled into each prepared
-- statement once.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regtype('alkstore.job_state') IS NULL THEN
        CREATE DOMAIN alkstore.job_state AS text
            CONSTRAINT jobs_state_check CHECK (VALUE IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead'));
        COMMENT ON DOMAIN alkstore.job_state IS 'The states of a job (jobs.state): the CHECK jobs_state_check on jobs casts to it, which PostgreSQL plans once per backend instead of once per statement';
    END IF;
    ALTER TABLE alkstore.jobs
        DROP CONSTRAINT IF EXISTS jobs_state_check,
        ADD CONSTRAINT jobs_state_check CHECK (state::alkstore.job_state IS NOT NULL) NOT VALID;
END
$$;
-- +goose StatementEnd
ALTER TABLE alkstore.jobs VALIDATE CONSTRAINT jobs_state_check;

-- +goose Down
ALTER TABLE alkstore.jobs
    DROP CONSTRAINT IF EXISTS jobs_state_check,
    ADD CONSTRAINT jobs_state_check CHECK (state IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead')) NOT VALID;
ALTER TABLE alkstore.jobs VALIDATE CONSTRAINT jobs_state_check;
DROP DOMAIN IF EXISTS alkstore.job_state;
