-- Never applied: sqlc's view of the SQLite table alkstore reads that SQLite
-- itself keeps (JobIDCeiling in queries/lite/queues.sql), so that sqlc can
-- type the query. SQLite creates sqlite_sequence with the first
-- AUTOINCREMENT table and keeps a row a table: the highest id it handed out.
CREATE TABLE sqlite_sequence (
    name TEXT    NOT NULL,
    seq  INTEGER NOT NULL
);
