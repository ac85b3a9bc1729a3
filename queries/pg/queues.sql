-- Queues: at-least-once jobs with fenced claims (PostgreSQL).
-- Times come from the store's clock (time.Now unless the store was opened
-- WithClock): the caller passes "now" and every deadline, so both engines
-- compare the same instants and tests control time. Keep machines' clocks
-- in sync (NTP) when several share a database.

-- name: EnqueueJob :one
-- A plain VALUES row with no NOTIFY: the usual enqueue, whose wake the
-- gate already sent within its window (store/notify_pg.go); one that
-- carries a wake runs EnqueueJobNotify. run_at is NULL for a job due @now
-- (the usual job): each timestamp argument cost the client two
-- allocations. headers is NULL (none) or the JSON text of the job's
-- headers: a text parameter in every query mode (see store/headers.go,
-- pgJSON), cast to jsonb as it is written. Callgrind on the backend, a
-- one-row enqueue with the plan cached, commit included (issue 18, w42):
-- the NOTIFY's CASE in every statement 5.2k instructions of 222.9k, whether
-- or not it notified (the executor sets up a function, its ACL check and
-- the CASE for each statement); NULLIF(headers, '') 1.5k more; this form
-- 216.2k.
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
VALUES (@queue::text, sqlc.narg(payload)::bytea, @priority::integer, @max_attempts::integer,
        @now::timestamptz, COALESCE(sqlc.narg(run_at)::timestamptz, @now::timestamptz), sqlc.narg(expires_at)::timestamptz,
        sqlc.narg(headers)::text::jsonb)
RETURNING id;

-- name: EnqueueJobNotify :one
-- EnqueueJob carrying a wake, which is sent with NOTIFY, so workers
-- elsewhere hear of the job only if it commits; wake is never empty (the
-- store runs EnqueueJob then). The NOTIFY rides in the headers
-- expression, evaluated once (a CASE evaluates its condition first, and
-- pg_notify returns void, never NULL, so headers is always the argument):
-- the CTE the other writes notify in cost a one-row enqueue 4% of its
-- server instructions (callgrind: 275k -> 265k). Otherwise EnqueueJob's
-- statement (db/pg/enqueue_twins_test.go holds the two together).
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
VALUES (@queue::text, sqlc.narg(payload)::bytea, @priority::integer, @max_attempts::integer,
        @now::timestamptz, COALESCE(sqlc.narg(run_at)::timestamptz, @now::timestamptz), sqlc.narg(expires_at)::timestamptz,
        CASE WHEN pg_notify('alkstore', @wake::text) IS NULL THEN NULL ELSE sqlc.narg(headers)::text::jsonb END)
RETURNING id;

-- name: EnqueueJobs :one
-- Many jobs in one statement; ids follow the input order; one wake.
-- run_ats is NULL when every job runs at @now, and has_expires_at and
-- expires_ats when none expires (unnest of NULL yields no rows, and the
-- shorter arrays of the select list are padded with NULLs): encoding a
-- timestamp array took a quarter of the client's time a batch.
-- All or none: alkstore.all_inserted fails the statement when a trigger
-- skipped rows (schema 00024). The ids come back as one array in one row:
-- a row per id cost the server a DataRow message each and the client a
-- row to decode each (about 7% of the server's instructions a batch).
-- The count all_inserted checks is the aggregate's own (HAVING), not a
-- second scan of ins.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
), ins AS (
    INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
    SELECT @queue::text AS queue, u.payload, u.priority, u.max_attempts, @now::timestamptz AS created_at,
           COALESCE(u.run_at, @now::timestamptz) AS run_at,
           CASE WHEN u.has_expires_at THEN u.expires_at END AS expires_at, NULLIF(u.headers, '')::jsonb AS headers
    FROM w, (SELECT unnest(@payloads::bytea[]) AS payload,
                    unnest(@priorities::integer[]) AS priority,
                    unnest(@max_attempts::integer[]) AS max_attempts,
                    unnest(@run_ats::timestamptz[]) AS run_at,
                    unnest(@has_expires_at::boolean[]) AS has_expires_at,
                    unnest(@expires_ats::timestamptz[]) AS expires_at,
                    unnest(@headers::text[]) AS headers) AS u
    RETURNING id
)
SELECT array_agg(ins.id)::bigint[] AS ids FROM ins
HAVING alkstore.all_inserted(count(*), cardinality(@payloads::bytea[]));

-- name: EnqueueJobsAlike :one
-- A batch whose jobs differ only in their payloads: EnqueueJobs with every
-- other column bound once for the batch instead of as an array (SQLite's
-- twin saves the most). One wake; all or none (see EnqueueJobs). The
-- payloads are unnested in the select list (a ProjectSet, each row handed
-- to the insert as it comes), not in FROM (a function scan, which stores
-- the whole array's rows in a tuplestore first): 0.6k server instructions
-- a job (callgrind). The other columns are w's, read from its one row
-- for each job rather than each a parameter evaluated again (a ProjectSet
-- evaluates its every column a row). Ids: the jobs' ids are drawn in input
-- order (see allInserted in store/engine_pg.go), so when they are
-- contiguous (no other transaction drew from the sequence meanwhile, no
-- trigger inserted jobs between them: the usual batch) they are first_id
-- and the next ones, and ids is NULL; otherwise ids holds them all.
-- Callgrind on the backend, a job of a 1,000-job batch: 36.93k before
-- (the array sent every time), 36.24k contiguous and 36.60k not; the
-- array built in a second pass over ins only when needed made the
-- contiguous batch 35.99k but the other 37.49k, and batches from
-- concurrent producers interleave their ids.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke,
           NULLIF(@headers::text, '')::jsonb AS headers, @queue::text AS queue, @priority::integer AS priority,
           @max_attempts::integer AS max_attempts, @now::timestamptz AS created_at, @run_at::timestamptz AS run_at,
           sqlc.narg(expires_at)::timestamptz AS expires_at
), ins AS (
    INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, headers)
    SELECT w.queue, unnest(@payloads::bytea[]) AS payload, w.priority, w.max_attempts,
           w.created_at, w.run_at, w.expires_at, w.headers
    FROM w
    RETURNING id
)
SELECT COALESCE(min(ins.id), 0)::bigint AS first_id,
       CASE WHEN max(ins.id) - min(ins.id) + 1 <> count(*) THEN array_agg(ins.id) END::bigint[] AS ids
