-- Queues: at-least-once jobs with fenced claims (SQLite).
-- Times are unix microseconds from the store's clock; the caller passes
-- "now" and every deadline. The writer slot serializes claims, so no row
-- locking is needed.

-- name: EnqueueJob :one
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at), sqlc.narg(headers))
RETURNING id;

-- name: EnqueueJobNotify :one
-- PostgreSQL's twin sends the job's wake with NOTIFY; SQLite wakes in the
-- process and through alk_notifications: EnqueueJob's statement, kept so
-- both dialects keep the same query names.
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at), sqlc.narg(headers))
RETURNING id;

-- name: EnqueueJobCounted :execresult
-- EnqueueJob without RETURNING, which SQLite runs as a trigger program:
-- one row's id is the statement's last_insert_rowid (an application's
-- trigger that inserts rows leaves it as it was once the trigger ends),
-- and a trigger that skipped the row (RAISE(IGNORE)) leaves it stored
-- nothing (changes() is 0).
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at), sqlc.narg(headers));

-- name: EnqueueJobs :many
-- A batch in one statement: jobs is a JSON array of objects, one a job, in
-- order: {"p": the payload in hex (null: NULL), "pr": priority,
-- "ma": max_attempts, "ra": run_at, "ex": expires_at or null, "h": the
-- headers object, absent for none (NULL)}. The rows are
-- inserted in array order, so their ids, ascending, are the jobs' in that
-- order: json_each's rowid counts the elements in array order and it
-- reports an ORDER BY of its rowid as its own (xBestIndex
-- orderByConsumed), so SQLite reads the elements in order and sorts
-- nothing. ORDER BY j.key, the same order, made SQLite copy every row's
-- columns into a sorter and back (about 6,500 instructions a job of a
-- 1,000-job batch, callgrind). One statement instead of one a job: the
-- per-statement work is paid once a batch, not once a job.
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
SELECT @queue, unhex(json_extract(j.value, '$.p')), json_extract(j.value, '$.pr'),
       json_extract(j.value, '$.ma'), @now, json_extract(j.value, '$.ra'), json_extract(j.value, '$.ex'),
       json_extract(j.value, '$.h')
FROM json_each(CAST(@jobs AS TEXT)) AS j
ORDER BY j.rowid
RETURNING id;

-- name: EnqueueJobsAlike :many
-- A batch whose jobs differ only in their payloads (EnqueueMany's usual
-- batch: every job with the same options and headers): payloads is a JSONB
-- array (SQLite's binary JSON, https://sqlite.org/jsonb.html) of the
-- payloads, in order, each a raw string holding the payload's bytes as
-- they are (null: NULL), and every other column is a parameter, bound once
-- for the batch. SQLite reads one string an element instead of pulling six
-- fields out of an object; JSONB, not JSON text, because json_each then
-- parses nothing (a JSON text array is converted to JSONB first, a pass
-- over every character) and each element's value is its bytes, which the
-- CAST to BLOB only retypes (no unhex of a hex string: the parse and the
-- unhex cost about 5,000 instructions a job of a 1,000-job batch, a fifth
-- of the whole insert, callgrind). The
-- rows are inserted in array order (ORDER BY j.rowid, as in EnqueueJobs),
-- so their ids, ascending, are the jobs' in order. RETURNING, not the
-- statement's last_insert_rowid less the batch: an application's trigger
-- that inserts into alk_jobs takes ids between the batch's (fresh-eyes
-- review). The batch's parameters are bare, without CAST: SQLite
-- evaluates a SELECT's columns again for every row, a CAST a second
-- instruction each (about 1,100 instructions a job of a 1,000-job batch,
-- callgrind), and the INSERT gives each value its column's affinity as
-- the CAST did (sqlc takes their types from the INSERT's columns). EnqueueMany runs the Counted
-- forms below, which check that no id was taken, and comes back to these
-- when one was (and in an adopted transaction).
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
SELECT @queue, CAST(j.value AS BLOB), @priority, @max_attempts,
       @now, @run_at, sqlc.narg(expires_at), sqlc.narg(headers)
FROM json_each(CAST(@payloads AS BLOB)) AS j
ORDER BY j.rowid
RETURNING id;

-- name: JobIDCeiling :one
-- The highest id alk_jobs has handed out (AUTOINCREMENT: sqlite_sequence's
-- seq, or a row's id if higher), read just before EnqueueJobsCounted or
-- EnqueueJobsAlikeCounted in the same transaction on the writer slot. Every
-- row the insert then stores gets a higher id, and its last row's id is
-- the statement's last_insert_rowid: when that is this ceiling plus the
-- rows it stored, the ids between are the batch's and no one else's (an
-- application's trigger that inserted a job between two of the batch's
-- would have taken one). See store/queue_lite.go.
SELECT CAST(max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'alk_jobs'), 0),
                coalesce((SELECT max(id) FROM alk_jobs), 0)) AS INTEGER) AS ceiling;

-- name: EnqueueJobsCounted :execresult
-- EnqueueJobs without RETURNING, which SQLite runs as a trigger program a
-- row (about 11,000 instructions a job of a 1,000-job batch, a fifth of
-- the insert): the ids are the statement's last_insert_rowid and the rows
-- it stored back to JobIDCeiling, when they are contiguous; EnqueueJobs
-- tells them apart when they are not.
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
SELECT @queue, unhex(json_extract(j.value, '$.p')), json_extract(j.value, '$.pr'),
       json_extract(j.value, '$.ma'), @now, json_extract(j.value, '$.ra'), json_extract(j.value, '$.ex'),
       json_extract(j.value, '$.h')
FROM json_each(CAST(@jobs AS TEXT)) AS j
ORDER BY j.rowid;

-- name: EnqueueJobsAlikeCounted :execresult
-- EnqueueJobsAlike without RETURNING, as EnqueueJobsCounted.
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
SELECT @queue, CAST(j.value AS BLOB), @priority, @max_attempts,
       @now, @run_at, sqlc.narg(expires_at), sqlc.narg(headers)
FROM json_each(CAST(@payloads AS BLOB)) AS j
ORDER BY j.rowid;

