-- Pending jobs by due time, so the earliest due moment of a queue
-- (NextJobDue, asked by Work after every short claim) is one index lookup
-- instead of a walk over every pending row. Claims keep reading jobs_ready,
-- one priority at a time (see ClaimJobs), so delayed rows never lie in the
-- path of a claim.

-- +goose Up
CREATE INDEX jobs_due ON alkstore.jobs (queue, run_at) WHERE state = 'pending';
COMMENT ON INDEX alkstore.jobs_due IS 'Pending jobs by run_at: the earliest due moment of a queue (NextJobDue)';

-- +goose Down
DROP INDEX alkstore.jobs_due;