FROM ins
HAVING alkstore.all_inserted(count(*), cardinality(@payloads::bytea[]));

-- name: EnqueueUniqueJob :many
-- One job with an idempotency key: EnqueueUniqueJobs for a batch of one,
-- without arrays. No row when the key is held (see EnqueueUniqueJobs). A
-- plain VALUES row like EnqueueJob's, its NOTIFY in the CASE of its headers
-- (evaluated once, whether or not the row conflicts, as the CTE it
-- replaces was): 309k -> 302k server instructions (callgrind).
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states, headers)
VALUES (@queue::text, sqlc.narg(payload)::bytea, @priority::integer, @max_attempts::integer,
        @now::timestamptz, @run_at::timestamptz, sqlc.narg(expires_at)::timestamptz,
        @unique_key::bytea, @unique_states::text,
        CASE WHEN @wake::text <> '' AND pg_notify('alkstore', @wake::text) IS NULL THEN NULL
             ELSE NULLIF(@headers::text, '')::jsonb END)
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
INSERT INTO alkstore.jobs (queue, payload, priority, max_attempts, created_at, run_at, expires_at, unique_key, unique_states, headers)
SELECT @queue::text AS queue, u.payload, u.priority, u.max_attempts, @now::timestamptz AS created_at, u.run_at,
       CASE WHEN u.has_expires_at THEN u.expires_at END AS expires_at,
       NULLIF(u.unique_key, ''::bytea) AS unique_key, NULLIF(u.unique_states, '') AS unique_states,
       NULLIF(u.headers, '')::jsonb AS headers
FROM w, (SELECT unnest(@payloads::bytea[]) AS payload,
                unnest(@priorities::integer[]) AS priority,
                unnest(@max_attempts::integer[]) AS max_attempts,
                unnest(@run_ats::timestamptz[]) AS run_at,
                unnest(@has_expires_at::boolean[]) AS has_expires_at,
                unnest(@expires_ats::timestamptz[]) AS expires_at,
                unnest(@unique_keys::bytea[]) AS unique_key,
                unnest(@unique_states::text[]) AS unique_states,
                unnest(@headers::text[]) AS headers) AS u
ON CONFLICT DO NOTHING
RETURNING id, unique_key;

-- name: UniqueJobIDs :many
-- The jobs holding these idempotency keys: a job holds its key while its
-- state is in its unique_states, which jobs_unique's second column says
-- (true, else NULL; schema 00039): this reads the range of each key's
-- held entries and never the key's finished jobs.
SELECT id, unique_key FROM alkstore.jobs
WHERE unique_key = ANY(@unique_keys::bytea[]) AND NULLIF(strpos(unique_states, ',' || state || ',') > 0, false);