-- name: EnqueueJobsPlainCounted :execresult
-- EnqueueJobsAlikeCounted for jobs whose priority, max_attempts, expiry and
-- headers are the columns' defaults (0, 25 since schema 00038, NULL, NULL:
-- EnqueueMany's usual batch, jobs without options). The INSERT leaves
-- those four columns out, so SQLite loads their defaults once a statement;
-- a column the INSERT names costs every row two VM instructions (the
-- select's parameter, then its copy into the row's register), about 260
-- instructions a job each of a 1,000-job batch (callgrind: 20.9k -> 20.1k
-- a job for three columns; 19.00k -> 18.72k-18.76k for max_attempts).
INSERT INTO alk_jobs (queue, payload, created_at, run_at)
SELECT @queue, CAST(j.value AS BLOB), @now, @run_at
FROM json_each(CAST(@payloads AS BLOB)) AS j
ORDER BY j.rowid;

-- name: EnqueueUniqueJob :many
-- One job with an idempotency key, on its own (EnqueueUniqueJobs is the
-- same statement, run per job of a batch). It returns no row when the key
-- is held by a job in one of that job's unique_states (a conflict on
-- alk_jobs_unique).
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states, headers)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at),
        @unique_key, @unique_states, sqlc.narg(headers))
ON CONFLICT DO NOTHING
RETURNING id;

-- name: EnqueueUniqueJobs :many
-- One job with an idempotency key (run once per job, in one transaction,
-- like EnqueueJobs). It returns no row when the key is held by a job in one
-- of that job's unique_states (a conflict on alk_jobs_unique).
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states, headers)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at),
        @unique_key, @unique_states, sqlc.narg(headers))
ON CONFLICT DO NOTHING
RETURNING id;

-- name: UniqueJobIDs :many
-- The job holding an idempotency key: a job holds its key while its state
-- is in its unique_states (the predicate of the partial index
-- alk_jobs_unique, which this reads).
SELECT id FROM alk_jobs
WHERE unique_key = @unique_key AND instr(unique_states, ',' || state || ',') > 0;

-- name: BuryExhaustedClaims :execrows
-- Jobs whose claim expired and that must not run again end: past their
-- expires_at they end expired (an expired job is never handed out,
-- whatever its state), after their last allowed attempt dead, the lapsed
-- claim recorded as that attempt's error.
UPDATE alk_jobs
SET state = CASE WHEN expires_at IS NOT NULL AND expires_at <= CAST(@now AS INTEGER) THEN 'expired' ELSE 'dead' END,
    finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL,
    last_error = CASE WHEN expires_at IS NOT NULL AND expires_at <= @now THEN 'expired'
                      ELSE 'attempts exhausted: the last claim expired' END,
    errors = CASE WHEN expires_at IS NOT NULL AND expires_at <= @now THEN errors
                  ELSE json_insert(CASE WHEN json_array_length(errors) >= 20 THEN json_remove(errors, '$[0]') ELSE errors END, '$[#]',
                                   json_object('attempt', attempts, 'error', 'attempts exhausted: the last claim expired', 'at_us', CAST(@now AS INTEGER))) END
WHERE queue = @queue AND state = 'running' AND claim_expires_at <= @now
  AND (attempts >= max_attempts OR (expires_at IS NOT NULL AND expires_at <= @now));

-- name: ClaimableJobs :many
-- The jobs ClaimJobs may stamp, with the columns the claim does not stamp
-- (attempts as it was: the claim adds one): the first max_jobs ready jobs
-- in priority order, then the first max_jobs jobs whose claim expired, in
-- the same order; the caller keeps the first max_jobs of the two in that
-- order (without a lapsed claim, as nearly always, all the rows, which
-- are the first ones). Run in the claim's transaction on the writer slot,
-- so nothing changes between the two statements. (A SELECT of its own
-- because sqlc reads no WITH on an UPDATE in SQLite.) The columns are read
-- here, not returned by ClaimJobs: SQLite runs a RETURNING clause as a
-- trigger program per row, which cost a claim about 8,000 instructions a
-- job more than reading the row here.
-- Ready jobs are read one priority at a time, highest first: prios walks
-- the distinct priorities of the queue's pending jobs down alk_jobs_ready
-- (one index descent each) and counts, up to max_jobs, the ready rows of
-- each (an index range: run_at <= now), stopping once the priorities above
-- hold max_jobs ready rows. So delayed rows, wherever their priority, are
-- never read. Each priority's ready rows are then read in order, in one
-- range of alk_jobs_ready (queue, priority, run_at <= now), and the first
-- max_jobs are kept: the CROSS JOIN makes prios the outer loop (SQLite
-- never reorders it), whose rows come in the order the recursion made
-- them (highest priority first), and the range is walked in index order
-- (run_at, id). So no row is sorted, and none is read twice: a sort of the
-- candidate ids and a second seek of each cost a claim about 12,000
-- instructions a job (callgrind). TestClaimTakesTheOrderedPrefix holds the
-- result to an ordered scan of every claimable job, and the plan tests
-- hold this plan (no temporary B-tree on the ready side). No locks: the
-- writer slot serializes claims, so the counts are exact. A paused queue
-- (a row in alk_queues with paused set) gives nothing, so every worker of
-- every process honours a pause from the claim after it commits.
-- Every LIMIT casts max_jobs: SQLite reads the value of a bare bound LIMIT
-- while planning, and a statement whose plan read a bound value is prepared
-- again whenever that value changes (a worker claims as many jobs as it
-- has free slots, so nearly every claim re-parsed and re-planned this
-- statement; the driver clears the bindings before each run, which alone
-- expires such a statement).
WITH RECURSIVE prios(p, above) AS (
    SELECT (SELECT h.priority FROM alk_jobs h
            WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending'
              AND NOT EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = sqlc.arg(queue) AND pq.paused)
            ORDER BY h.priority DESC LIMIT 1), 0
    UNION ALL
    SELECT (SELECT h.priority FROM alk_jobs h
            WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending' AND h.priority < prios.p
            ORDER BY h.priority DESC LIMIT 1),
           prios.above + (SELECT count(*) FROM (
               SELECT 1 FROM alk_jobs k
               WHERE k.queue = sqlc.arg(queue) AND k.state = 'pending' AND k.priority = prios.p
                 AND k.run_at <= sqlc.arg(now) AND (k.expires_at IS NULL OR k.expires_at > sqlc.arg(now))
               LIMIT CAST(sqlc.arg(max_jobs) AS INTEGER)))
    FROM prios
    WHERE prios.p IS NOT NULL AND prios.above < CAST(sqlc.arg(max_jobs) AS INTEGER)
)
SELECT * FROM (
    SELECT j.id, j.payload, j.priority, j.attempts, j.max_attempts, j.created_at, j.run_at, j.expires_at, j.last_error, j.errors, j.headers
    FROM prios CROSS JOIN alk_jobs j
    WHERE prios.above < CAST(sqlc.arg(max_jobs) AS INTEGER)
      AND j.queue = sqlc.arg(queue) AND j.state = 'pending' AND j.priority = prios.p
      AND j.run_at <= sqlc.arg(now) AND (j.expires_at IS NULL OR j.expires_at > sqlc.arg(now))
    LIMIT CAST(sqlc.arg(max_jobs) AS INTEGER))
