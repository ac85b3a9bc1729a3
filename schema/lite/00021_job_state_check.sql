-- The CHECK on alk_jobs.state as six comparisons instead of an IN list of
-- six constants. SQLite codes an IN of more than two constants inside a
-- CHECK as an ephemeral table it builds again for every row it writes (a
-- CHECK is evaluated per row and cannot reuse the table), so each enqueue,
-- and each claim, ack, retry and requeue (an UPDATE checks the new row),
-- paid for a table of six strings: 1.5 µs of CPU of each job an EnqueueMany
-- inserts, a third of the insert. The two forms accept exactly the same
-- rows, so every row already stored satisfies the new one.
--
-- Changing a CHECK otherwise means rebuilding alk_jobs (copying every row
-- and every index), which costs as much as the table is big. This edits
-- the table's definition in sqlite_schema instead, in O(1), the procedure
-- SQLite documents for changes that leave the stored rows valid ("Making
-- Other Kinds Of Table Schema Changes", lang_altertable.html, section 7):
-- with writable_schema on, in this migration's transaction, the CHECK's
-- text is replaced; RESET reloads this connection's schema; and the
-- throw-away table bumps the schema cookie, so every other connection
-- reloads it before its next statement. A definition without this exact
-- text (none that these migrations wrote) is left alone: the replace
-- changes nothing, and the old CHECK keeps working.

-- +goose Up
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (state IN (''pending'', ''running'', ''completed'', ''cancelled'', ''expired'', ''dead''))',
    'CHECK (state = ''pending'' OR state = ''running'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead'')')
WHERE type = 'table' AND name = 'alk_jobs';
PRAGMA writable_schema = RESET;
CREATE TABLE alk_schema_cookie (x);
DROP TABLE alk_schema_cookie;

-- +goose Down
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (state = ''pending'' OR state = ''running'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead'')',
    'CHECK (state IN (''pending'', ''running'', ''completed'', ''cancelled'', ''expired'', ''dead''))')
WHERE type = 'table' AND name = 'alk_jobs';
PRAGMA writable_schema = RESET;
CREATE TABLE alk_schema_cookie (x);
DROP TABLE alk_schema_cookie;
