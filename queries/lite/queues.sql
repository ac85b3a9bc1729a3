-- Queues: at-least-once jobs with fenced claims (SQLite).
-- Times are unix microseconds from the store's clock; the caller passes
-- "now" and every deadline. The writer slot serializes claims, so no row
-- locking is needed.

-- name: EnqueueJob :one
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at))
RETURNING id;

-- name: EnqueueJobs :one
-- SQLite runs in process: "many" is this statement repeated inside one
-- transaction on the writer slot.
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at))
RETURNING id;

-- name: EnqueueUniqueJob :many
-- One job with an idempotency key, on its own (EnqueueUniqueJobs is the
-- same statement, run per job of a batch). It returns no row when the key
-- is held by a job in one of that job's unique_states (a conflict on
-- alk_jobs_unique).
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at),
        @unique_key, @unique_states)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: EnqueueUniqueJobs :many
-- One job with an idempotency key (run once per job, in one transaction,
-- like EnqueueJobs). It returns no row when the key is held by a job in one
-- of that job's unique_states (a conflict on alk_jobs_unique).
INSERT INTO alk_jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states)
VALUES (@queue, sqlc.narg(payload), @priority, @max_attempts, @now, @run_at, sqlc.narg(expires_at),
        @unique_key, @unique_states)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: UniqueJobIDs :many
-- The job holding an idempotency key: a job holds its key while its state
-- is in its unique_states (the predicate of the partial index
-- alk_jobs_unique, which this reads).
SELECT id FROM alk_jobs
WHERE unique_key = @unique_key AND instr(unique_states, ',' || state || ',') > 0;

-- name: BuryExhaustedClaims :execrows
-- Jobs whose claim expired and that must not run again go to dead: past
-- their expires_at ("expired"; an expired job is never handed out, whatever
-- its state), or after their last allowed attempt.
UPDATE alk_jobs
SET state = 'dead', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL,
    last_error = CASE WHEN expires_at IS NOT NULL AND expires_at <= @now THEN 'expired'
                      ELSE 'attempts exhausted: the last claim expired' END
WHERE queue = @queue AND state = 'running' AND claim_expires_at <= @now
  AND (attempts >= max_attempts OR (expires_at IS NOT NULL AND expires_at <= @now));

-- name: ClaimableJobs :many
-- The ids ClaimJobs stamps: up to max_jobs of the ready jobs and the jobs
-- whose claim expired, in priority order. Run in the claim's transaction on
-- the writer slot, so nothing changes between the two statements. (A
-- SELECT of its own because sqlc reads no WITH on an UPDATE in SQLite.)
-- Ready jobs are read one priority at a time, highest first: prios walks
-- the distinct priorities of the queue's pending jobs down alk_jobs_ready
-- (one index descent each) and counts, up to max_jobs, the ready rows of
-- each (an index range: run_at <= now), stopping once the priorities above
-- hold max_jobs ready rows; each priority it reached gives its first
-- max_jobs ready rows. So delayed rows, wherever their priority, are never
-- read, and the outer ORDER BY picks exactly the rows one ordered scan of
-- every ready row would. No locks: the writer slot serializes claims, so
-- the counts are exact. A paused queue (a row in alk_queues with paused
-- set) gives nothing, so every worker of every process honours a pause from
-- the claim after it commits.
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
               LIMIT sqlc.arg(max_jobs)))
    FROM prios
    WHERE prios.p IS NOT NULL AND prios.above < sqlc.arg(max_jobs)
)
SELECT c.id FROM (
    SELECT r.id, r.priority, r.run_at FROM prios CROSS JOIN alk_jobs r
    WHERE prios.above < sqlc.arg(max_jobs)
      AND r.id IN (SELECT x.id FROM alk_jobs x
                   WHERE x.queue = sqlc.arg(queue) AND x.state = 'pending' AND x.priority = prios.p
                     AND x.run_at <= sqlc.arg(now) AND (x.expires_at IS NULL OR x.expires_at > sqlc.arg(now))
                   ORDER BY x.run_at, x.id LIMIT sqlc.arg(max_jobs))
    UNION ALL
    SELECT * FROM (SELECT x.id, x.priority, x.run_at FROM alk_jobs x
                   WHERE x.queue = sqlc.arg(queue) AND x.state = 'running'
                     AND x.claim_expires_at <= sqlc.arg(now) AND x.attempts < x.max_attempts
                     AND (x.expires_at IS NULL OR x.expires_at > sqlc.arg(now))
                     AND NOT EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = sqlc.arg(queue) AND pq.paused)
                   ORDER BY x.priority DESC, x.run_at, x.id LIMIT sqlc.arg(max_jobs))
) AS c
ORDER BY c.priority DESC, c.run_at, c.id
LIMIT sqlc.arg(max_jobs);

-- name: ClaimJobs :many
-- Stamps the jobs ClaimableJobs chose (ids: a JSON array) with this claim.
UPDATE alk_jobs
SET state = 'running', attempts = attempts + 1, claimed_at = CAST(@now AS INTEGER),
    claim_expires_at = CAST(@claim_expires_at AS INTEGER), claim_token = CAST(@claim_token AS INTEGER), worker = CAST(@worker AS TEXT)
