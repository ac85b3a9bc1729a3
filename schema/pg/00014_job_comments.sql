-- The comments 00004 gave the jobs table still described the first job
-- lifecycle, where an expired or cancelled job went to dead. Since 00006 a
-- job ends in one of four final states (completed, cancelled, expired,
-- dead), and last_error says "expired" or "cancelled" when it ended so.

-- +goose Up
COMMENT ON TABLE alkstore.jobs IS 'Queue jobs, live (pending, running) and finished (completed, cancelled, expired, dead), one row each';
COMMENT ON COLUMN alkstore.jobs.expires_at IS 'A job past it is never handed out and ends expired, with last_error ''expired'' (NULL: never expires)';
COMMENT ON COLUMN alkstore.jobs.last_error IS 'The last attempt''s error (also kept in errors), or ''expired'' or ''cancelled'' when the job ended so';

-- +goose Down
COMMENT ON TABLE alkstore.jobs IS 'Queue jobs, live (pending, running) and dead, one row each';
COMMENT ON COLUMN alkstore.jobs.expires_at IS 'A job past it is never handed out and goes to dead with last_error ''expired'' (NULL: never expires)';
COMMENT ON COLUMN alkstore.jobs.last_error IS 'Why the last attempt failed or the job died';
