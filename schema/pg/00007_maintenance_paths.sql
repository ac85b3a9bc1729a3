-- Access paths for the janitor's passes, so that each costs what it
-- deletes, not what the events table holds (issue 12):
-- - compaction walks each compacted stream forward from compacted_through,
--   once per event, and finds a walked key's older versions on events_key;
-- - tombstone expiry walks a stream's tombstones on events_tombstones.
-- Retention needs nothing new: it walks events_stream_id from a stream's
-- oldest event. Both indexes are plain (no expressions), so a partitioned
-- events table can carry them.

-- +goose Up
ALTER TABLE alkstore.streams ADD COLUMN compacted_through bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN alkstore.streams.compacted_through IS 'Offset up to which CompactSuperseded has walked the stream (each walked key''s older versions are deleted)';
CREATE INDEX events_key ON alkstore.events (stream, key, id) WHERE key IS NOT NULL;
COMMENT ON INDEX alkstore.events_key IS 'Keyed events by key: the older versions of a key (CompactSuperseded)';
CREATE INDEX events_tombstones ON alkstore.events (stream, id) WHERE payload IS NULL AND key IS NOT NULL;
COMMENT ON INDEX alkstore.events_tombstones IS 'Tombstones of each stream, oldest first (DeleteExpiredTombstones)';

-- +goose Down
DROP INDEX alkstore.events_tombstones;
DROP INDEX alkstore.events_key;
ALTER TABLE alkstore.streams DROP COLUMN compacted_through;