-- name: ClaimJobs :many
-- Up to max_jobs of the ready jobs and the jobs whose claim expired, in
-- priority order, skipping rows other claimers hold, stamped with this claim.
-- Ready jobs are read one priority at a time, highest first: prios walks
-- the distinct priorities of the queue's pending jobs down jobs_ready (one
-- index descent each), and for each priority the ready rows are an index
-- range (run_at <= now), so delayed rows, wherever their priority, are never
-- read. Each descent also returns where it landed (run_at, id: the first
-- pending entry of that priority this statement's snapshot sees), and the
-- priority's range starts there, so the entries of jobs already claimed or
-- settled but not yet vacuumed away (a burn-down leaves thousands at the
-- head of the index) are stepped over once per claim, by the descent, not
-- twice (issue 18: a second walk over them cost a third more buffers per
-- job). No visible row of that priority lies before it, so the range holds
-- the same rows. The nested loop over prios yields its rows in priority order and
-- stops (with its locks) at max_jobs, the rows the single ordered scan of
-- jobs_ready gave before; picked sorts them all again.
-- What that one walk costs (issue 18; PostgreSQL 15, the bench's settings,
-- autovacuum kept off the table, pageinspect and callgrind): the first
-- claim whose walk meets a settled job's entry fetches its heap tuple once
-- and marks the entry dead (LP_DEAD); under synchronous_commit = off a
-- commit's hint bit waits for its WAL to be flushed, so an entry is
-- fetched 1.3-2.8 times (1.06-1.16 with it on). Killed entries keep their
-- leaf pages until VACUUM: after 99,540 jobs of a burn-down, 597 of
-- jobs_ready's 601 leaf pages held only killed entries (167 a page), and
-- the descent read them all: 598 of a late claim's 1,711 buffers and
-- 2.9M of its 10.6M backend instructions (an early claim 7.4M; the late
-- one with its walk bounded by hand 7.8M). No start past them keeps the
-- order: a row another transaction makes pending (an enqueue with an
-- earlier run_at or a higher priority, a release keeping its place) lands
-- among those pages, and only the walk, or a record of such writes, shows
-- that there is none.
-- A paused queue (a row in queues with paused set) gives nothing: the
-- check is a one-time filter on both branches, so every worker of every
-- process honours a pause from the statement after it commits.
-- First, buried ends the queue's jobs whose claim expired and that must not
-- run again: past their expires_at they end expired (an expired job is
-- never handed out, whatever its state), after their last allowed attempt
-- dead, the lapsed claim recorded as that attempt's error. Those rows are
-- never the expired branch's (it takes only jobs with attempts left and
-- not past expires_at), so the two updates touch different rows; one
-- statement saves the claim a round trip (it was BuryExhaustedClaims, sent
-- before every claim; issue 18).
-- The update reaches the rows picked by the ctid their lock returned, not
-- by a second descent of jobs_pkey (issue 18: 471 buffers for 50 jobs,
-- 676 before). A row updated by another transaction between this
-- statement's snapshot and its lock is locked in a version the snapshot
-- does not see: the update leaves it, and the claim returns fewer jobs (it
-- stays claimable). (ctid::tid: sqlc does not know system columns.) The
-- ctids are one array the update's tid scan reads, not a join: a generic
-- plan assumes a LIMIT it cannot see takes a tenth of the queue, and a
-- join planned for that many rows may become a hash join over a
-- sequential scan of jobs (121 ms for 50 jobs of a 100k-job queue, seen
-- with the LIMIT hidden from both plans; issue 18).
-- Returns only the columns the claim did not stamp, as SQLite's claim does
-- (the caller knows the queue, state, claimed_at, claim_expires_at,
-- claim_token and worker; a running job has no finished_at): 11 columns
-- of 20 to send and decode per job, and errors NULL when there are none
-- (an empty array is a buffer to allocate per job; issue 18).
-- The limit, the queue and every now but ready's run_at bound reach the
-- plan through initplans ((SELECT @x)), so that PostgreSQL keeps one
-- generic plan of the prepared statement instead of planning each claim
-- again. Its plan cache takes the generic plan only while that costs no
-- more than the custom plans so far did on average, and a custom plan that
-- saw the limit always cost less (a claim of 1 job, where the generic plan
-- must assume a tenth of the rows): every claim was planned again, 0.55 ms
-- of the backend's CPU for a 1-job claim, 0.2 ms with the plan cached
-- (issue 18). Hidden from both, the limit is a tenth of the rows in
-- either, and the queue the average queue: a custom plan that knew a small
-- queue cost less than the generic one, forever. run_at <= @now stays in
-- sight: a custom plan knows how many jobs are due, which on a table where
-- a third or more of them are (jobs ready, finished ones kept, other
-- queues) costs more than the generic plan's default third, so the generic
-- plan still wins once the table grew after the statement's first five
-- runs (always custom plans: a worker starting on an empty queue); with
-- now hidden too those first plans stayed the cheapest, and the claims
-- after a fill were planned again for hundreds of calls. Where most jobs
-- are delayed, custom plans stay cheaper and each claim is planned, as
-- before. Either plan reads the same pages (TestClaimKeepsOneGenericPlanPostgres).
WITH RECURSIVE buried AS (
    UPDATE alkstore.jobs b
    SET state = CASE WHEN b.expires_at IS NOT NULL AND b.expires_at <= @now::timestamptz THEN 'expired' ELSE 'dead' END,
        finished_at = @now::timestamptz, claim_token = NULL, claim_expires_at = NULL,
        last_error = CASE WHEN b.expires_at IS NOT NULL AND b.expires_at <= @now::timestamptz THEN 'expired'
                          ELSE 'attempts exhausted: the last claim expired' END,
        errors = CASE WHEN b.expires_at IS NOT NULL AND b.expires_at <= @now::timestamptz THEN b.errors
                      ELSE (CASE WHEN jsonb_array_length(b.errors) >= 20 THEN b.errors - 0 ELSE b.errors END)
                           || jsonb_build_array(jsonb_build_object('attempt', b.attempts, 'error', 'attempts exhausted: the last claim expired',
                                                                   'at_us', (EXTRACT(EPOCH FROM @now::timestamptz) * 1000000)::bigint)) END
    WHERE b.id = ANY (ARRAY(
        SELECT x.id FROM alkstore.jobs x
        WHERE x.queue = (SELECT @queue::text) AND x.state = 'running' AND x.claim_expires_at <= (SELECT @now::timestamptz)
          AND (x.attempts >= x.max_attempts OR (x.expires_at IS NOT NULL AND x.expires_at <= (SELECT @now::timestamptz)))
        FOR UPDATE SKIP LOCKED))
    RETURNING 1
),
prios AS (
    (SELECT j.priority, j.run_at, j.id FROM alkstore.jobs j
     WHERE j.queue = (SELECT @queue::text) AND j.state = 'pending'
       AND NOT EXISTS (SELECT 1 FROM alkstore.queues pq WHERE pq.name = @queue::text AND pq.paused)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT 1)
    UNION ALL
    SELECT h.priority, h.run_at, h.id
    FROM prios p CROSS JOIN LATERAL (
        SELECT j.priority, j.run_at, j.id FROM alkstore.jobs j
        WHERE j.queue = (SELECT @queue::text) AND j.state = 'pending' AND j.priority < p.priority
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 1
    ) AS h
),
ready AS (
    SELECT r.id, r.priority, r.run_at, r.tid
    FROM prios p CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.ctid::tid AS tid FROM alkstore.jobs j
        WHERE j.queue = (SELECT @queue::text) AND j.state = 'pending' AND j.priority = p.priority
          AND (j.run_at, j.id) >= (p.run_at, p.id) AND j.run_at <= @now::timestamptz
          AND (j.expires_at IS NULL OR j.expires_at > (SELECT @now::timestamptz))
        ORDER BY j.run_at, j.id
        LIMIT (SELECT @max_jobs::integer)
        FOR UPDATE SKIP LOCKED
    ) AS r
    LIMIT (SELECT @max_jobs::integer)
),
expired AS (
    SELECT j.id, j.priority, j.run_at, j.ctid::tid AS tid FROM alkstore.jobs j
    WHERE j.queue = (SELECT @queue::text) AND j.state = 'running'
      AND j.claim_expires_at <= (SELECT @now::timestamptz) AND j.attempts < j.max_attempts
      AND (j.expires_at IS NULL OR j.expires_at > (SELECT @now::timestamptz))
      AND NOT EXISTS (SELECT 1 FROM alkstore.queues pq WHERE pq.name = @queue::text AND pq.paused)
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT (SELECT @max_jobs::integer)
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT c.tid FROM (SELECT * FROM ready UNION ALL SELECT * FROM expired) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT (SELECT @max_jobs::integer)
)
UPDATE alkstore.jobs j
SET state = 'running', attempts = j.attempts + 1, claimed_at = @now::timestamptz,
    claim_expires_at = @claim_expires_at::timestamptz, claim_token = @claim_token::bigint, worker = @worker::text
WHERE j.ctid = ANY (ARRAY(SELECT p.tid FROM picked p))
RETURNING j.id, j.payload, j.priority, j.attempts, j.max_attempts, j.created_at, j.run_at, j.expires_at, j.last_error,
    NULLIF(j.errors, '[]'::jsonb)::jsonb AS errors, j.headers;

-- name: AckJob :execrows
-- Fenced: only the current, unexpired claim may settle a job. Deletes the
-- job unless its queue keeps completed jobs; when it matched nothing,
-- CompleteJob decides (the queue keeps completed jobs, or the claim is gone).
DELETE FROM alkstore.jobs
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz
  AND NOT EXISTS (SELECT 1 FROM alkstore.queues q WHERE q.name = jobs.queue AND q.completed_retention_us > 0);

