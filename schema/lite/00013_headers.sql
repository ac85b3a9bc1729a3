-- Headers (issue 21): optional string metadata on every job and event,
-- like Kafka record headers (trace context, a tenant, a correlation id),
-- and on every schedule, whose fires give them to the jobs they enqueue.
-- A JSON object of string values; NULL when there are none, which is what
-- rows written before this version read as.

-- +goose Up
ALTER TABLE alk_jobs ADD COLUMN headers TEXT;
ALTER TABLE alk_events ADD COLUMN headers TEXT;
ALTER TABLE alk_schedules ADD COLUMN headers TEXT;

-- +goose Down
ALTER TABLE alk_schedules DROP COLUMN headers;
ALTER TABLE alk_events DROP COLUMN headers;
ALTER TABLE alk_jobs DROP COLUMN headers;