UNION ALL
SELECT * FROM (
    SELECT x.id, x.payload, x.priority, x.attempts, x.max_attempts, x.created_at, x.run_at, x.expires_at, x.last_error, x.errors, x.headers
    FROM alk_jobs x
    WHERE x.queue = sqlc.arg(queue) AND x.state = 'running'
      AND x.claim_expires_at <= sqlc.arg(now) AND x.attempts < x.max_attempts
      AND (x.expires_at IS NULL OR x.expires_at > sqlc.arg(now))
      AND NOT EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = sqlc.arg(queue) AND pq.paused)
    ORDER BY x.priority DESC, x.run_at, x.id LIMIT CAST(sqlc.arg(max_jobs) AS INTEGER));

-- name: ClaimableReadyJobs :many
-- ClaimableJobs as a claim nearly always finds the queue: no claim of it
-- has lapsed. First, only when some claim of the queue has lapsed (a
-- running job whose claim_expires_at has passed, whatever its attempts and
-- expiry, paused queue or not), a row whose id is 0 (no job's:
-- AUTOINCREMENT ids start at 1) and whose other columns mean nothing;
-- then its ready side, the same rows read the same way. A claim that
-- reads that row reads its jobs again, after BuryExhaustedClaims, with
-- ClaimableJobs (store/queue_lite.go), and uses none of the ready rows
-- after it; one that does not has neither exhausted claims to bury nor
-- lapsed claims to take. The check is one descent of alk_jobs_running
-- (queue, claim_expires_at <= now), nothing sorted, where
-- BuryExhaustedClaims, a statement of its own, and ClaimableJobs's lapsed
-- side, whose ORDER BY opens a temporary B-tree even when it is empty,
-- cost a claim about 76,000 instructions whatever its size (callgrind,
-- SQLite alone: a one-job claim's statements 171k -> 95k, BEGIN and
-- ROLLBACK included).
-- The row of a lapsed claim comes first so that the statement's own LIMIT
-- bounds the ready rows (max_jobs in all, and max_jobs is at least 1: a
-- claim takes at least one job, so that row always fits; with it, one
-- ready row fewer, which the claim does not use): the ready side as a
-- subquery with a LIMIT of its own, first, was run as a co-routine whose
-- every row SQLite copied, column by column, into the statement's result
-- (callgrind, SQLite alone, claims of 100 and their acks: 79.1k ->
-- 75.4k-75.6k instructions a job). The first row's columns are cast to
-- the ready side's types, for sqlc, which types a compound's columns by
-- its first SELECT.
WITH RECURSIVE prios(p, above) AS (
    SELECT (SELECT h.priority FROM alk_jobs h
            WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending'
              AND NOT EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = sqlc.arg(queue) AND pq.paused)
            ORDER BY h.priority DESC LIMIT 1), 0
    UNION ALL
    SELECT (SELECT h.priority FROM alk_jobs h
            WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending' AND h.priority < prios.p
            ORDER BY h.priority DESC LIMIT 1),
           prios.above + (SELECT count(*) FROM (
               SELECT 1 FROM alk_jobs k
               WHERE k.queue = sqlc.arg(queue) AND k.state = 'pending' AND k.priority = prios.p
                 AND k.run_at <= sqlc.arg(now) AND (k.expires_at IS NULL OR k.expires_at > sqlc.arg(now))
               LIMIT CAST(sqlc.arg(max_jobs) AS INTEGER)))
    FROM prios
    WHERE prios.p IS NOT NULL AND prios.above < CAST(sqlc.arg(max_jobs) AS INTEGER)
)
SELECT CAST(0 AS INTEGER) AS id, CAST(NULL AS BLOB) AS payload, CAST(0 AS INTEGER) AS priority,
       CAST(0 AS INTEGER) AS attempts, CAST(0 AS INTEGER) AS max_attempts, CAST(0 AS INTEGER) AS created_at,
       CAST(0 AS INTEGER) AS run_at, CAST(NULL AS INTEGER) AS expires_at, CAST(NULL AS TEXT) AS last_error,
       CAST(NULL AS TEXT) AS errors, CAST(NULL AS TEXT) AS headers
WHERE EXISTS (SELECT 1 FROM alk_jobs x
              WHERE x.queue = sqlc.arg(queue) AND x.state = 'running' AND x.claim_expires_at <= sqlc.arg(now))
UNION ALL
SELECT j.id, j.payload, j.priority, j.attempts, j.max_attempts, j.created_at, j.run_at, j.expires_at, j.last_error, j.errors, j.headers
FROM prios CROSS JOIN alk_jobs j
WHERE prios.above < CAST(sqlc.arg(max_jobs) AS INTEGER)
  AND j.queue = sqlc.arg(queue) AND j.state = 'pending' AND j.priority = prios.p
  AND j.run_at <= sqlc.arg(now) AND (j.expires_at IS NULL OR j.expires_at > sqlc.arg(now))
LIMIT CAST(sqlc.arg(max_jobs) AS INTEGER);