-- name: CompleteJob :one
-- Acks a job AckJob did not delete, as one decision: it ends completed
-- when its queue keeps completed jobs, and is deleted when it does not
-- (the retention was turned off since AckJob looked). One statement reads
-- the queue's settings once, so a Configure committing meanwhile cannot
-- make both steps miss a job its claim still holds. 1: the claim held it.
WITH deleted AS (
    DELETE FROM alkstore.jobs d
    WHERE d.id = @id AND d.state = 'running' AND d.claim_token = @claim_token::bigint AND d.claim_expires_at > @now::timestamptz
      AND NOT EXISTS (SELECT 1 FROM alkstore.queues q WHERE q.name = d.queue AND q.completed_retention_us > 0)
    RETURNING 1
), completed AS (
    UPDATE alkstore.jobs u
    SET state = 'completed', finished_at = @now::timestamptz, claim_token = NULL, claim_expires_at = NULL
    WHERE u.id = @id AND u.state = 'running' AND u.claim_token = @claim_token::bigint AND u.claim_expires_at > @now::timestamptz
      AND EXISTS (SELECT 1 FROM alkstore.queues q WHERE q.name = u.queue AND q.completed_retention_us > 0)
    RETURNING 1
)
SELECT ((SELECT count(*) FROM deleted) + (SELECT count(*) FROM completed))::bigint AS acked;

