-- The job lifecycle of issue 14: distinct final states, and per-queue
-- settings (pause, retention of finished jobs).
--
-- A job ends completed (its handler succeeded), cancelled, expired (past
-- its expires_at) or dead (failed for good: out of attempts or a permanent
-- error). Final rows are kept as their queue's retention says; finished_at
-- (was died_at) is when the job reached its final state.
--
-- SQLite cannot alter a CHECK constraint, so alk_jobs is rebuilt (in the
-- migration's transaction) with the same columns, ids and indexes.

-- +goose Up
CREATE TABLE alk_jobs_v6 (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    payload          BLOB,
    priority         INTEGER NOT NULL DEFAULT 0,
    -- pending (waiting for run_at or a worker), running (claimed), or final:
    -- completed, cancelled, expired, dead (failed for good).
    state            TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
    created_at       INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    claimed_at       INTEGER,
    claim_expires_at INTEGER,
    -- Fences a claim: settling a job needs the token of its current claim.
    claim_token      INTEGER,
    expires_at       INTEGER,
    worker           TEXT,
    last_error       TEXT,
    finished_at      INTEGER, -- when the job reached its final state
    CHECK ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))
);
INSERT INTO alk_jobs_v6 (id, queue, payload, priority, state, attempts, max_attempts, created_at, run_at,
                         claimed_at, claim_expires_at, claim_token, expires_at, worker, last_error, finished_at)
SELECT id, queue, payload, priority, state, attempts, max_attempts, created_at, run_at,
       claimed_at, claim_expires_at, claim_token, expires_at, worker, last_error, died_at
FROM alk_jobs;
DROP TABLE alk_jobs;
ALTER TABLE alk_jobs_v6 RENAME TO alk_jobs;
CREATE INDEX alk_jobs_ready    ON alk_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX alk_jobs_running  ON alk_jobs (queue, claim_expires_at) WHERE state = 'running';
CREATE INDEX alk_jobs_expiring ON alk_jobs (queue, expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX alk_jobs_dead     ON alk_jobs (queue, finished_at) WHERE state = 'dead';
CREATE INDEX alk_jobs_due      ON alk_jobs (queue, run_at) WHERE state = 'pending';

-- Queue settings and state (absent row: defaults). Durations in microseconds.
CREATE TABLE alk_queues (
    name                   TEXT    PRIMARY KEY,
    paused                 INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)), -- workers claim nothing from a paused queue
    completed_retention_us INTEGER NOT NULL DEFAULT 0 CHECK (completed_retention_us >= 0), -- 0: deleted when acked
    dead_retention_us      INTEGER CHECK (dead_retention_us > 0), -- dead, cancelled, expired; NULL: until deleted
    updated_at             INTEGER NOT NULL
);

-- +goose Down
DROP TABLE alk_queues;
DELETE FROM alk_jobs WHERE state = 'completed';
UPDATE alk_jobs SET state = 'dead' WHERE state IN ('cancelled', 'expired');
CREATE TABLE alk_jobs_v5 (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    payload          BLOB,
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
    created_at       INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    claimed_at       INTEGER,
    claim_expires_at INTEGER,
    claim_token      INTEGER,
    expires_at       INTEGER,
    worker           TEXT,
    last_error       TEXT,
    died_at          INTEGER,
    CHECK ((state = 'running') = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))
);
INSERT INTO alk_jobs_v5 SELECT * FROM alk_jobs;
DROP TABLE alk_jobs;
ALTER TABLE alk_jobs_v5 RENAME TO alk_jobs;
CREATE INDEX alk_jobs_ready    ON alk_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX alk_jobs_running  ON alk_jobs (queue, claim_expires_at) WHERE state = 'running';
CREATE INDEX alk_jobs_expiring ON alk_jobs (queue, expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX alk_jobs_dead     ON alk_jobs (queue, died_at) WHERE state = 'dead';
CREATE INDEX alk_jobs_due      ON alk_jobs (queue, run_at) WHERE state = 'pending';