-- name: ClaimJobs :execrows
-- Stamps the jobs ClaimableJobs chose (ids: a list, sqlc.slice) with this
-- claim, and returns nothing: ClaimableJobs read the columns the claim does not
-- stamp, and the caller knows the rest (queue, state, claimed_at,
-- claim_expires_at, claim_token and worker; a running job has no
-- finished_at; attempts is one more).
-- Where a job's stamp goes (callgrind, SQLite alone, claims of 100 in a
-- burn-down: read 14.1k, stamp and its commit 48.1k, the worker's counted
-- ack 24.5k instructions a job): the ready entry deleted and the running
-- entry inserted (two descents comparing the queue's text, 9.7k), the
-- row rewritten longer (the claim columns were NULL: a cell moved, 4k of
-- B-tree insert and balance), the CHECKs, and the three other indexes that
-- name state (alk_jobs_unique in its predicate, alk_jobs_finished and
-- alk_jobs_listing in their keys), whose predicates are evaluated for the
-- old and the new row. Measured and not taken: UPDATE OR ROLLBACK
-- (SQLite still writes this statement's journal: 0.9k a job, unchanged);
-- the ids, and AckJobsCounted's claims, bound as JSONB instead of JSON text
-- (the parse is 0.8k of the 87k a job of claim and ack); and, on a scratch
-- copy, without alk_jobs_finished and alk_jobs_listing 1-2% less, without
-- alk_jobs_unique under 1%: no schema change comes near a tenth.
-- The ids are a list of values, not a JSON array read by json_each: an IN
-- with a subquery makes SQLite's UPDATE run in two passes (the subquery's
-- ids sorted into a table, each row sought to collect its rowid, then
-- sought again to stamp it), an IN of values lets it stamp each row as it
-- finds it. The statement with a list of 128 ids, 100 of them set and the
-- rest NULL, stamped 100 rows in 43.2k instructions a row against the
-- JSON array's 47.4k (callgrind, the statement rolled back; the exact
-- list of 100: 42.3k), and a loop of Claim of 100 and AckMany 99.9k ->
-- 95.1k a job (the client, 12,000 jobs less 2,000). db/lite's ClaimJobsOn
-- sends lists whose lengths are multiples of 16 up to 128, NULLs after
-- the ids, each length prepared once per connection; the runs of 8 or
-- more ids without a gap (nearly every claim of a burn-down) go as
-- ranges instead (ClaimJobsInRange).
-- The SET binds its values uncast (sqlc then types them as pointers, the
-- columns being nullable): SQLite evaluates an UPDATE's SET expressions
-- for every row it changes, and the four CASTs cost about 0.85k
-- instructions a job (callgrind of the whole process, a loop of Claim of
-- 100 and AckMany, 21,000 jobs less 6,000: 71.8-72.2k -> 71.1-71.2k a
-- job). The CASTs of the WHERE clauses are bounds, evaluated once.
UPDATE alk_jobs
SET state = 'running', attempts = attempts + 1, claimed_at = @now,
    claim_expires_at = @claim_expires_at, claim_token = @claim_token, worker = @worker
WHERE id IN (sqlc.slice(ids));

-- name: ClaimJobsInRange :execrows
-- ClaimJobs for a run of ids with no gap (first_id, first_id + 1, ...
-- last_id, every one chosen by the claim): the ids between the two are
-- exactly the run's, so a range of the primary key stamps exactly its
-- jobs, walking them in order, with no list. An IN list costs SQLite a
-- temporary B-tree of its values and a seek from the root for each
-- (callgrind, SQLite alone, 100 jobs beside 5,000 running: 58.3k
-- instructions a job against 55.4k for the range), and each NULL slot
-- padding a list to its length about 3.5k more. db/lite's execListed
-- sends the runs of at least rangeMin ids here (a burn-down's claim is
-- nearly always one run), the rest in lists.
UPDATE alk_jobs
SET state = 'running', attempts = attempts + 1, claimed_at = @now,
    claim_expires_at = @claim_expires_at, claim_token = @claim_token, worker = @worker
WHERE id BETWEEN CAST(@first_id AS INTEGER) AND CAST(@last_id AS INTEGER);

-- name: ClaimJob :execrows
-- ClaimJobs for a claim that chose one job (id): every claim of a worker
-- with one free slot (Concurrency 1, or one handler done). An id IN a
-- json_each of the ids costs SQLite a virtual table and a list of the ids
-- each run, which this plain primary-key equality does not (callgrind,
-- SQLite alone: a one-job claim's statements, rolled back, 229.7k ->
-- 164.1k instructions).
UPDATE alk_jobs
SET state = 'running', attempts = attempts + 1, claimed_at = @now,
    claim_expires_at = @claim_expires_at, claim_token = @claim_token, worker = @worker
WHERE id = @id;

-- name: AckJob :execrows
-- Fenced: only the current, unexpired claim may settle a job. Deletes the
-- job unless its queue keeps completed jobs. When it matched nothing, one
-- transaction runs it again and CompleteJob: the writer slot it holds keeps
-- a Configure from committing between the two (the queue keeps completed
-- jobs, or the claim is gone).
DELETE FROM alk_jobs
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
  AND NOT EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = alk_jobs.queue AND q.completed_retention_us > 0);

-- name: CompleteJob :execrows
-- AckJob for a queue that keeps completed jobs: the job ends completed
-- (run with AckJob in one transaction, see AckJob).
UPDATE alk_jobs
SET state = 'completed', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
  AND EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = alk_jobs.queue AND q.completed_retention_us > 0);

-- name: AckJobs :many
-- Per id: only rows still held by that id's claim. claims is a JSON
-- object of "id": claim_token members (a job run twice in one batch has
-- two, both read), read with jsonb_each: each member's key is the id and
-- its value the token, with nothing to extract (an array of [id, token]
-- pairs, each taken apart by two json_extract calls, cost an ack about
-- 4,000 instructions a job more; callgrind). Every job is of the queue named: its setting
-- is read once (an uncorrelated subquery), not once per row, and a queue
-- that keeps completed jobs leaves them all to CompleteJobs. Returns the
-- ids it acked (the worker reports each job's outcome). The pairs drive:
-- each is one seek on the primary key (CROSS JOIN keeps that order), so an
-- ack costs the jobs it settles. Written as a filter on alk_jobs, SQLite
-- walked alk_jobs_running instead, testing every running job of the queue
-- (the other claims in flight) against the pairs.
DELETE FROM alk_jobs
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER) AND j.queue = CAST(@queue AS TEXT))
  AND NOT EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = CAST(@queue AS TEXT) AND q.completed_retention_us > 0)
RETURNING id;

-- name: CompleteJobs :many
-- AckJobs for the jobs of queues that keep completed jobs: they end
-- completed (run with AckJobs in one transaction, like CompleteJob; the
-- pairs drive, as in AckJobs).
UPDATE alk_jobs
SET state = 'completed', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER))
  AND EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = alk_jobs.queue AND q.completed_retention_us > 0)
RETURNING id;

-- name: CompleteLockedJobs :many
-- PostgreSQL's CompleteLockedJobs waits for rows another transaction
-- holds, whose claims its AckJobs and CompleteJobs skipped; on SQLite the
-- writer slot serialises every write, so no row is held apart from it and
-- nothing is skipped (a worker never runs this). Kept parallel:
-- CompleteJobs.
UPDATE alk_jobs
SET state = 'completed', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER))
  AND EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = alk_jobs.queue AND q.completed_retention_us > 0)
