-- PostgreSQL: jobs_ready (queue, priority DESC, run_at, id) and
-- jobs_listing (queue, state, id) stop deduplicating their entries
-- (deduplicate_items = off; issue 18). Their keys end with the job's id,
-- so no two entries of different jobs are ever equal, yet B-tree
-- deduplication (PostgreSQL 13 on) searched a full leaf page for equal
-- keys to merge before every split of it, and found none: work for every
-- job enqueued (jobs_ready) or finished and kept (jobs_listing). Backend
-- instructions (callgrind) a 1,000-job EnqueueMany 47.5M -> 45.6M (-3.9%,
-- 1.9k a job; the bench's raw batch 37.5M); a one-row enqueue, which
-- splits a page every couple of hundred rows, unchanged (233k-237k). Equal
-- keys could only be two versions of one job's row (an update that is not
-- HOT and leaves the key as it was); bottom-up index deletion removes the
-- dead one of those, and this setting does not change it. The other job
-- indexes keep deduplication: jobs_pkey and jobs_unique are unique
-- (PostgreSQL deduplicates them only where it finds versions of one row),
-- and jobs_running (queue, claim_expires_at), jobs_finished (queue, state,
-- finished_at) and jobs_expirable (queue, expires_at) hold equal keys for
-- the jobs of one claim, one ack or one batch with one expiry.
--
-- ALTER INDEX ... SET (deduplicate_items) takes a SHARE UPDATE EXCLUSIVE
-- lock on the index alone, not on the table (the setting applies only to
-- later inserts), and rewrites nothing: entries already merged stay as
-- they are. Enqueues, claims, acks and reads take ROW EXCLUSIVE or ACCESS
-- SHARE on the index, which do not conflict with it, so none of them waits
-- for it, nor queues behind it while it waits. It waits only for another
-- session's DDL on the same index (an ALTER INDEX, a REINDEX), at most
-- lock_timeout (10 s), after which the migration fails and rolls back (the
-- next Open runs it again). Up and Down can each run again. SQLite's 00034
-- is a no-op: SQLite does not deduplicate index entries.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_ready SET (deduplicate_items = off);
    ALTER INDEX alkstore.jobs_listing SET (deduplicate_items = off);
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    ALTER INDEX alkstore.jobs_ready RESET (deduplicate_items);
    ALTER INDEX alkstore.jobs_listing RESET (deduplicate_items);
END
$$;
-- +goose StatementEnd