WHERE id IN (SELECT value FROM json_each(@ids))
RETURNING *;

-- name: AckJob :execrows
-- Fenced: only the current, unexpired claim may settle a job.
DELETE FROM alk_jobs
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER);

-- name: AckJobs :execrows
-- Per id: only rows still held by that id's claim. claims is a JSON array
-- of [id, claim_token] pairs.
DELETE FROM alk_jobs
WHERE state = 'running' AND claim_expires_at > CAST(@now AS INTEGER)
  AND (id, claim_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                            FROM json_each(@claims));

-- name: RetryJob :execrows
-- Back to pending at run_at, while attempts remain.
UPDATE alk_jobs
SET state = 'pending', run_at = @run_at, last_error = CAST(@cause AS TEXT), claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER)
  AND claim_expires_at > CAST(@now AS INTEGER) AND attempts < max_attempts;

-- name: BuryJob :execrows
-- To dead with the cause; with exhausted_only, only when attempts are spent.
UPDATE alk_jobs
SET state = 'dead', finished_at = CAST(@now AS INTEGER), last_error = CAST(@cause AS TEXT), claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > @now
  AND (NOT @exhausted_only OR attempts >= max_attempts);

-- name: HeartbeatJob :execrows
UPDATE alk_jobs
SET claim_expires_at = CAST(@claim_expires_at AS INTEGER)
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER);

-- name: ReleaseJob :execrows
-- Gives a claimed job back without spending its attempt: a shutdown stopped
-- its handler, the job did not fail. It keeps its place in line (run_at).
UPDATE alk_jobs
SET state = 'pending', attempts = attempts - 1, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = CAST(@claim_token AS INTEGER) AND claim_expires_at > CAST(@now AS INTEGER);

-- name: GetJob :one
SELECT * FROM alk_jobs WHERE id = @id AND queue = @queue;

-- name: SweepExpiredJobs :execrows
-- Jobs past their expires_at go to dead ("expired"): pending ones, and
-- running ones whose claim lapsed (a live claim may still settle its job).
UPDATE alk_jobs
SET state = 'dead', finished_at = CAST(@now AS INTEGER), last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT x.id FROM alk_jobs x
             WHERE x.queue = @queue AND x.state = 'pending' AND x.expires_at IS NOT NULL AND x.expires_at <= @now
             UNION ALL
             SELECT r.id FROM alk_jobs r
             WHERE r.queue = @queue AND r.state = 'running' AND r.claim_expires_at <= @now
               AND r.expires_at IS NOT NULL AND r.expires_at <= @now);

-- name: CancelJob :execrows
-- A pending or running job ends cancelled; a running claim is lost (its
-- worker hears of it through the change watcher and cancels the handler).
UPDATE alk_jobs
SET state = 'cancelled', finished_at = CAST(@now AS INTEGER), claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND queue = @queue AND state IN ('pending', 'running');

-- name: RequeueJob :execrows
-- A dead job back to pending, due now, with its attempts reset.
UPDATE alk_jobs
SET state = 'pending', attempts = 0, run_at = @now, finished_at = NULL
WHERE id = @id AND queue = @queue AND state = 'dead';

-- name: QueueStats :one
-- Each count is a range of a partial index (alk_jobs_due, alk_jobs_running,
-- alk_jobs_dead) read up to @cap rows; the oldest ready job is the first
-- entry of alk_jobs_due.
SELECT CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'pending'
                                   AND j.run_at <= sqlc.arg(now) LIMIT sqlc.arg(cap))) AS INTEGER) AS ready,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'pending'
                                   AND j.run_at > sqlc.arg(now) LIMIT sqlc.arg(cap))) AS INTEGER) AS scheduled,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'running'
                                   LIMIT sqlc.arg(cap))) AS INTEGER) AS running,
       CAST((SELECT count(*) FROM (SELECT 1 FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'dead'
                                   LIMIT sqlc.arg(cap))) AS INTEGER) AS dead,
       CAST(min(COALESCE((SELECT min(run_at) FROM alk_jobs j WHERE j.queue = sqlc.arg(queue) AND j.state = 'pending'),
                         sqlc.arg(now)), sqlc.arg(now)) AS INTEGER) AS oldest_ready;

-- name: NextJobDue :one
-- The earliest moment, in unix microseconds, a job of the queue becomes
-- claimable (a pending job's run_at or a claim's deadline); 0 when none.
-- A paused queue has nothing due: its workers wait for the resume's wake.
SELECT CAST(CASE WHEN EXISTS (SELECT 1 FROM alk_queues pq WHERE pq.name = sqlc.arg(queue) AND pq.paused) THEN 0
                 ELSE COALESCE(min(due), 0) END AS INTEGER) AS due_us FROM (
    SELECT min(p.run_at) AS due FROM alk_jobs p WHERE p.queue = sqlc.arg(queue) AND p.state = 'pending'
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
-- checks its running handlers' claims after a wake); deleted jobs give no
-- row.
SELECT id, state, claim_token FROM alk_jobs WHERE id IN (SELECT value FROM json_each(@ids));