RETURNING id;

-- name: AckJobsCounted :execrows
-- AckJobs without RETURNING, for the common case of an ack: the caller
-- compares the count with its claims, and only when some claim was lost
-- acks them again with AckJobs and CompleteJobs, which say which ids
-- they settled. SQLite runs a RETURNING clause as a trigger program per
-- row: returning the ids cost an ack about 8,000 instructions a job
-- (callgrind, acks of 100).
DELETE FROM alk_jobs
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER) AND j.queue = CAST(@queue AS TEXT))
  AND NOT EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = CAST(@queue AS TEXT) AND q.completed_retention_us > 0);

-- name: CompleteJobsCounted :execrows
-- CompleteJobs without RETURNING (see AckJobsCounted).
UPDATE alk_jobs
SET state = 'completed', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER))
  AND EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = alk_jobs.queue AND q.completed_retention_us > 0);

-- name: QueueKeepsCompleted :one
-- Whether queue keeps its completed jobs: read by a worker's ack in its
-- transaction before it runs AckJobsOfClaim or CompleteJobsOfClaim, which
-- do not read it themselves (see AckJobsOfClaim).
SELECT EXISTS (SELECT 1 FROM alk_queues q WHERE q.name = CAST(@queue AS TEXT) AND q.completed_retention_us > 0);

-- name: AckJobsOfClaim :execrows
-- AckJobsCounted for the jobs of one claim (claim_token) of a queue that
-- keeps no completed jobs, as the caller read with QueueKeepsCompleted in
-- the same transaction (a worker's ack, see store's ackCounted: the
-- writer slot it holds keeps a Configure from committing between the
-- two). Its ids are a list of values (sqlc.slice), as ClaimJobs's: an IN
-- over a subquery joined to alk_jobs (AckJobsCounted's JSON pairs) makes
-- SQLite gather the ids into a temporary table, seek each row to test its
-- pair, collect the rowids, then seek each again to delete it; any
-- subquery in a DELETE (the retention check AckJobsCounted carries) keeps
-- that last pass. A list with no subquery deletes each row as it finds
-- it. Callgrind, an ack of 100 jobs of one claim beside 5,000 other
-- running jobs, the statements alone: AckJobsCounted 33.6k instructions
-- a job, this statement with the retention check 29.1k, without 26.3k.
-- Each list slot costs its statement an entry of the temporary table of
-- the IN list (about 3.5k, NULLs too), so a claim with only a few jobs in
-- the batch costs more this way than among AckJobsCounted's pairs (a
-- list of 16 slots: about 100k a statement); the caller sends only the
-- claims with many, and sends the runs of 8 or more ids without a gap as
-- ranges (AckJobsOfClaimInRange). +queue: with a usable equality on queue, SQLite
-- walked alk_jobs_running over every running job of the queue instead
-- of seeking the ids. The fence is the claim's token and its expiry,
-- without state = 'running': alk_jobs's CHECK (every schema's, since
-- 00001) holds a row running exactly when it has a token and an expiry,
-- so a row that matches both is running, and the test of the state's
-- text cost SQLite about 0.7k instructions a job (callgrind of the whole
-- process, a loop of Claim of 100 and AckMany, 21,000 jobs less 6,000:
-- SQLite's share 67.49k -> 66.76k a job).
DELETE FROM alk_jobs
WHERE claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
  AND +queue = CAST(@queue AS TEXT)
  AND id IN (sqlc.slice(ids));

-- name: AckJobsOfClaimInRange :execrows
-- AckJobsOfClaim for a run of ids with no gap, first_id to last_id, every
-- one of them in the caller's ack under this claim (see
-- ClaimJobsInRange): the range holds no other job, and the fence
-- (claim_token, state, claim_expires_at) keeps what another claim took
-- since. Callgrind, an ack of 100 jobs of one claim beside 5,000 other
-- running jobs, SQLite alone: 25.6k instructions a job with the exact
-- list, 20.5k with the range.
DELETE FROM alk_jobs
WHERE claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
  AND +queue = CAST(@queue AS TEXT)
  AND id BETWEEN CAST(@first_id AS INTEGER) AND CAST(@last_id AS INTEGER);

-- name: CompleteJobsOfClaim :execrows
-- AckJobsOfClaim for a queue that keeps completed jobs (as the caller
-- read with QueueKeepsCompleted): the jobs end completed.
UPDATE alk_jobs
SET state = 'completed', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
  AND +queue = CAST(@queue AS TEXT)
  AND id IN (sqlc.slice(ids));

-- name: CompleteJobsOfClaimInRange :execrows
-- CompleteJobsOfClaim for a run of ids with no gap (see
-- AckJobsOfClaimInRange).
UPDATE alk_jobs
SET state = 'completed', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
  AND +queue = CAST(@queue AS TEXT)
  AND id BETWEEN CAST(@first_id AS INTEGER) AND CAST(@last_id AS INTEGER);

-- name: RetryJob :execrows
-- Back to pending at run_at, while attempts remain; the cause joins the
-- job's errors (the last 20 kept).
UPDATE alk_jobs
SET state = 'pending', run_at = @run_at, last_error = CAST(@cause AS TEXT), claim_token = NULL, claim_expires_at = NULL,
    errors = json_insert(CASE WHEN json_array_length(errors) >= 20 THEN json_remove(errors, '$[0]') ELSE errors END, '$[#]',
                         json_object('attempt', attempts, 'error', CAST(@cause AS TEXT), 'at_us', CAST(@now AS INTEGER)))
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER)
  AND claim_expires_at > CAST(@now AS INTEGER) AND attempts < max_attempts;

-- name: BuryJob :execrows
-- To dead with the cause (joining the job's errors); with exhausted_only,
-- only when attempts are spent.
UPDATE alk_jobs
SET state = 'dead', finished_at = CAST(@now AS INTEGER), last_error = CAST(@cause AS TEXT), claim_token = NULL, claim_expires_at = NULL,
    errors = json_insert(CASE WHEN json_array_length(errors) >= 20 THEN json_remove(errors, '$[0]') ELSE errors END, '$[#]',
                         json_object('attempt', attempts, 'error', CAST(@cause AS TEXT), 'at_us', CAST(@now AS INTEGER)))
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > @now
  AND (NOT @exhausted_only OR attempts >= max_attempts);

-- name: HeartbeatJob :execrows
UPDATE alk_jobs
SET claim_expires_at = CAST(@claim_expires_at AS INTEGER)
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER);

