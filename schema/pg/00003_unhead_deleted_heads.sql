-- Heads whose events a trim or retention pass deleted before those passes
-- made such heads headless: they kept the key from taking new values of a
-- lower rank. They become headless now, as the passes do today.

-- +goose Up
UPDATE alkstore.compaction_heads h
SET head_offset = NULL, schema_version = NULL, compaction_rank = NULL, updated_at = now()
WHERE h.head_offset IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM alkstore.events e WHERE e.id = h.head_offset);

-- +goose Down
-- Nothing to undo: the deleted events cannot come back.
