-- Headers (issue 21): optional string metadata on every job and event,
-- like Kafka record headers (trace context, a tenant, a correlation id),
-- and on every schedule, whose fires give them to the jobs they enqueue.
-- A JSON object of string values; NULL when there are none, which is what
-- rows written before this version read as, so the column costs nothing to
-- add (no rewrite) and nothing for messages without headers.

-- +goose Up
ALTER TABLE alkstore.jobs ADD COLUMN headers jsonb;
COMMENT ON COLUMN alkstore.jobs.headers IS 'The job''s headers: a JSON object of string values; NULL: none';
ALTER TABLE alkstore.events ADD COLUMN headers jsonb;
COMMENT ON COLUMN alkstore.events.headers IS 'The event''s headers: a JSON object of string values; NULL: none';
ALTER TABLE alkstore.schedules ADD COLUMN headers jsonb;
COMMENT ON COLUMN alkstore.schedules.headers IS 'The headers of the jobs the schedule enqueues: a JSON object of string values; NULL: none';

-- +goose Down
ALTER TABLE alkstore.schedules DROP COLUMN headers;
ALTER TABLE alkstore.events DROP COLUMN headers;
ALTER TABLE alkstore.jobs DROP COLUMN headers;
