-- PostgreSQL: a queue's expired sweep (SweepExpiredJobs) reads one index
-- whose predicate only it implies, so that its plan does not depend on
-- statistics (issue 18). It was written as "pending, or running with a
-- lapsed claim", and the pending arm could be read from any index of
-- pending jobs: on a jobs table that has never been analysed the planner
-- estimates a row or two either way, and beside 50,000 expiring jobs of
-- another queue it read every pending job of the swept queue through
-- jobs_ready (50,050 index entries, 1,139 buffers, none expired) instead of
-- jobs_expiring. jobs_expirable holds the pending and the running jobs that
-- can expire, and the sweep names both states at once (state IN (...)),
-- which implies no other index's predicate. It replaces jobs_expiring,
-- whose only reader was that sweep. SQLite's sweep is written as a union of
-- two index ranges and keeps its indexes (its no-statistics plans are
-- checked as they are): no-op there.
--
-- alkstore.all_inserted makes a multi-row insert all or none in its own
-- statement: EnqueueJobs, EnqueueJobsAlike and PublishEvents end with it,
-- and it fails the statement (so nothing of it commits) when an
-- application's BEFORE INSERT trigger skipped rows (returned NULL). Before,
-- an auto-commit batch stored the other rows and the call then failed, and
-- a caller retrying it stored them twice; a transaction counting the rows
-- before COMMIT would cost two more statements and round trips a batch
-- (BEGIN, COMMIT), which small batches feel most. The caller recognises
-- SQLSTATE AKSKP.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION alkstore.all_inserted(inserted bigint, wanted integer) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog AS $$
BEGIN
    IF inserted <> wanted THEN
        RAISE EXCEPTION 'a trigger skipped % of the batch''s % rows', wanted - inserted, wanted
            USING ERRCODE = 'AKSKP';
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION alkstore.all_inserted(bigint, integer) IS 'True when a multi-row insert stored every row it was given; otherwise raises SQLSTATE AKSKP (an application''s trigger skipped rows), failing the statement';
CREATE INDEX jobs_expirable ON alkstore.jobs (queue, expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('pending', 'running');
COMMENT ON INDEX alkstore.jobs_expirable IS 'Pending and running jobs that can expire, by queue and expires_at: a queue''s expired sweep (SweepExpiredJobs)';
DROP INDEX alkstore.jobs_expiring;

-- +goose Down
DROP FUNCTION alkstore.all_inserted(bigint, integer);
CREATE INDEX jobs_expiring ON alkstore.jobs (queue, expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
DROP INDEX alkstore.jobs_expirable;
