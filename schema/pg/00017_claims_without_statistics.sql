-- PostgreSQL: drop jobs_due, so that a claim's plan does not depend on
-- statistics (issue 18). On a jobs table that has never been analysed (a
-- bulk import, a server whose autovacuum has not reached it) the planner
-- estimates about one pending row per queue, and then reading jobs_due (the
-- smaller index) whole and sorting looked as cheap as the ordered walk of
-- jobs_ready the claim is written for: 813-9,600 buffers a claim on a queue
-- of 50,000 delayed jobs instead of about 650. jobs_due served only the
-- earliest due moment of a queue; NextJobDue and QueueStats now find it on
-- jobs_ready, one descent per distinct pending priority (the walk ClaimJobs
-- already does), and every enqueue writes one index fewer. SQLite keeps
-- alk_jobs_due (its no-statistics plans are checked as they are): no-op.

-- +goose Up
DROP INDEX alkstore.jobs_due;

-- +goose Down
CREATE INDEX jobs_due ON alkstore.jobs (queue, run_at) WHERE state = 'pending';
COMMENT ON INDEX alkstore.jobs_due IS 'Pending jobs by run_at: the earliest due moment of a queue (NextJobDue)';
