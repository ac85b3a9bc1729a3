-- Pending jobs by due time, so the earliest due moment of a queue
-- (NextJobDue, asked by Work after every short claim) is one index lookup
-- instead of a walk over every pending row. Claims keep reading
-- alk_jobs_ready, one priority at a time (see ClaimJobs), so delayed rows
-- never lie in the path of a claim.

-- +goose Up
CREATE INDEX alk_jobs_due ON alk_jobs (queue, run_at) WHERE state = 'pending';

-- +goose Down
DROP INDEX alk_jobs_due;