-- name: HeartbeatJobs :many
-- HeartbeatJob for every due claim of a worker's tick, one statement (and
-- one writer transaction: a worker heartbeat its handlers one statement
-- each). claims is a JSON object of "id": claim_token members, read with
-- jsonb_each as in AckJobs; the pairs drive, one seek each on the primary
-- key. Fenced as HeartbeatJob is: the claim's token, state running, and a
-- lease not yet run out at now (a lapsed claim is not revived). Returns
-- the ids extended; a due id missing is lost (the writer slot serialises
-- every write, so nothing holds a row apart from it).
UPDATE alk_jobs
SET claim_expires_at = CAST(@claim_expires_at AS INTEGER)
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER))
RETURNING id;

-- name: HoldClaims :many
-- HeartbeatJobs for the claims of the jobs waiting for SQLite's writer
-- that a transactional handler's transaction extends while it holds that
-- writer (see runner.holdOthers), to the end of its hold: fenced as
-- HeartbeatJobs is, but it only ever moves a lease later. A claim a
-- heartbeat had pushed past that end (a worker with a longer Visibility
-- than the hold's Timeout) was cut back to it until the transaction
-- committed (review56 R3). claims as in HeartbeatJobs. Returns the ids
-- it kept.
UPDATE alk_jobs
SET claim_expires_at = MAX(claim_expires_at, CAST(@claim_expires_at AS INTEGER))
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value
               AND j.state = 'running' AND j.claim_expires_at > CAST(@now AS INTEGER))
RETURNING id;

-- name: ReviveClaims :many
-- HeartbeatJobs without its lease fence, for claims this process still
-- holds in memory after SQLite rolled a transactional handler's
-- transaction back whole (a write in it interrupted by the handler's
-- Timeout or a stop) and with it the extensions that transaction had made
-- of its own claim and of the claims waiting for the writer (see
-- runner.settleAfresh): it runs in a new transaction on the same writer
-- slot, before any other write of the process. Fenced by each claim's
-- token and state running only: a claim that lapsed meanwhile but that
-- nobody claimed again still has its token (every claim sets a new one),
-- and nobody else holds it; a claim another process took (a new token), a
-- committed Cancel or settle (another state, no token) is not touched.
-- claims as in HeartbeatJobs. Returns the ids extended.
UPDATE alk_jobs
SET claim_expires_at = CAST(@claim_expires_at AS INTEGER)
WHERE id IN (SELECT j.id FROM jsonb_each(@claims) AS c CROSS JOIN alk_jobs AS j
             WHERE j.id = CAST(c.key AS INTEGER) AND j.claim_token = c.value AND j.state = 'running')
RETURNING id;

-- name: HeartbeatLockedJob :one
-- PostgreSQL's HeartbeatLockedJob waits for a row another transaction
-- holds; on SQLite the writer slot serialises every write, so no row is
-- held apart from it and HeartbeatJobs skips none (a worker never runs
-- this). Kept parallel: HeartbeatJob at now, returning the new lease.
UPDATE alk_jobs
SET claim_expires_at = CAST(@now AS INTEGER) + CAST(@extend_us AS INTEGER)
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER)
RETURNING claim_expires_at;

-- name: ReleaseJob :execrows
-- Gives a claimed job back without spending its attempt: a shutdown stopped
-- its handler, the job did not fail. It keeps its place in line (run_at).
UPDATE alk_jobs
SET state = 'pending', attempts = attempts - 1, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER);

-- name: GetJob :one
SELECT * FROM alk_jobs WHERE id = @id AND queue = @queue;

-- name: FindJob :one
-- A job by id alone, whatever its queue (a console's search box).
SELECT * FROM alk_jobs WHERE id = @id;

-- name: RegisterQueue :exec
-- Records that a queue exists, so that Store.Queues lists it while it
-- holds no job; an existing row is left as it is.
INSERT INTO alk_queues (name, updated_at) VALUES (@name, @now)
ON CONFLICT (name) DO NOTHING;

-- name: SweepExpiredJobs :execrows
-- Jobs past their expires_at end expired: pending ones, and running ones
-- whose claim lapsed (a live claim may still settle its job).
UPDATE alk_jobs
SET state = 'expired', finished_at = CAST(@now AS INTEGER), last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT x.id FROM alk_jobs x
             WHERE x.queue = @queue AND x.state = 'pending' AND x.expires_at IS NOT NULL AND x.finished_at IS NULL
               AND x.expires_at <= @now
             UNION ALL
             SELECT r.id FROM alk_jobs r
             WHERE r.queue = @queue AND r.state = 'running' AND r.claim_expires_at <= @now
               AND r.expires_at IS NOT NULL AND r.expires_at <= @now);

-- name: CancelJob :execrows
-- A pending or running job ends cancelled, its last_error saying so (like
-- an expiry's, not an attempt's error); a running claim is lost (its
-- worker hears of it through the change watcher and cancels the handler).
UPDATE alk_jobs
SET state = 'cancelled', finished_at = CAST(@now AS INTEGER), last_error = 'cancelled', claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND queue = @queue AND state IN ('pending', 'running');

-- name: RequeueJob :execrows
-- A dead, cancelled or expired job back to pending, due now, with its
-- attempts reset (its errors kept). An expires_at already past is dropped:
-- the job would expire again at once. A unique job whose key another job
-- holds stays (JobKeyHolder says which); one holding its own key moves.
UPDATE alk_jobs
SET state = 'pending', attempts = 0, run_at = @now, finished_at = NULL,
    expires_at = CASE WHEN expires_at <= @now THEN NULL ELSE expires_at END
WHERE alk_jobs.id = @id AND alk_jobs.queue = @queue AND alk_jobs.state IN ('dead', 'cancelled', 'expired')
  AND (alk_jobs.unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM alk_jobs h
      WHERE h.unique_key = alk_jobs.unique_key AND h.id <> alk_jobs.id AND instr(h.unique_states, ',' || h.state || ',') > 0));

-- name: JobKeyHolder :one
-- Why RequeueJob did not move a job: the job (dead, cancelled or expired)
-- with its unique key's digest and the other job holding that key now
-- (NULL: none). No row: no such job in those states.
SELECT x.unique_key, h.id AS holder_id
FROM alk_jobs x
LEFT JOIN alk_jobs h ON h.unique_key = x.unique_key AND h.id <> x.id AND instr(h.unique_states, ',' || h.state || ',') > 0
WHERE x.id = @id AND x.queue = @queue AND x.state IN ('dead', 'cancelled', 'expired')
LIMIT 1;

