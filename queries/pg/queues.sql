-- Queues: at-least-once jobs with fenced claims (PostgreSQL).
-- Times come from the store's clock (time.Now unless the store was opened
-- WithClock): the caller passes "now" and every deadline, so both engines
-- compare the same instants and tests control time. Keep machines' clocks
-- in sync (NTP) when several share a database.

-- name: EnqueueJob :one
-- A non-empty wake is sent with NOTIFY, so workers elsewhere hear of the
-- job only if it commits (see PublishEvent on empty wakes).
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at)
SELECT @queue::text, sqlc.narg(payload)::bytea, @priority::integer, @max_attempts::integer,
       @now::timestamptz, @run_at::timestamptz, sqlc.narg(expires_at)::timestamptz
FROM w
RETURNING id;

-- name: EnqueueJobs :many
-- Many jobs in one statement; ids follow the input order; one wake.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at)
SELECT @queue::text AS queue, u.payload, u.priority, u.max_attempts, @now::timestamptz AS created_at, u.run_at,
       CASE WHEN u.has_expires_at THEN u.expires_at END AS expires_at
FROM w, (SELECT unnest(@payloads::bytea[]) AS payload,
                unnest(@priorities::integer[]) AS priority,
                unnest(@max_attempts::integer[]) AS max_attempts,
                unnest(@run_ats::timestamptz[]) AS run_at,
                unnest(@has_expires_at::boolean[]) AS has_expires_at,
                unnest(@expires_ats::timestamptz[]) AS expires_at) AS u
RETURNING id;

-- name: EnqueueUniqueJob :many
-- One job with an idempotency key: EnqueueUniqueJobs for a batch of one,
-- without arrays. No row when the key is held (see EnqueueUniqueJobs).
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states)
SELECT @queue::text, sqlc.narg(payload)::bytea, @priority::integer, @max_attempts::integer,
       @now::timestamptz, @run_at::timestamptz, sqlc.narg(expires_at)::timestamptz,
       @unique_key::bytea, @unique_states::text
FROM w
ON CONFLICT DO NOTHING
RETURNING id;

-- name: EnqueueUniqueJobs :many
-- EnqueueJobs for a batch with idempotency keys (an empty unique_key: none).
-- A job whose key is held by a job in one of that job's unique_states is
-- not inserted: it conflicts on jobs_unique, waiting for a concurrent
-- transaction that inserted the key to end, and is skipped if that one
-- commits. RETURNING names the rows inserted, by key (non-unique rows come
-- back in input order); UniqueJobIDs then finds the jobs that held the
-- others' keys.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states)
SELECT @queue::text AS queue, u.payload, u.priority, u.max_attempts, @now::timestamptz AS created_at, u.run_at,
       CASE WHEN u.has_expires_at THEN u.expires_at END AS expires_at,
       NULLIF(u.unique_key, ''::bytea) AS unique_key, NULLIF(u.unique_states, '') AS unique_states
FROM w, (SELECT unnest(@payloads::bytea[]) AS payload,
                unnest(@priorities::integer[]) AS priority,
                unnest(@max_attempts::integer[]) AS max_attempts,
                unnest(@run_ats::timestamptz[]) AS run_at,
                unnest(@has_expires_at::boolean[]) AS has_expires_at,
                unnest(@expires_ats::timestamptz[]) AS expires_at,
                unnest(@unique_keys::bytea[]) AS unique_key,
                unnest(@unique_states::text[]) AS unique_states) AS u
ON CONFLICT DO NOTHING
RETURNING id, unique_key;

-- name: UniqueJobIDs :many
-- The jobs holding these idempotency keys: a job holds its key while its
-- state is in its unique_states (the predicate of the partial index
-- jobs_unique, which this reads).
SELECT id, unique_key FROM alkstore.jobs
WHERE unique_key = ANY(@unique_keys::bytea[]) AND strpos(unique_states, ',' || state || ',') > 0;

-- name: BuryExhaustedClaims :execrows
-- Jobs whose claim expired and that must not run again go to dead: past
-- their expires_at ("expired"; an expired job is never handed out, whatever
-- its state), or after their last allowed attempt.
UPDATE alkstore.jobs
SET state = 'dead', finished_at = @now::timestamptz, claim_token = NULL, claim_expires_at = NULL,
    last_error = CASE WHEN expires_at IS NOT NULL AND expires_at <= @now::timestamptz THEN 'expired'
                      ELSE 'attempts exhausted: the last claim expired' END
WHERE id IN (SELECT x.id FROM alkstore.jobs x
             WHERE x.queue = @queue AND x.state = 'running' AND x.claim_expires_at <= @now::timestamptz
               AND (x.attempts >= x.max_attempts OR (x.expires_at IS NOT NULL AND x.expires_at <= @now::timestamptz))
             FOR UPDATE SKIP LOCKED);