-- name: AckJobs :one
-- Per id: only rows still held by that id's claim (claims maps each id, as
-- a JSON key, to its claim token: a lookup per row, where a join of the
-- id and token arrays could be planned as a nested loop over them, n² for
-- a generic plan). Every job is of the queue named: its setting is read
-- once (a one-time filter, not a probe of queues per row), and a queue
-- that keeps completed jobs leaves them all to CompleteJobs. The rows are
-- found on jobs_pkey and locked in id order first, so batches that share
-- jobs (or a transaction settling jobs one by one in id order) never
-- deadlock, whatever their input order. The state it tests is an initplan
-- ((SELECT 'running')), so that no partial index's predicate follows
-- from the statement and jobs_pkey is its only way in: with state =
-- 'running' in sight, a plan made while the statistics counted few
-- running jobs (jobs_running not vacuumed or analysed since the queue's
-- jobs were claimed) walked jobs_running over every running job of the
-- queue and tested each against the ids (issue 18: 325 buffers for an ack
-- of 10 beside 20,000 running jobs, 15 ms for one of 25 beside 10,000;
-- SQLite's AckJobs is driven by its pairs for the same reason). Returns
-- the ids it acked (the worker reports each job's outcome), as one array
-- in one row: a row per job cost the client a scan and an allocation per
-- job (issue 18). Issue 18: 8 buffers a job on a generic plan, 11 to 14
-- before.
-- The delete reaches the rows held by the ctid their lock returned, as
-- ClaimJobs's update does, not by a second descent of jobs_pkey per row
-- (issue 18: an ack of 100 claimed jobs read 1,002 buffers, 393 of them
-- that second descent). A row another transaction updated between this
-- statement's snapshot and its lock (a heartbeat of the same claim) is
-- locked in a version the snapshot does not see: the delete leaves it,
-- the ids returned lack it, and ackMany settles it with CompleteJobs, as
-- it does any job AckJobs did not. The ctids go as one array the delete's
-- tid scan reads, not a join (see ClaimJobs).
-- The rows are locked with SKIP LOCKED: a row another transaction holds
-- (the application's CancelTx, or any statement on the finished job, in a
-- transaction still open) is left, not waited for, so that it does not
-- hold up the batch's other acks and, behind them, every later batch of
-- the worker, whose finished jobs are no longer heartbeat: their leases
-- ran out while the ack waited, and they were claimed and run again
-- (attack56a F2: 1-3 extra runs a job, 5 of 5 runs). CompleteJobs skips
-- it too; ackMany reads which of the jobs neither settled still hold
-- their claims (JobClaims), and those wait for their rows' locks in one
-- statement (CompleteLockedJobs), apart from the worker's ack loop.
WITH held AS (
    SELECT x.id, x.ctid::tid AS tid FROM alkstore.jobs x
    WHERE x.id = ANY (@ids::bigint[]) AND x.queue = @queue::text AND x.state = (SELECT 'running'::text)
      AND x.claim_expires_at > @now::timestamptz AND x.claim_token = (@claims::jsonb ->> x.id::text)::bigint
      AND NOT EXISTS (SELECT 1 FROM alkstore.queues q WHERE q.name = @queue::text AND q.completed_retention_us > 0)
    ORDER BY x.id
    FOR UPDATE OF x SKIP LOCKED
), deleted AS (
    DELETE FROM alkstore.jobs j
    WHERE j.ctid = ANY (ARRAY(SELECT h.tid FROM held h))
    RETURNING j.id
)
SELECT COALESCE(array_agg(d.id), '{}')::bigint[] AS ids FROM deleted d;

-- name: CompleteJobs :many
-- CompleteJob for the jobs AckJobs did not delete, as one decision: the
-- held rows are locked in id order (like AckJobs) and read with their
-- queue's setting once; those of queues that keep completed jobs end
-- completed, the others are deleted. Returns the ids of those held. The
-- state is an initplan, as in AckJobs, so that the ids drive through
-- jobs_pkey (issue 18: with state = 'running' in sight, a plan made while
-- the statistics counted few running jobs read every running row of the
-- table, 20,000 in 17-35 ms, for 10 jobs). Rows another transaction
-- holds are skipped, as in AckJobs.
WITH held AS (
    SELECT x.id, EXISTS (SELECT 1 FROM alkstore.queues q WHERE q.name = x.queue AND q.completed_retention_us > 0) AS kept
    FROM alkstore.jobs x
    JOIN (SELECT unnest(@ids::bigint[]) AS id, unnest(@claim_tokens::bigint[]) AS claim_token) AS c
      ON x.id = c.id AND x.claim_token = c.claim_token
    WHERE x.state = (SELECT 'running'::text) AND x.claim_expires_at > @now::timestamptz
    ORDER BY x.id
    FOR UPDATE OF x SKIP LOCKED
), deleted AS (
    DELETE FROM alkstore.jobs j USING held h WHERE j.id = h.id AND NOT h.kept
    RETURNING j.id
), completed AS (
    UPDATE alkstore.jobs j
    SET state = 'completed', finished_at = @now::timestamptz, claim_token = NULL, claim_expires_at = NULL
    FROM held h WHERE j.id = h.id AND h.kept
    RETURNING j.id
)
SELECT id FROM deleted UNION ALL SELECT id FROM completed;

-- name: CompleteLockedJobs :many
-- CompleteJobs waiting for the rows' locks: the settle of the claims that
-- AckJobs and CompleteJobs skipped because another transaction held their
-- rows and that were still live after (a worker's ack sends it apart from
-- its ack loop, AckMany after its batch; see store's ackLocked). One
-- statement for all of them, locked in id order as AckJobs locks: a lock
-- wait that fails (lock_timeout) fails it once, not once a job. While it
-- waits, PostgreSQL has it hold the tuple lock of the row, so a claim
-- (SKIP LOCKED) cannot take the job meanwhile. When the holder rolled
-- back, the job is settled; when it committed a change (a Cancel, a
-- settle), the fence is checked again on the row it wrote (READ
-- COMMITTED) and a claim gone settles nothing. A row updated by another
-- transaction that committed after this statement's snapshot (a
-- heartbeat) is locked in its new version, and the delete and the update
-- reach that version by id (not by ctid, as AckJobs's delete does).
WITH held AS (
    SELECT x.id, EXISTS (SELECT 1 FROM alkstore.queues q WHERE q.name = x.queue AND q.completed_retention_us > 0) AS kept
    FROM alkstore.jobs x
    JOIN (SELECT unnest(@ids::bigint[]) AS id, unnest(@claim_tokens::bigint[]) AS claim_token) AS c
      ON x.id = c.id AND x.claim_token = c.claim_token
    WHERE x.state = (SELECT 'running'::text) AND x.claim_expires_at > @now::timestamptz
    ORDER BY x.id
    FOR UPDATE OF x
), deleted AS (
    DELETE FROM alkstore.jobs j USING held h WHERE j.id = h.id AND NOT h.kept
    RETURNING j.id
), completed AS (
    UPDATE alkstore.jobs j
    SET state = 'completed', finished_at = @now::timestamptz, claim_token = NULL, claim_expires_at = NULL
    FROM held h WHERE j.id = h.id AND h.kept
    RETURNING j.id
)
SELECT id FROM deleted UNION ALL SELECT id FROM completed;

-- name: RetryJob :execrows
-- Back to pending at run_at, while attempts remain; the cause joins the
-- job's errors (the last 20 kept).
UPDATE alkstore.jobs
SET state = 'pending', run_at = @run_at::timestamptz, last_error = @cause::text, claim_token = NULL, claim_expires_at = NULL,
    errors = (CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END)
             || jsonb_build_array(jsonb_build_object('attempt', attempts, 'error', @cause::text,
                                                     'at_us', (EXTRACT(EPOCH FROM @now::timestamptz) * 1000000)::bigint))
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint
  AND claim_expires_at > @now::timestamptz AND attempts < max_attempts;

-- name: BuryJob :execrows
-- To dead with the cause (joining the job's errors); with exhausted_only,
-- only when attempts are spent.
UPDATE alkstore.jobs
SET state = 'dead', finished_at = @now::timestamptz, last_error = @cause::text, claim_token = NULL, claim_expires_at = NULL,
    errors = (CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END)
             || jsonb_build_array(jsonb_build_object('attempt', attempts, 'error', @cause::text,
                                                     'at_us', (EXTRACT(EPOCH FROM @now::timestamptz) * 1000000)::bigint))
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz
  AND (NOT @exhausted_only::boolean OR attempts >= max_attempts);

-- name: HeartbeatJob :execrows
UPDATE alkstore.jobs
SET claim_expires_at = @claim_expires_at::timestamptz
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz;

-- name: HeartbeatJobs :many
-- HeartbeatJob for every due claim of a worker's tick, one statement
-- (a worker heartbeat its handlers one statement each, every one waiting
-- for a pooled connection of its own: on a small pool, claims lapsed
-- while the beats queued). Fenced as HeartbeatJob is, per id: the claim
-- token claims maps it to (a lookup per row, as in AckJobs), state
-- running, and a lease not yet run out at now (a lapsed claim is not
-- revived). Returns a row per claim that still held at the statement's
-- snapshot (live), and whether it was extended (beat): a due id with no
-- row is lost. The rows are locked with SKIP LOCKED, so a beat never
-- waits for another transaction's row lock (a settle in flight, a Cancel
-- in an open transaction) holding up the other claims of the tick: a
-- live row another transaction holds is not extended here, and the
-- worker waits for its lock with HeartbeatLockedJob, a statement (and a
-- connection) of its own. live is read first, before
-- the update, and the locked rows are updated by id, not by the ctid
-- their lock returned: a row another transaction updated between this
-- statement's snapshot and its lock has a ctid the snapshot does not
-- see, and a tid scan would leave it (see AckJobs). The state is an
-- initplan, as in AckJobs, so that the ids drive through jobs_pkey.
WITH live AS (
    SELECT x.id FROM alkstore.jobs x
    WHERE x.id = ANY (@ids::bigint[]) AND x.state = (SELECT 'running'::text)
      AND x.claim_expires_at > @now::timestamptz AND x.claim_token = (@claims::jsonb ->> x.id::text)::bigint
), held AS (
    SELECT x.id FROM alkstore.jobs x
    WHERE x.id = ANY (ARRAY(SELECT l.id FROM live l)) AND x.state = (SELECT 'running'::text)
      AND x.claim_expires_at > @now::timestamptz AND x.claim_token = (@claims::jsonb ->> x.id::text)::bigint
    FOR NO KEY UPDATE OF x SKIP LOCKED
), beat AS (
    UPDATE alkstore.jobs j
    SET claim_expires_at = @claim_expires_at::timestamptz
    WHERE j.id = ANY (ARRAY(SELECT h.id FROM held h))
    RETURNING j.id
)
SELECT l.id, (b.id IS NOT NULL)::boolean AS beat FROM live l LEFT JOIN beat b ON b.id = l.id;

-- name: HoldClaims :many
-- SQLite's HoldClaims extends, in a transactional handler's transaction
-- holding SQLite's only writer, the claims of the jobs waiting for it,
-- only ever later. PostgreSQL does not use it: a heartbeat beside each
-- handler keeps its claim there. Kept parallel: the claims (ids, and
-- claims mapping each to its token), fenced by token, state running and
-- a lease not yet run out at now, moved to claim_expires_at when that is
-- later; returns the ids kept.
UPDATE alkstore.jobs j
SET claim_expires_at = GREATEST(j.claim_expires_at, @claim_expires_at::timestamptz)
WHERE j.id = ANY (@ids::bigint[]) AND j.state = 'running' AND j.claim_token = (@claims::jsonb ->> j.id::text)::bigint
  AND j.claim_expires_at > @now::timestamptz
RETURNING j.id;

-- name: ReviveClaims :many
-- SQLite's ReviveClaims extends, after SQLite rolled a transactional
-- handler's transaction back whole, the claims that transaction had
-- extended, fenced by token and state only (a lapsed claim nobody took
-- again is still this process's). PostgreSQL does not use it: a
-- heartbeat beside each handler keeps its claim there, and nothing rolls
-- extensions back with a handler's transaction. Kept parallel: the claims
-- (ids, and claims mapping each to its token) with that fence, extended
-- to claim_expires_at; returns the ids extended.
UPDATE alkstore.jobs j
SET claim_expires_at = @claim_expires_at::timestamptz
WHERE j.id = ANY (@ids::bigint[]) AND j.state = 'running' AND j.claim_token = (@claims::jsonb ->> j.id::text)::bigint
RETURNING j.id;

-- name: HeartbeatLockedJob :one
-- HeartbeatJob for a live claim that HeartbeatJobs skipped because
-- another transaction held its row: this one waits for the lock of the
-- row. Fenced as HeartbeatJobs is, at now, the time the worker read just
-- before it sent the statement (a lapsed claim is not revived): only a
-- statement that began while the claim held waits. While it waits,
-- PostgreSQL has it hold the tuple lock of the row, so a claim (SKIP
-- LOCKED) cannot take the row meanwhile, and a statement that waits for
-- the row (a settle, a Cancel, a sweep) comes after it and reads what it
-- wrote. When the holder rolls back, the claim is as it was at now and is
-- extended; when the holder committed a change (a Cancel, a settle), the
-- fence is checked again on the row it wrote (READ COMMITTED), and a
-- claim gone is not extended (no row: lost). The new lease runs from
-- when the lock came, not from now (after a long wait, one from now
-- would have run out already): now + (clock_timestamp() -
-- statement_timestamp()) + extend, the wait of the statement added to
-- the clock of the worker. The row is locked first (held, an initplan)
-- so that clock_timestamp() is read once the lock came: an UPDATE alone
-- computes its new row before it waits, and keeps it when the holder
-- rolled back. (CAST, not ::, in SET: sqlc 1.x misplaces its parameter
-- edits around a :: cast there.) Returns the new lease.
WITH held AS (
    SELECT x.id FROM alkstore.jobs x
    WHERE x.id = @id::bigint AND x.state = 'running' AND x.claim_token = @claim_token::bigint
      AND x.claim_expires_at > @now::timestamptz
    FOR NO KEY UPDATE OF x
)
UPDATE alkstore.jobs j
SET claim_expires_at = CAST(@now AS timestamptz) + (clock_timestamp() - statement_timestamp())
                       + CAST(@extend_us AS bigint) * interval '1 microsecond'
WHERE j.id = ANY (ARRAY(SELECT h.id FROM held h))
RETURNING j.claim_expires_at;

-- name: ReleaseJob :execrows
-- Gives a claimed job back without spending its attempt: a shutdown stopped
-- its handler, the job did not fail. It keeps its place in line (run_at).
UPDATE alkstore.jobs
SET state = 'pending', attempts = attempts - 1, claim_token = NULL, claim_expires_at = NULL
WHERE id = @id AND state = 'running' AND claim_token = @claim_token::bigint AND claim_expires_at > @now::timestamptz;

-- name: GetJob :one
SELECT * FROM alkstore.jobs WHERE id = @id AND queue = @queue;

-- name: FindJob :one
-- A job by id alone, whatever its queue (a console's search box).
SELECT * FROM alkstore.jobs WHERE id = @id;

-- name: RegisterQueue :exec
-- Records that a queue exists, so that Store.Queues lists it while it
-- holds no job; an existing row is left as it is.
INSERT INTO alkstore.queues (name, updated_at) VALUES (@name::text, @now::timestamptz)
ON CONFLICT (name) DO NOTHING;

-- name: SweepExpiredJobs :execrows
-- Jobs past their expires_at end expired: pending ones, and running ones
-- whose claim lapsed (a live claim may still settle its job).
-- Rows another statement holds are skipped, never waited for, so sweeps and
-- claims cannot deadlock; the next sweep or claim takes them. The ids are
-- an array probed on the primary key: as an IN (subquery), an analysed
-- table had the planner hash them against a sequential scan of every job
-- (issue 18). The states are named together (state IN) before the claim's
-- condition: that implies the predicate of jobs_expirable and of no other
-- index, so a never-analysed table reads it too. Written as "pending, or
-- running with a lapsed claim", the pending arm could read every pending
-- job of the queue through jobs_ready (schema 00024).
UPDATE alkstore.jobs
SET state = 'expired', finished_at = @now::timestamptz, last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id = ANY (ARRAY(
    SELECT x.id FROM alkstore.jobs x
    WHERE x.queue = @queue AND x.expires_at IS NOT NULL AND x.expires_at <= @now::timestamptz
      AND x.state IN ('pending', 'running')
      AND (x.state = 'pending' OR x.claim_expires_at <= @now::timestamptz)
    FOR UPDATE SKIP LOCKED));

-- name: CancelJob :execrows
-- A pending or running job ends cancelled, its last_error saying so (like
-- an expiry's, not an attempt's error); a running claim is lost, and the
-- wake (the queue's cancel topic) tells its worker, wherever it runs, to
-- cancel the handler.
WITH w AS MATERIALIZED (
    SELECT CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
)
UPDATE alkstore.jobs j
SET state = 'cancelled', finished_at = @now::timestamptz, last_error = 'cancelled', claim_token = NULL, claim_expires_at = NULL
FROM w
WHERE j.id = @id AND j.queue = @queue::text AND j.state IN ('pending', 'running');

-- name: RequeueJob :execrows
-- A dead, cancelled or expired job back to pending, due now, with its
-- attempts reset (its errors kept). An expires_at already past is dropped:
-- the job would expire again at once. A unique job whose key another job
-- holds stays (JobKeyHolder says which); one holding its own key moves.
UPDATE alkstore.jobs j
SET state = 'pending', attempts = 0, run_at = @now::timestamptz, finished_at = NULL,
    expires_at = CASE WHEN j.expires_at <= @now::timestamptz THEN NULL ELSE j.expires_at END
WHERE j.id = @id AND j.queue = @queue AND j.state IN ('dead', 'cancelled', 'expired')
  AND (j.unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM alkstore.jobs h
      WHERE h.unique_key = j.unique_key AND h.id <> j.id AND NULLIF(strpos(h.unique_states, ',' || h.state || ',') > 0, false)));

-- name: JobKeyHolder :one
-- Why RequeueJob did not move a job: the job (dead, cancelled or expired)
-- with its unique key's digest and the other job holding that key now
-- (NULL: none). No row: no such job in those states.
SELECT x.unique_key, h.id AS holder_id
FROM alkstore.jobs x
LEFT JOIN alkstore.jobs h ON h.unique_key = x.unique_key AND h.id <> x.id AND NULLIF(strpos(h.unique_states, ',' || h.state || ',') > 0, false)
WHERE x.id = @id AND x.queue = @queue::text AND x.state IN ('dead', 'cancelled', 'expired')
LIMIT 1;

-- name: RequeueDeadJobs :execrows
-- Up to @batch dead jobs of the queue that died at or before @before (so
-- jobs that die again while a RequeueDead runs are not taken twice), back
-- to pending like RequeueJob, oldest first through jobs_finished; rows
-- others hold are skipped. So are unique jobs that cannot hold their key
-- once pending: those whose key another job holds now (probed on
-- jobs_unique; a dead job holding its own key moves), and, of dead jobs of
-- the batch sharing a key, all but the one that died first. They stay
-- dead; the count is of the jobs moved.
UPDATE alkstore.jobs
SET state = 'pending', attempts = 0, run_at = @now::timestamptz, finished_at = NULL,
    expires_at = CASE WHEN expires_at <= @now::timestamptz THEN NULL ELSE expires_at END
WHERE id IN (
    SELECT b.id FROM (
        SELECT c.id, c.unique_key, row_number() OVER (PARTITION BY c.unique_key ORDER BY c.finished_at, c.id) AS nth
        FROM (SELECT x.id, x.unique_key, x.finished_at FROM alkstore.jobs x
              WHERE x.queue = @queue::text AND x.state = 'dead' AND x.finished_at <= @before::timestamptz
                AND (x.unique_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM alkstore.jobs h
                    WHERE h.unique_key = x.unique_key AND h.id <> x.id AND NULLIF(strpos(h.unique_states, ',' || h.state || ',') > 0, false)
                    OFFSET 0)) -- a probe per dead job: never an anti-join over the whole table
              ORDER BY x.finished_at
              LIMIT @batch::integer
              FOR UPDATE SKIP LOCKED) AS c) AS b
    WHERE b.unique_key IS NULL OR b.nth = 1);

-- name: DeleteJob :execrows
-- Any job but a running one (cancel it first).
DELETE FROM alkstore.jobs WHERE id = @id AND queue = @queue AND state <> 'running';

-- name: ListJobs :many
-- A page of the queue's finished jobs in one state, in id order after
-- @after. The page's ids are one range of jobs_listing, read index-only;
-- its rows are one primary-key lookup each (LATERAL ... LIMIT 1 keeps a
-- generic plan, which cannot know the page size, from hashing the whole
-- table instead). The state is bounded as a range, not equated, and the
-- ids ordered by (state, id): with state = @state the planner may walk
-- jobs_pkey in id order instead, filtering every other row of the table,
-- when it misjudges where the state's rows lie (822 buffers for 100 rows
-- on the plan test's skewed queue; 307 this way). finished_at IS NOT NULL
-- (every finished job has it) is the partial index's predicate (schema
-- 00039), which a generic plan needs said.
SELECT j.* FROM (SELECT x.state, x.id FROM alkstore.jobs x
                 WHERE x.queue = @queue::text AND x.state IN ('completed', 'cancelled', 'expired', 'dead')
                   AND x.finished_at IS NOT NULL
                   AND (x.state, x.id) > (@state::text, @after::bigint) AND x.state <= @state::text
                 ORDER BY x.state, x.id
                 LIMIT @max_jobs::integer) AS page
CROSS JOIN LATERAL (SELECT * FROM alkstore.jobs y WHERE y.id = page.id LIMIT 1) AS j
ORDER BY page.id;

-- name: ListPendingJobs :many
-- ListJobs for pending jobs: the queue's pending rows are read from
-- jobs_ready (index-only) and the page's ids picked by a top-N sort, so a
-- page costs the queue's pending jobs, not the table's other rows, and
-- enqueues pay for no index of their own. (id + 0: ordered by id itself,
-- the planner may walk jobs_pkey instead, filtering every other row.)
SELECT j.* FROM (SELECT x.id FROM alkstore.jobs x
                 WHERE x.queue = @queue::text AND x.state = 'pending' AND x.id + 0 > @after::bigint
                 ORDER BY x.id + 0
                 LIMIT @max_jobs::integer) AS page
CROSS JOIN LATERAL (SELECT * FROM alkstore.jobs y WHERE y.id = page.id LIMIT 1) AS j
ORDER BY page.id;

-- name: ListRunningJobs :many
-- ListJobs for running jobs, through jobs_running: a queue's running rows
-- are its claims in flight, few enough to sort. (id + 0 as in
-- ListPendingJobs.)
SELECT * FROM alkstore.jobs
WHERE queue = @queue::text AND state = 'running' AND id + 0 > @after::bigint
ORDER BY id + 0
LIMIT @max_jobs::integer;

-- name: ConfigureQueue :exec
-- Stores a queue's retention settings; its paused flag stays as it is.
INSERT INTO alkstore.queues (name, completed_retention_us, dead_retention_us, updated_at)
VALUES (@name::text, @completed_retention_us::bigint, sqlc.narg(dead_retention_us)::bigint, @now::timestamptz)
ON CONFLICT (name) DO UPDATE
SET completed_retention_us = EXCLUDED.completed_retention_us, dead_retention_us = EXCLUDED.dead_retention_us,
    updated_at = EXCLUDED.updated_at;

-- name: ListQueueSettings :many
-- Every queue with a settings row.
SELECT name, paused, completed_retention_us, dead_retention_us FROM alkstore.queues ORDER BY name;

-- name: QueueStats :one
-- Each count is a range of a partial index (jobs_ready, jobs_running,
-- jobs_finished for each final state) read up to @cap rows, in the index's
-- order so that no plan prefers reading the table. Pending jobs are read
-- one priority at a time down jobs_ready (prios, as in ClaimJobs: one
-- descent per distinct priority, each landing on that priority's earliest
-- run_at), ready and scheduled being each priority's range on either side
-- of @now, the whole stopped at @cap rows; the oldest ready job is the
-- earliest of the descents. No count leans on statistics (issue 18).
WITH RECURSIVE prios AS (
    (SELECT j.priority, j.run_at FROM alkstore.jobs j
     WHERE j.queue = @queue::text AND j.state = 'pending'
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT 1)
    UNION ALL
    SELECT h.priority, h.run_at
    FROM prios p CROSS JOIN LATERAL (
        SELECT j.priority, j.run_at FROM alkstore.jobs j
        WHERE j.queue = @queue::text AND j.state = 'pending' AND j.priority < p.priority
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 1
    ) AS h
)
SELECT (SELECT count(*) FROM (SELECT 1 FROM prios p CROSS JOIN LATERAL (
            SELECT 1 FROM alkstore.jobs j
            WHERE j.queue = @queue::text AND j.state = 'pending' AND j.priority = p.priority AND j.run_at <= @now::timestamptz
            ORDER BY j.priority DESC, j.run_at, j.id LIMIT @cap::integer) r
        LIMIT @cap::integer) c)::bigint AS ready,
       (SELECT count(*) FROM (SELECT 1 FROM prios p CROSS JOIN LATERAL (
            SELECT 1 FROM alkstore.jobs j
            WHERE j.queue = @queue::text AND j.state = 'pending' AND j.priority = p.priority AND j.run_at > @now::timestamptz
            ORDER BY j.priority DESC, j.run_at, j.id LIMIT @cap::integer) r
        LIMIT @cap::integer) c)::bigint AS scheduled,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'running'
                              ORDER BY queue, claim_expires_at LIMIT @cap::integer) c)::bigint AS running,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'dead' AND finished_at IS NOT NULL
                              ORDER BY queue, finished_at LIMIT @cap::integer) c)::bigint AS dead,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'completed' AND finished_at IS NOT NULL
                              ORDER BY queue, finished_at LIMIT @cap::integer) c)::bigint AS completed,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'cancelled' AND finished_at IS NOT NULL
                              ORDER BY queue, finished_at LIMIT @cap::integer) c)::bigint AS cancelled,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.jobs WHERE queue = @queue::text AND state = 'expired' AND finished_at IS NOT NULL
                              ORDER BY queue, finished_at LIMIT @cap::integer) c)::bigint AS expired,
       LEAST(COALESCE((SELECT min(p.run_at) FROM prios p), @now::timestamptz), @now::timestamptz)::timestamptz AS oldest_ready;