-- name: RequeueDeadJobs :execrows
-- Up to @batch dead jobs of the queue that died at or before @before (so
-- jobs that die again while a RequeueDead runs are not taken twice), back
-- to pending like RequeueJob, oldest first through alk_jobs_finished (the
-- index's predicate, repeated, lets SQLite use that partial index). Unique
-- jobs that cannot hold their key once pending are skipped: those whose key
-- another job holds now (probed on alk_jobs_unique; a dead job holding its
-- own key moves), and, of dead jobs of the batch sharing a key, all but the one
-- that died first. They stay dead; the count is of the jobs moved.
UPDATE alk_jobs
SET state = 'pending', attempts = 0, run_at = @now, finished_at = NULL,
    expires_at = CASE WHEN expires_at <= @now THEN NULL ELSE expires_at END
WHERE id IN (
    SELECT b.id FROM (
        SELECT c.id, c.unique_key, row_number() OVER (PARTITION BY c.unique_key ORDER BY c.finished_at, c.id) AS nth
        FROM (SELECT x.id, x.unique_key, x.finished_at FROM alk_jobs x
              WHERE x.queue = @queue AND x.state = 'dead' AND x.finished_at <= CAST(@before AS INTEGER)
                AND x.finished_at IS NOT NULL
                AND (x.unique_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM alk_jobs h
                    WHERE h.unique_key = x.unique_key AND h.id <> x.id AND instr(h.unique_states, ',' || h.state || ',') > 0))
              ORDER BY x.finished_at
              LIMIT CAST(@batch AS INTEGER)) AS c) AS b
    WHERE b.unique_key IS NULL OR b.nth = 1);

-- name: DeleteJob :execrows
-- Any job but a running one (cancel it first).
DELETE FROM alk_jobs WHERE id = @id AND queue = @queue AND state <> 'running';

-- name: ListJobs :many
-- A page of the queue's finished jobs in one state, in id order after
-- @after, through alk_jobs_listing (the index's predicate, repeated, lets SQLite use
-- that partial index).
SELECT * FROM alk_jobs
WHERE queue = @queue AND state = CAST(@state AS TEXT) AND finished_at IS NOT NULL AND id > @after
ORDER BY id
LIMIT CAST(@max_jobs AS INTEGER);

-- name: ListPendingJobs :many
-- ListJobs for pending jobs: the queue's pending rows are read from
-- alk_jobs_ready and sorted, so a page costs the queue's pending jobs, not
-- the table's other rows, and enqueues pay for no index of their own.
-- (+id: ordered or bounded by the rowid itself, SQLite may walk the table
-- in rowid order instead, filtering every other row.)
SELECT * FROM alk_jobs
WHERE queue = @queue AND state = 'pending' AND +id > @after
ORDER BY +id
LIMIT CAST(@max_jobs AS INTEGER);

-- name: ListRunningJobs :many
-- ListJobs for running jobs, through alk_jobs_running: a queue's running
-- rows are its claims in flight, few enough to sort. (+id as in
-- ListPendingJobs.)
SELECT * FROM alk_jobs
WHERE queue = @queue AND state = 'running' AND +id > @after
ORDER BY +id
LIMIT CAST(@max_jobs AS INTEGER);

-- name: ConfigureQueue :exec
-- Stores a queue's retention settings; its paused flag stays as it is.
INSERT INTO alk_queues (name, completed_retention_us, dead_retention_us, updated_at)
VALUES (@name, @completed_retention_us, sqlc.narg(dead_retention_us), @now)
ON CONFLICT (name) DO UPDATE
SET completed_retention_us = excluded.completed_retention_us, dead_retention_us = excluded.dead_retention_us,
    updated_at = excluded.updated_at;

-- name: ListQueueSettings :many
-- Every queue with a settings row.
SELECT name, paused, completed_retention_us, dead_retention_us FROM alk_queues ORDER BY name;