-- name: ClaimJobs :many
-- Up to max_jobs of the ready jobs and the jobs whose claim expired, in
-- priority order, skipping rows other claimers hold, stamped with this claim.
-- Ready jobs are read one priority at a time, highest first: prios walks
-- the distinct priorities of the queue's pending jobs down jobs_ready (one
-- index descent each), and for each priority the ready rows are an index
-- range (run_at <= now), so delayed rows, wherever their priority, are never
-- read. The nested loop over prios yields its rows in priority order and
-- stops (with its locks) at max_jobs, the rows the single ordered scan of
-- jobs_ready gave before; picked sorts them all again.
-- A paused queue (a row in queues with paused set) gives nothing: the
-- check is a one-time filter on both branches, so every worker of every
-- process honours a pause from the statement after it commits.
WITH RECURSIVE prios AS (
    (SELECT j.priority FROM alkstore.jobs j
     WHERE j.queue = @queue::text AND j.state = 'pending'
       AND NOT EXISTS (SELECT 1 FROM alkstore.queues pq WHERE pq.name = @queue::text AND pq.paused)
     ORDER BY j.priority DESC
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM alkstore.jobs j
            WHERE j.queue = @queue::text AND j.state = 'pending' AND j.priority < p.priority
            ORDER BY j.priority DESC
            LIMIT 1)
    FROM prios p
    WHERE p.priority IS NOT NULL
),
ready AS (
    SELECT r.id, r.priority, r.run_at
    FROM prios p CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM alkstore.jobs j
        WHERE j.queue = @queue::text AND j.state = 'pending' AND j.priority = p.priority
          AND j.run_at <= @now::timestamptz
          AND (j.expires_at IS NULL OR j.expires_at > @now::timestamptz)
        ORDER BY j.run_at, j.id
        LIMIT @max_jobs::integer
        FOR UPDATE SKIP LOCKED
    ) AS r
    LIMIT @max_jobs::integer
),
expired AS (
    SELECT j.id, j.priority, j.run_at FROM alkstore.jobs j
    WHERE j.queue = @queue::text AND j.state = 'running'
      AND j.claim_expires_at <= @now::timestamptz AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.expires_at > @now::timestamptz)
      AND NOT EXISTS (SELECT 1 FROM alkstore.queues pq WHERE pq.name = @queue::text AND pq.paused)
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM expired) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT @max_jobs::integer
)
UPDATE alkstore.jobs j
SET state = 'running', attempts = j.attempts + 1, claimed_at = @now::timestamptz,
    claim_expires_at = @claim_expires_at::timestamptz, claim_token = @claim_token::bigint, worker = @worker::text
FROM picked
WHERE j.id = picked.id
RETURNING j.*;

-- name: AckJob :execrows
-- Fenced: only the current, unexpired claim may settle a job.
DELETE FROM alkstore.jobs
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz;

-- name: AckJobs :execrows
-- Per id: only rows still held by that id's claim. The rows are locked in
-- id order first, so batches that share jobs (or a transaction settling
-- jobs one by one in id order) never deadlock, whatever their input order.
DELETE FROM alkstore.jobs j
WHERE j.id IN (
    SELECT x.id FROM alkstore.jobs x
    JOIN (SELECT unnest(@ids::bigint[]) AS id, unnest(@claim_tokens::bigint[]) AS claim_token) AS c
      ON x.id = c.id AND x.claim_token = c.claim_token
    WHERE x.state = 'running' AND x.claim_expires_at > @now::timestamptz
    ORDER BY x.id
    FOR UPDATE OF x);

-- name: RetryJob :execrows
-- Back to pending at run_at, while attempts remain.
UPDATE alkstore.jobs
SET state = 'pending', run_at = @run_at::timestamptz, last_error = @cause::text, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint
  AND claim_expires_at > @now::timestamptz AND attempts < max_attempts;

-- name: BuryJob :execrows
-- To dead with the cause; with exhausted_only, only when attempts are spent.
UPDATE alkstore.jobs
SET state = 'dead', finished_at = @now::timestamptz, last_error = @cause::text, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz
  AND (NOT @exhausted_only::boolean OR attempts >= max_attempts);

-- name: HeartbeatJob :execrows
UPDATE alkstore.jobs
SET claim_expires_at = @claim_expires_at::timestamptz
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz;

-- name: ReleaseJob :execrows
-- Gives a claimed job back without spending its attempt: a shutdown stopped
-- its handler, the job did not fail. It keeps its place in line (run_at).
UPDATE alkstore.jobs
SET state = 'pending', attempts = attempts - 1, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz;