-- name: NextJobDue :one
-- The earliest moment, in unix microseconds, a job of the queue becomes
-- claimable (a pending job's run_at or a claim's deadline); 0 when none.
-- The pending side walks the queue's distinct pending priorities down
-- jobs_ready (prios, as in ClaimJobs), each descent landing on that
-- priority's earliest run_at; the running side is the first entry of
-- jobs_running. Both are ordered index walks that stop at their rows
-- whatever the planner estimates (a min() aggregate, on a never-analysed
-- table, read its index whole: issue 18).
-- A paused queue has nothing due: its workers wait for the resume's wake.
WITH RECURSIVE prios AS (
    (SELECT j.priority, j.run_at FROM alkstore.jobs j
     WHERE j.queue = @queue::text AND j.state = 'pending'
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT 1)
    UNION ALL
    SELECT h.priority, h.run_at
    FROM prios p CROSS JOIN LATERAL (
        SELECT j.priority, j.run_at FROM alkstore.jobs j
        WHERE j.queue = @queue::text AND j.state = 'pending' AND j.priority < p.priority
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 1
    ) AS h
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM alkstore.queues WHERE name = @queue::text AND paused) THEN 0
       ELSE COALESCE(EXTRACT(EPOCH FROM LEAST(
    (SELECT min(p.run_at) FROM prios p),
    (SELECT j.claim_expires_at FROM alkstore.jobs j WHERE j.queue = @queue::text AND j.state = 'running'
     ORDER BY j.queue, j.claim_expires_at LIMIT 1)
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
-- handlers' claims after a cancel wake, and an ack which of the claims it
-- skipped for a lock are still live); deleted jobs give no row.
SELECT id, state, claim_token, claim_expires_at FROM alkstore.jobs WHERE id = ANY(@ids::bigint[]);

-- name: ClaimJobByID :many
-- Claims one given job (alktest works the job a test enqueued, whatever
-- else the queue holds): a pending job, due or not, or a running one whose
-- claim lapsed with attempts left; never one past its expires_at, nor one
-- of a paused queue. Stamped as ClaimJobs stamps; no row when the job is
-- not claimable.
UPDATE alkstore.jobs j
SET state = 'running', attempts = j.attempts + 1, claimed_at = @now::timestamptz,
    claim_expires_at = @claim_expires_at::timestamptz, claim_token = @claim_token::bigint, worker = @worker::text
WHERE j.id = @id::bigint AND j.queue = @queue::text
  AND (j.state = 'pending'
       OR (j.state = 'running' AND j.claim_expires_at <= @now::timestamptz AND j.attempts < j.max_attempts))
  AND (j.expires_at IS NULL OR j.expires_at > @now::timestamptz)
  AND NOT EXISTS (SELECT 1 FROM alkstore.queues pq WHERE pq.name = @queue::text AND pq.paused)
RETURNING j.*;

-- name: ListQueueJobs :many
-- A page of the queue's jobs in every state, in id order after @after
-- (alktest's assertions): paged by id, not by state, so a job moving
-- between states while the pages are read is still read once.
SELECT * FROM alkstore.jobs
WHERE queue = @queue::text AND id > @after::bigint
ORDER BY id
LIMIT @max_jobs::integer;

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
