-- Access paths for the janitor's passes, so that each costs what it
-- deletes, not what the events table holds (issue 12):
-- - compaction walks each compacted stream forward from compacted_through,
--   once per event, and finds a walked key's older versions on
--   alk_events_key;
-- - tombstone expiry walks a stream's tombstones on alk_events_tombstones.
-- Retention needs nothing new: it walks alk_events_stream_id from a
-- stream's oldest event.

-- +goose Up
ALTER TABLE alk_streams ADD COLUMN compacted_through INTEGER NOT NULL DEFAULT 0;
CREATE INDEX alk_events_key ON alk_events (stream, key, id) WHERE key IS NOT NULL;
CREATE INDEX alk_events_tombstones ON alk_events (stream, id) WHERE payload IS NULL AND key IS NOT NULL;

-- +goose Down
DROP INDEX alk_events_tombstones;
DROP INDEX alk_events_key;
ALTER TABLE alk_streams DROP COLUMN compacted_through;