-- name: GetJob :one
SELECT * FROM alkstore.jobs WHERE id = @id AND queue = @queue;

-- name: SweepExpiredJobs :execrows
-- Jobs past their expires_at go to dead ("expired"): pending ones, and
-- running ones whose claim lapsed (a live claim may still settle its job).
-- Rows another statement holds are skipped, never waited for, so sweeps and
-- claims cannot deadlock; the next sweep or claim takes them.
UPDATE alkstore.jobs
SET state = 'dead', finished_at = @now::timestamptz, last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id IN (SELECT x.id FROM alkstore.jobs x
             WHERE x.queue = @queue AND x.expires_at IS NOT NULL AND x.expires_at <= @now::timestamptz
               AND (x.state = 'pending' OR (x.state = 'running' AND x.claim_expires_at <= @now::timestamptz))
             FOR UPDATE SKIP LOCKED);

-- name: CancelJob :execrows
-- A pending or running job ends cancelled; a running claim is lost, and the
-- wake (the queue's cancel topic) tells its worker, wherever it runs, to
-- cancel the handler.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
UPDATE alkstore.jobs j
SET state = 'cancelled', finished_at = @now::timestamptz, claim_token = NULL, claim_expires_at = NULL
FROM w
WHERE j.id = @id AND j.queue = @queue::text AND j.state IN ('pending', 'running');

-- name: RequeueJob :execrows
-- A dead job back to pending, due now, with its attempts reset.
UPDATE alkstore.jobs
SET state = 'pending', attempts = 0, run_at = @now::timestamptz, finished_at = NULL
WHERE id = @id AND queue = @queue AND state = 'dead';

-- name: QueueStats :one
-- Each count is a range of a partial index (jobs_due, jobs_running,
-- jobs_dead) read up to @cap rows, in the index's order so that no plan
-- prefers reading the table; the oldest ready job is the first entry of
-- jobs_due.
SELECT (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'pending'
                              AND run_at <= @now::timestamptz ORDER BY queue, run_at LIMIT @cap::integer) c)::bigint AS ready,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'pending'
                              AND run_at > @now::timestamptz ORDER BY queue, run_at LIMIT @cap::integer) c)::bigint AS scheduled,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'running'
                              ORDER BY queue, claim_expires_at LIMIT @cap::integer) c)::bigint AS running,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'dead'
                              ORDER BY queue, finished_at LIMIT @cap::integer) c)::bigint AS dead,
       LEAST(COALESCE((SELECT min(run_at) FROM alkstore.jobs WHERE queue = @queue::text AND state = 'pending'),
                      @now::timestamptz), @now::timestamptz)::timestamptz AS oldest_ready;

-- name: NextJobDue :one
-- The earliest moment, in unix microseconds, a job of the queue becomes
-- claimable (a pending job's run_at or a claim's deadline); 0 when none.
-- Each min is the first entry of a partial index (jobs_due, jobs_running).
-- A paused queue has nothing due: its workers wait for the resume's wake.
SELECT CASE WHEN EXISTS (SELECT 1 FROM alkstore.queues WHERE name = @queue::text AND paused) THEN 0
       ELSE COALESCE(EXTRACT(EPOCH FROM LEAST(
    (SELECT min(run_at) FROM alkstore.jobs WHERE queue = @queue::text AND state = 'pending'),
    (SELECT min(claim_expires_at) FROM alkstore.jobs WHERE queue = @queue::text AND state = 'running')
)) * 1000000, 0) END::bigint AS due_us;


-- name: SnoozeJob :execrows
-- Back to pending at run_at without spending the attempt: the handler asked
-- to run again later. Fenced like every settle.
UPDATE alkstore.jobs
SET state = 'pending', attempts = attempts - 1, run_at = @run_at::timestamptz, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz;

-- name: SetQueuePaused :exec
-- Pauses or resumes a queue (a queue without a row is not paused). The wake
-- reaches the queue's workers in every process: on resume they claim at
-- once instead of at their next safety poll.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
INSERT INTO alkstore.queues (name, paused, updated_at)
SELECT @queue::text, @paused::boolean, @now::timestamptz
FROM w
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: QueuePaused :one
SELECT EXISTS (SELECT 1 FROM alkstore.queues WHERE name = @queue::text AND paused) AS paused;

-- name: JobClaims :many
-- The state and claim of each of these jobs (a worker checks its running
-- handlers' claims after a cancel wake); deleted jobs give no row.
SELECT id, state, claim_token FROM alkstore.jobs WHERE id = ANY(@ids::bigint[]);