-- name: QueueStats :one
-- Each count is a range of a partial index (alk_jobs_ready, alk_jobs_running,
-- alk_jobs_finished for each final state) read up to @cap rows. Pending
-- jobs are read one priority at a time down alk_jobs_ready (prios, as in
-- ClaimableJobs: one descent per distinct priority), ready and scheduled
-- being each priority's range on either side of @now, each count stopped
-- at @cap rows; the oldest pending job is the earliest of each priority's
-- first entry. No index of its own (schema 00032 drops alk_jobs_due,
-- which every claim and ack wrote).
WITH RECURSIVE prios(p) AS (
    SELECT (SELECT h.priority FROM alk_jobs h WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending'
            ORDER BY h.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT h.priority FROM alk_jobs h WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending' AND h.priority < prios.p
            ORDER BY h.priority DESC LIMIT 1)
    FROM prios WHERE prios.p IS NOT NULL
)
SELECT CAST((SELECT count(*) FROM (SELECT 1 FROM prios CROSS JOIN alk_jobs j
                                   WHERE prios.p IS NOT NULL AND j.queue = sqlc.arg(queue) AND j.state = 'pending'
                                     AND j.priority = prios.p AND j.run_at <= sqlc.arg(now)
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS ready,
       CAST((SELECT count(*) FROM (SELECT 1 FROM prios CROSS JOIN alk_jobs j
                                   WHERE prios.p IS NOT NULL AND j.queue = sqlc.arg(queue) AND j.state = 'pending'
                                     AND j.priority = prios.p AND j.run_at > sqlc.arg(now)
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS scheduled,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'running'
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS running,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'dead'
                                   AND j.finished_at IS NOT NULL
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS dead,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'completed'
                                   AND j.finished_at IS NOT NULL
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS completed,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'cancelled'
                                   AND j.finished_at IS NOT NULL
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS cancelled,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'expired'
                                   AND j.finished_at IS NOT NULL
                                   LIMIT CAST(sqlc.arg(cap) AS INTEGER))) AS INTEGER) AS expired,
       CAST(min(COALESCE((SELECT min((SELECT j.run_at FROM alk_jobs j
                                      WHERE j.queue = sqlc.arg(queue) AND j.state = 'pending' AND j.priority = prios.p
                                      ORDER BY j.run_at LIMIT 1))
                          FROM prios WHERE prios.p IS NOT NULL),
                         sqlc.arg(now)), sqlc.arg(now)) AS INTEGER) AS oldest_ready;

-- name: NextJobDue :one
-- The earliest moment, in unix microseconds, a job of the queue becomes
-- claimable (a pending job's run_at or a claim's deadline); 0 when none.
-- The pending side walks the queue's distinct pending priorities down
-- alk_jobs_ready (prios, as in ClaimableJobs), each priority's earliest
-- run_at its first entry there; the running side is the first entry of
-- alk_jobs_running. (It had an index of its own, alk_jobs_due, which
-- every claim and ack wrote: schema 00032 drops it.)
-- A paused queue has nothing due: its workers wait for the resume's wake.
WITH RECURSIVE prios(p) AS (
    SELECT (SELECT h.priority FROM alk_jobs h WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending'
            ORDER BY h.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT h.priority FROM alk_jobs h WHERE h.queue = sqlc.arg(queue) AND h.state = 'pending' AND h.priority < prios.p
            ORDER BY h.priority DESC LIMIT 1)
    FROM prios WHERE prios.p IS NOT NULL
)
SELECT CAST(CASE WHEN EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = sqlc.arg(queue) AND pq.paused) THEN 0
                 ELSE COALESCE(min(due), 0) END AS INTEGER) AS due_us FROM (
    SELECT (SELECT p.run_at FROM alk_jobs p
            WHERE p.queue = sqlc.arg(queue) AND p.state = 'pending' AND p.priority = prios.p
            ORDER BY p.run_at LIMIT 1) AS due
    FROM prios WHERE prios.p IS NOT NULL
    UNION ALL
    SELECT min(r.claim_expires_at) FROM alk_jobs r WHERE r.queue = sqlc.arg(queue) AND r.state = 'running'
);


-- name: SnoozeJob :execrows
-- Back to pending at run_at without spending the attempt: the handler asked
-- to run again later. Fenced like every settle.
UPDATE alk_jobs
SET state = 'pending', attempts = attempts - 1, run_at = CAST(@run_at AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER);

-- name: SetQueuePaused :exec
-- Pauses or resumes a queue (a queue without a row is not paused). Other
-- processes' change watchers see the commit and wake their workers.
INSERT INTO alk_queues (name, paused, updated_at)
VALUES (@queue, @paused, @now)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: QueuePaused :one
SELECT CAST(EXISTS (SELECT 1 FROM alk_queues WHERE name = @queue AND paused) AS INTEGER) AS paused;

-- name: JobClaims :many
-- The state and claim of each of these jobs (ids: a JSON array; a worker
-- checks its running handlers' claims after a wake; PostgreSQL's ack reads
-- which claims it skipped for a lock are still live); deleted jobs give
-- no row.
SELECT id, state, claim_token, claim_expires_at FROM alk_jobs WHERE id IN (SELECT value FROM json_each(@ids));

-- name: ClaimJobByID :many
-- Claims one given job (alktest works the job a test enqueued, whatever
-- else the queue holds): a pending job, due or not, or a running one whose
-- claim lapsed with attempts left; never one past its expires_at, nor one
-- of a paused queue. Stamped as ClaimJobs stamps; no row when the job is
-- not claimable.
UPDATE alk_jobs
SET state = 'running', attempts = attempts + 1, claimed_at = CAST(@now AS INTEGER),
    claim_expires_at = CAST(@claim_expires_at AS INTEGER), claim_token = CAST(@claim_token AS INTEGER), worker = CAST(@worker AS TEXT)
WHERE id = @id AND queue = CAST(@queue AS TEXT)
  AND (state = 'pending'
       OR (state = 'running' AND claim_expires_at <= CAST(@now AS INTEGER) AND attempts < max_attempts))
  AND (expires_at IS NULL OR expires_at > CAST(@now AS INTEGER))
  AND NOT EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = CAST(@queue AS TEXT) AND pq.paused)
RETURNING *;

-- name: ListQueueJobs :many
-- A page of the queue's jobs in every state, in id order after @after
-- (alktest's assertions): paged by id, not by state, so a job moving
-- between states while the pages are read is still read once.
SELECT * FROM alk_jobs
WHERE queue = CAST(@queue AS TEXT) AND id > CAST(@after AS INTEGER)
ORDER BY id
LIMIT CAST(@max_jobs AS INTEGER);

-- name: SavepointBatch :exec
-- A batch form inside the caller's transaction (EnqueueManyTx with unique
-- jobs; on SQLite every EnqueueManyTx and PublishManyTx) runs after this
-- savepoint, so that a batch that fails half way is rolled back whole
-- (RollbackToBatch) and leaves the caller's earlier work in place.
-- Savepoints of one name nest: each refers to the newest of its name.
SAVEPOINT alkstore_batch;

-- name: ReleaseBatch :exec
RELEASE SAVEPOINT alkstore_batch;

-- name: RollbackToBatch :exec
ROLLBACK TO SAVEPOINT alkstore_batch;

-- name: ProbeTransaction :exec
-- Asked on SQLite after a statement of an adopted transaction (AdoptSQL)
-- failed: is the transaction still open on its connection? SQLite rolls a
-- whole transaction back when a write in it is interrupted or fails for
-- memory, disk or locks, and every later statement would then commit on
-- its own. Inside a transaction BEGIN fails; on a connection SQLite left
-- in autocommit mode it begins one, which EndProbe rolls back at once.
-- (The store's own connections refuse statements there themselves, and
-- PostgreSQL refuses every statement of an aborted transaction, 25P02:
-- neither runs it.)
BEGIN;

-- name: EndProbe :exec
ROLLBACK;

-- name: SavepointHandler :exec
-- On SQLite a transactional handler (WorkTx, RunJobTx) runs after this
-- savepoint, in the transaction that first extended its claim (and the
-- claims of its worker's other jobs waiting for the writer) past its
-- Timeout: when the handler fails, RollbackToHandler discards its writes
-- and the job's retry, failure, snooze or release is recorded in the same
-- transaction, which commits with the extensions. Rolled back whole, the
-- transaction took the extension along, the claim had lapsed while it
-- held the writer (no heartbeat can run meanwhile), and the settle found
-- it gone (attack55 F1). A handler's own savepoints nest inside it.
-- (PostgreSQL does not use it: a heartbeat beside the handler keeps the
-- claim there, and a failed handler's transaction is rolled back whole.)
SAVEPOINT alkstore_handler;

-- name: RollbackToHandler :exec
ROLLBACK TO SAVEPOINT alkstore_handler;
