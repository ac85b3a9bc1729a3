-- Cheaper partial-index predicates on alkstore.jobs (issue 18). Every
-- INSERT and UPDATE of jobs opens each index of the table and, for each
-- partial one, plans its predicate (expression_planner) and compiles it
-- (ExecPrepareQual) once a statement, whether or not the row enters the
-- index: a pending job enters jobs_pkey and jobs_ready only, yet paid for
-- five predicates. callgrind on a backend (postgres --single, a prepared
-- EnqueueJob, the difference of 100 and 600 executions, commit included):
-- each index cost a one-row enqueue, measured by dropping it, jobs_unique
-- 17.2k instructions (strpos over two concatenations, four functions
-- looked up and set up), jobs_expirable 9.2k, jobs_finished and
-- jobs_listing 8.5k each (an IN list of four states), jobs_running 7.7k.
-- A predicate that tests one column for NULL costs about 6k.
--
-- Three indexes are built again under predicates that test columns for
-- NULL (the finished ones hold the same rows; jobs_unique now holds every
-- job with a key, a finished one with NULL in its second column):
--   jobs_finished, jobs_listing: finished_at IS NOT NULL (was: state is
--     completed, cancelled, expired or dead). Every statement that moves a
--     job to a final state sets finished_at, and every one that moves it
--     back out (RequeueJob, RequeueDeadJobs) clears it (the column's
--     comment since 00006: "NULL while pending or running"); SQLite's
--     indexes have used this predicate since its 00025.
--   jobs_unique: the held keys become the index's second column,
--     NULLIF(strpos(unique_states, ',' || state || ',') > 0, false),
--     true for a job in one of its unique_states and NULL otherwise, under
--     the predicate unique_key IS NOT NULL (was: both in the predicate). A
--     unique B-tree never compares keys holding a NULL, so two jobs with
--     one key conflict exactly when both hold it, as before (same SQLSTATE
--     23505, same constraint name; the error's detail shows the two
--     columns); the probes for a key's holder (UniqueJobIDs, JobKeyHolder,
--     the requeues) name the same expression, one index range of the held
--     entries (the key's finished jobs stay out of it). The expression is
--     compiled only for a row that has a key.
-- The statements say finished_at IS NOT NULL beside their final states.
-- jobs_expirable keeps its predicate: written as expires_at IS NOT NULL
-- AND finished_at IS NULL (2.8k less), the statements that must say
-- finished_at IS NULL made a never-analysed table's estimate 200 times
-- smaller (IS NULL without statistics: 0.005), and the sweep of every
-- queue sorted a bitmap scan of each queue's range instead of walking the
-- index (90,511 buffers for 1,201 queues instead of under 6,000). On the
-- same harness a one-row EnqueueJob 264.7k -> 250.5k instructions (-5.4%), a job of
-- a 1,000-job EnqueueMany 43.85k -> 42.45k (-3.2%), a unique enqueue 346.2k ->
-- 345.9k.
--
-- Runs outside a transaction and takes no lock that stops enqueues,
-- claims, acks or reads: each new index is built CONCURRENTLY under a
-- temporary name (two scans of the table, writes going on), the old one
-- dropped CONCURRENTLY (waits for transactions using the table), and the
-- new one renamed (a SHARE UPDATE EXCLUSIVE lock on the index alone,
-- waiting at most lock_timeout 10 s). Uniqueness is enforced throughout:
-- the old jobs_unique is dropped only once the new one is valid. Each step
-- can run again: an invalid index a failed build left is dropped first.
-- The Down builds the old definitions back the same way. SQLite's 00039 is
-- a no-op: its predicates already test finished_at, and it evaluates a
-- partial index's predicate per row from the prepared statement.

-- +goose NO TRANSACTION

-- +goose Up
-- jobs_unique: an invalid build left by a failed run goes first.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.jobs_unique_00039') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.jobs_unique_00039 RENAME TO jobs_unique_00039_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_unique_00039_invalid;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_unique_00039 ON alkstore.jobs (unique_key, (NULLIF(strpos(unique_states, ',' || state || ',') > 0, false)))
    WHERE unique_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_unique;
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_unique_00039 RENAME TO jobs_unique;
END
$$;
-- +goose StatementEnd
COMMENT ON INDEX alkstore.jobs_unique IS 'Unique jobs: a key is held by at most one job in one of its unique_states (the second column: true when held, NULL otherwise, and NULLs never conflict)';

-- jobs_finished: an invalid build left by a failed run goes first.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.jobs_finished_00039') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.jobs_finished_00039 RENAME TO jobs_finished_00039_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_finished_00039_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_finished_00039 ON alkstore.jobs (queue, state, finished_at)
    WHERE finished_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_finished;
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_finished_00039 RENAME TO jobs_finished;
END
$$;
-- +goose StatementEnd
COMMENT ON INDEX alkstore.jobs_finished IS 'Finished jobs by queue, state and age: retention and RequeueDead';

-- jobs_listing: an invalid build left by a failed run goes first.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.jobs_listing_00039') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.jobs_listing_00039 RENAME TO jobs_listing_00039_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_listing_00039_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_listing_00039 ON alkstore.jobs (queue, state, id) WITH (deduplicate_items = off)
    WHERE finished_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_listing;
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_listing_00039 RENAME TO jobs_listing;
END
$$;
-- +goose StatementEnd
COMMENT ON INDEX alkstore.jobs_listing IS 'Finished jobs by queue and state in id order (Queue.Jobs)';


-- +goose Down
-- jobs_unique: an invalid build left by a failed run goes first.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.jobs_unique_00039') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.jobs_unique_00039 RENAME TO jobs_unique_00039_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_unique_00039_invalid;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_unique_00039 ON alkstore.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND strpos(unique_states, ',' || state || ',') > 0;
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_unique;
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_unique_00039 RENAME TO jobs_unique;
END
$$;
-- +goose StatementEnd

-- jobs_finished: an invalid build left by a failed run goes first.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.jobs_finished_00039') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.jobs_finished_00039 RENAME TO jobs_finished_00039_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_finished_00039_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_finished_00039 ON alkstore.jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_finished;
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_finished_00039 RENAME TO jobs_finished;
END
$$;
-- +goose StatementEnd
COMMENT ON INDEX alkstore.jobs_finished IS 'Finished jobs by queue, state and age: retention and RequeueDead';

-- jobs_listing: an invalid build left by a failed run goes first.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass('alkstore.jobs_listing_00039') AND NOT i.indisvalid) THEN
        ALTER INDEX alkstore.jobs_listing_00039 RENAME TO jobs_listing_00039_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_listing_00039_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_listing_00039 ON alkstore.jobs (queue, state, id) WITH (deduplicate_items = off)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
DROP INDEX CONCURRENTLY IF EXISTS alkstore.jobs_listing;
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_listing_00039 RENAME TO jobs_listing;
END
$$;
-- +goose StatementEnd
COMMENT ON INDEX alkstore.jobs_listing IS 'Finished jobs by queue and state in id order (Queue.Jobs)';

