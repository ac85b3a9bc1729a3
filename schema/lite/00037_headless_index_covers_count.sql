-- alk_compaction_heads_headless gains head_offset as its last column
-- (always NULL in it, so the order and the ranges stay those of (stream,
-- updated_at)): it then holds every column a count of a stream's headless
-- rows names, and SQLite reads the index alone. SQLite takes a partial
-- index as covering only when it holds each column the statement names,
-- predicate included (it drops a predicate column only for `col = const`,
-- not for `IS NULL`), and the head table has no rowid (WITHOUT ROWID), so
-- each headless entry StreamHeadStats counted cost a descent of the head
-- table's primary key: beside the scale bench's 10^7 rows, 10,000 descents
-- of a tree of a million heads (about 30,000 page lookups), nearly all of
-- what Store.Stats added from 10^5. Callgrind, Stats's statements in its
-- order on the bench's databases: StreamHeadStats 72.6M -> 23.9M
-- instructions at 10^5, 197.5M -> 47.8M at 10^7; all of them 189.3M ->
-- 140.6M and 317.6M -> 167.6M (10^7 / 10^5: 1.68 -> 1.19).
-- Writes are unchanged: an entry comes and goes when a row becomes or
-- stops being headless, as before, one NULL (a header byte) larger.
-- PostgreSQL: SELECT 1 (its compaction_heads_headless_at, 00031, holds
-- headless_at, the column its count names).

-- +goose Up
DROP INDEX alk_compaction_heads_headless;
CREATE INDEX alk_compaction_heads_headless ON alk_compaction_heads (stream, updated_at, head_offset) WHERE head_offset IS NULL;

-- +goose Down
DROP INDEX alk_compaction_heads_headless;
CREATE INDEX alk_compaction_heads_headless ON alk_compaction_heads (stream, updated_at) WHERE head_offset IS NULL;
