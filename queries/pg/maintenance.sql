-- Maintenance (PostgreSQL): the janitor's bounded passes. Each takes at
-- most @batch rows through a partial or leading index, FOR UPDATE SKIP
-- LOCKED, so janitors never wait on each other or on active keys.
-- The rows a statement changes are chosen in an ARRAY(...) sub-select and
-- matched with = ANY: the outer scan is then an index lookup in every plan,
-- where an IN sub-select lets a generic plan (which guesses a LIMIT $n
-- keeps a tenth of the table) hash-join a sequential scan of the table.

-- name: DeleteExpiredHeadless :execrows
-- A stream's headless rows unused since @cutoff (its TTL ago; a later lock
-- recreates them). Each stream with headless rows (StreamsWithHeadless)
-- is a range of compaction_heads_headless_at, oldest first (headless_at
-- is a headless row's updated_at; schema 00031). head_offset IS NULL is
-- checked again on each row: only a headless row is ever deleted.
DELETE FROM alkstore.compaction_heads h
WHERE h.stream = @stream::text AND h.head_offset IS NULL
  AND h.key = ANY (ARRAY(
    SELECT x.key FROM alkstore.compaction_heads x
    WHERE x.stream = @stream::text AND x.headless_at IS NOT NULL
      AND x.headless_at < @cutoff::timestamptz AND x.head_offset IS NULL
    ORDER BY x.stream, x.headless_at
    LIMIT @batch::integer
    FOR UPDATE OF x SKIP LOCKED));

-- name: MaintainedStreams :many
-- The streams the janitor works on: those with a retention, and compacted
-- ones, with their settings (a small table, read whole).
SELECT name, compacted, retention_us, min_compaction_lag_us, tombstone_retention_us, compacted_through
FROM alkstore.streams
WHERE retention_us IS NOT NULL OR compacted
ORDER BY name;

-- name: RetentionWindow :one
-- The stream's oldest @lim events, walked on events_stream_id from its
-- first, skipping a compacted stream's current heads, which retention
-- spares. [first_id, upto] is the prefix of the window past the cutoff
-- (upto < first_id: none is). Here and below a stream's events are bounded
-- by inequalities on stream (or a row comparison on (stream, id)), not an
-- equality, so that only events_stream_id yields ORDER BY stream, id (see
-- ReadEvents). Offsets from @hold on are left to a partition drop
-- (store/partitions_pg.go, retentionHold): the walk stops there.
-- The limit is a subquery: its value is unknown when the plan is made, so
-- the planner costs the ordered walk at a fraction of the stream whatever
-- it believes the stream holds. With a constant, a custom plan on a
-- never-analysed events table (about 170 rows estimated) read the whole
-- stream through a bitmap, probing the heads for every event, and sorted
-- it: 365,000 buffers beside a compacted stream of 91,000 events, 2,010
-- now (issue 18).
SELECT COALESCE(min(w.id), 0)::bigint AS first_id,
       COALESCE(min(CASE WHEN w.created_at >= @cutoff::timestamptz THEN w.id END) - 1, max(w.id), -1)::bigint AS upto
FROM (SELECT x.id, x.created_at FROM alkstore.events x
      WHERE x.stream >= @stream::text AND x.stream <= @stream::text AND x.id < @hold::bigint
        AND NOT EXISTS (SELECT 1 FROM alkstore.compaction_heads h
                        WHERE @compacted::boolean AND h.stream = x.stream AND h.key = x.key AND h.head_offset = x.id)
      ORDER BY x.stream, x.id
      LIMIT (SELECT @lim::integer)) w;

-- name: UnheadRetained :exec
-- Runs before DeleteRetained, in its transaction, on a stream that is not
-- compacted: the heads among the events it deletes become headless (see
-- UnheadTrimmed), in key order, skipping rows others hold (their events
-- stay for a later pass). The window's events are an equality on the
-- stream and plain id bounds: a range of events_stream_id bounded at both
-- ends whatever the plan (no order is needed here), and partitions pruned.
-- With a row comparison as the lower bound and stream <= @stream as the
-- upper, the id bound did not stop the scan, and the bitmap scan a
-- never-analysed table gets read the stream from the window to its end
-- (776 buffers for a window of 500 in a stream of 200,000; issue 18).
UPDATE alkstore.compaction_heads h
SET head_offset = NULL, schema_version = 0, compaction_rank = 0, updated_at = @now::timestamptz, headless_at = @now::timestamptz,
    tombstone_at = NULL
WHERE h.stream = @stream::text AND h.head_offset >= @first_id::bigint AND h.head_offset <= @upto::bigint
  AND h.key = ANY (ARRAY(
    SELECT x.key FROM alkstore.compaction_heads x
    WHERE x.stream = @stream::text AND x.head_offset >= @first_id::bigint AND x.head_offset <= @upto::bigint
      AND x.key = ANY (ARRAY(
        SELECT e.key FROM alkstore.events e
        WHERE e.stream = @stream::text AND e.id >= @first_id::bigint AND e.id <= @upto::bigint AND e.key IS NOT NULL))
    ORDER BY x.key
    FOR UPDATE OF x SKIP LOCKED));

-- name: DeleteRetained :execrows
-- The stream's events in [first_id, upto] (a RetentionWindow of @lim
-- events), sparing current heads: those of a compacted stream, and any
-- UnheadRetained skipped. A head row never points at a deleted event.
DELETE FROM alkstore.events e
WHERE e.id = ANY (ARRAY(
    SELECT x.id FROM alkstore.events x
    WHERE (x.stream, x.id) >= (@stream::text, @first_id::bigint) AND x.stream <= @stream::text AND x.id <= @upto::bigint
      AND NOT EXISTS (SELECT 1 FROM alkstore.compaction_heads h
                      WHERE h.stream = x.stream AND h.key = x.key AND h.head_offset = x.id)
    ORDER BY x.stream, x.id
    LIMIT @lim::integer
    FOR UPDATE OF x SKIP LOCKED));

-- name: CompactionWindow :one
-- The next @lim events of a compacted stream after the compaction cursor,
-- up to the settled horizon (an event still in flight below it is never
-- walked past): upto is the end of the window's prefix older than the
-- stream's minimum compaction lag (@after: none is).
SELECT COALESCE(min(CASE WHEN w.created_at >= @cutoff::timestamptz THEN w.id END) - 1, max(w.id), @after::bigint)::bigint AS upto
FROM (SELECT x.id, x.created_at FROM alkstore.events x
      WHERE (x.stream, x.id) > (@stream::text, @after::bigint) AND x.stream <= @stream::text AND x.id <= @horizon::bigint
      ORDER BY x.stream, x.id
      LIMIT (SELECT @lim::integer)) w;

-- name: CompactWindow :one
-- For each key published in (after, upto], its versions other than its
-- head (the heads' key, "C" since 00046, compared in its own collation,
-- as its primary key is; equal either way) older than the lag: those before the head,
-- and those after it that lost to it (a lower rank, see the winner rule),
-- which a `<` kept for good; and every version of a key without a head
-- (a headless row, or none: the stream was not compacted when a trim or
-- retention deleted the key's head, so it reads as having no value, and
-- a version that lost to that head stayed; compact53). Every superseded
-- event is older than its head or is itself in a window, so it goes when
-- the cursor walks past the later of the two. found is how many versions it found (up to @batch), deleted
-- how many of them it deleted: the others another transaction holds (or
-- deleted and committed since this statement's snapshot), and the caller
-- then keeps its cursor below the window. A janitor's window that deleted
-- a version and was rolled back (its budget, its context, its process
-- ending) holds it meanwhile: walked past by a second janitor's window
-- that skipped it, the version was back after the rollback, below the
-- cursor, for good (compact53).
WITH c AS MATERIALIZED (
    SELECT ARRAY(
        SELECT v.id
        FROM unnest(ARRAY(
            SELECT DISTINCT e.key FROM alkstore.events e
            WHERE (e.stream, e.id) > (@stream::text, @after::bigint) AND e.stream <= @stream::text
              AND e.id <= @upto::bigint AND e.key IS NOT NULL)) AS k(key)
        LEFT JOIN alkstore.compaction_heads h ON h.stream = @stream::text AND h.key = k.key COLLATE "C"
        CROSS JOIN LATERAL (
            SELECT y.id FROM alkstore.events y
            WHERE y.stream = @stream::text AND y.key = k.key AND y.key IS NOT NULL AND y.id IS DISTINCT FROM h.head_offset
              AND y.created_at < @cutoff::timestamptz
            LIMIT @batch::integer) v
        LIMIT @batch::integer) AS ids
), d AS (
    DELETE FROM alkstore.events d
    WHERE d.id = ANY (ARRAY(
        SELECT x.id FROM alkstore.events x
        WHERE x.id = ANY ((SELECT c.ids FROM c)::bigint[])
        FOR UPDATE OF x SKIP LOCKED))
    RETURNING 1
)
SELECT (SELECT count(*) FROM d)::bigint AS deleted, (SELECT cardinality(c.ids) FROM c)::bigint AS found;

-- name: AdvanceCompaction :exec
UPDATE alkstore.streams SET compacted_through = @upto::bigint
WHERE name = @stream::text AND compacted_through < @upto::bigint;

-- name: ExpiredTombstones :many
-- A page of a compacted stream's tombstone heads older than the cutoff and
-- at or below its compaction cursor (@through), after (@after_at,
-- @after_key), oldest first: the caller (store/maintenance.go,
-- expireTombstones) deletes the keys (row and event) and reads the next
-- page until it has its batch or the page is short. A tombstone it keeps
-- (its key still has a version inside the lag, DeleteKeyOtherVersions)
-- is paged past: read as the batch's only candidates, as before schema
-- 00042, enough of them filled every batch ahead of the other expired
-- tombstones until the lag passed. Compaction finds a key's older
-- versions through its head row, so a tombstone goes only once the cursor
-- has walked past it, which deleted them: deleted before, it left them
-- without a head row, and a replay saw the deleted key alive for good.
-- Read on compaction_heads_tombstones (schema 00042: a head's
-- tombstone_at is its tombstone's created_at, NULL while the head is a
-- value; key orders the heads of one moment, so a page starts where the
-- last ended), so only expired ones are read, and no index of events is
-- there for the pass alone. The rows are locked in t, under its LIMIT,
-- skipping those another statement holds (a publish of the key in
-- flight: the next pass reads it again); a row that changed since the
-- snapshot is checked again, and one that is no longer a tombstone head
-- drops out (one that is a newer tombstone head comes back with its new
-- tombstone_at, and the next page starts after it: heads between wait for
-- the next pass, which starts from the stream's oldest again). Then each locked head's
-- event is checked to be a tombstone still, older than the cutoff: the
-- mark only nominates (a library older than 00041 publishing over a
-- tombstone head leaves tombstone_at as it was). A head that fails the
-- check gets its mark put right (its event's created_at if a tombstone,
-- else NULL) and comes back with take false, so the page still says where
-- it ended: left as it was, enough such heads filled every batch ahead of
-- the expired ones and the pass found none for good (the rows are locked,
-- so their ctids stay theirs and the fix is a TID scan). Locking in its own
-- CTE keeps the check away from the ORDER BY: beside it, a never-analysed
-- table had the planner sort every expired head after probing each one's
-- event (5,228 buffers for a batch of 500 of 1,000).
WITH t AS MATERIALIZED (
    SELECT h.ctid::tid AS row_id, h.stream, h.key, h.head_offset, h.tombstone_at FROM alkstore.compaction_heads h
    WHERE h.stream = @stream::text AND h.tombstone_at IS NOT NULL AND h.tombstone_at < @cutoff::timestamptz
      AND (h.tombstone_at, h.key) > (@after_at::timestamptz, @after_key::text)
      AND h.head_offset <= @through::bigint
    ORDER BY h.stream, h.tombstone_at, h.key
    LIMIT @batch::integer
    FOR UPDATE OF h SKIP LOCKED
), c AS MATERIALIZED (
    SELECT t.row_id, t.key, t.head_offset, t.tombstone_at, e.payload IS NULL AND e.id IS NOT NULL AS tomb, e.created_at
    FROM t LEFT JOIN alkstore.events e ON e.id = t.head_offset
), fixed AS (
    UPDATE alkstore.compaction_heads h
    SET tombstone_at = (SELECT CASE WHEN c.tomb THEN c.created_at END FROM c WHERE c.row_id = h.ctid::tid)
    WHERE h.ctid::tid = ANY (ARRAY(SELECT c.row_id FROM c WHERE NOT (c.tomb AND c.created_at < @cutoff::timestamptz)))
)
SELECT c.key, c.head_offset::bigint AS head_offset, c.tombstone_at::timestamptz AS tombstone_at,
       COALESCE(c.tomb AND c.created_at < @cutoff::timestamptz, false)::boolean AS take
FROM c ORDER BY c.tombstone_at, c.key;

-- name: DeleteKeyOtherVersions :execrows
-- An expiring tombstone's key: its versions other than the tombstone (the
-- ones before it, and later ones that lost to it by rank) older than the
-- compaction lag's cutoff, found on events_key. Compaction deletes them
-- when its cursor walks them and the tombstone, but not one that was younger
-- than the lag then (a PostgreSQL event's created_at is its transaction's
-- start, so a tombstone can be older than the value before it; or the lag
-- was raised since), nor one a janitor that rolled back held. Deleting the
-- tombstone's head row without them left them with no head row through
-- which anything finds them, and a replay saw the deleted key alive. Rows
-- another statement holds are skipped (KeyHasOtherVersions then keeps the
-- tombstone for a later pass).
DELETE FROM alkstore.events d
WHERE d.id = ANY (ARRAY(
    SELECT x.id FROM alkstore.events x
    WHERE x.stream = @stream::text AND x.key = @key::text AND x.key IS NOT NULL AND x.id <> @head_offset::bigint
      AND x.created_at < @cutoff::timestamptz
    FOR UPDATE OF x SKIP LOCKED));

-- name: KeyHasOtherVersions :one
-- Whether an expiring tombstone's key still has a version other than the
-- tombstone (DeleteKeyOtherVersions left it: younger than the lag, or held):
-- then the tombstone stays, so the key's head row does too.
SELECT EXISTS (SELECT 1 FROM alkstore.events y
               WHERE y.stream = @stream::text AND y.key = @key::text AND y.key IS NOT NULL
                 AND y.id <> @head_offset::bigint) AS remain;

-- name: DeleteHead :exec
DELETE FROM alkstore.compaction_heads WHERE stream = @stream AND key = @key AND head_offset = @head_offset::bigint;

-- name: DeleteEvent :exec
DELETE FROM alkstore.events WHERE id = @id;

-- name: SweepAllExpiredJobs :execrows
-- Expired jobs of every queue end expired: pending ones, and running ones
-- whose claim lapsed. Read from jobs_expirable, the index of a queue's
-- sweep (SweepExpiredJobs), so that no index of its own costs every
-- enqueue and claim (schema 00030 dropped 00029's jobs_expirable_by_time:
-- about 11k of a one-row enqueue's server instructions). qs walks the
-- queues that have jobs which can expire, one index descent each (a loose
-- scan) that also reads the queue's first expiry (the entry it lands on),
-- and for each queue whose first expiry has come the sweep reads one range
-- of it, the jobs already expired, in expiry order, so jobs that expire
-- later are never read; the running jobs still in flight in it are
-- skipped. A queue whose jobs all expire later costs its descent alone
-- (without the first expiry, a second descent found its range empty:
-- about 7 buffers a queue instead of 4 on a pass with nothing expired,
-- which the planner chooses once the table is analysed). The walk stops
-- once it has a batch. The states are named together (state IN), which
-- implies jobs_expirable's predicate and no other index's (see
-- SweepExpiredJobs). Rows another statement holds are skipped; the
-- conditions are checked again on the locked rows. The ids found, then the
-- batch's, are arrays probed on the primary key: as an IN (subquery), an
-- analysed table had the planner hash them against a sequential scan of
-- every job (issue 18, the plan test's "expiring" queue), and an
-- unanalysed one against a bitmap of jobs_ready.
WITH RECURSIVE qs AS (
    (SELECT x.queue, x.expires_at AS first_expiry FROM alkstore.jobs x
     WHERE x.expires_at IS NOT NULL AND x.state IN ('pending', 'running')
     ORDER BY x.queue, x.expires_at LIMIT 1)
    UNION ALL
    SELECT n.queue, n.expires_at FROM qs CROSS JOIN LATERAL (
        SELECT x.queue, x.expires_at FROM alkstore.jobs x
        WHERE x.expires_at IS NOT NULL AND x.state IN ('pending', 'running') AND x.queue > qs.queue
        ORDER BY x.queue, x.expires_at LIMIT 1) AS n
)
UPDATE alkstore.jobs
SET state = 'expired', finished_at = @now::timestamptz, last_error = 'expired', claim_token = NULL, claim_expires_at = NULL
WHERE id = ANY (ARRAY(
    SELECT j.id FROM alkstore.jobs j
    WHERE j.id = ANY (ARRAY(SELECT e.id FROM qs CROSS JOIN LATERAL (
                                SELECT x.id FROM alkstore.jobs x
                                WHERE x.queue = qs.queue AND x.expires_at IS NOT NULL AND x.state IN ('pending', 'running')
                                  AND x.expires_at <= @now::timestamptz
                                  AND (x.state = 'pending' OR x.claim_expires_at <= @now::timestamptz)
                                ORDER BY x.expires_at
                                LIMIT @batch::integer) AS e
                            WHERE qs.first_expiry <= @now::timestamptz
                            LIMIT @batch::integer))
      AND j.expires_at <= @now::timestamptz
      AND (j.state = 'pending' OR (j.state = 'running' AND j.claim_expires_at <= @now::timestamptz))
    LIMIT @batch::integer
    FOR UPDATE OF j SKIP LOCKED));

-- name: DeleteFinishedJobs :execrows
-- Finished jobs past their queue's retention: completed ones older than
-- completed_retention_us (all of them once it is 0 again), dead, cancelled
-- and expired ones older than dead_retention_us (none while it is NULL).
-- Driven from the queues table (a queue without a row keeps no completed
-- jobs and keeps its dead ones): per queue one range of jobs_finished for
-- completed jobs and one per final state for the others (finished_at IS
-- NOT NULL, the partial index's predicate since schema 00039, said for a
-- generic plan, though the comparison on finished_at implies it). (sqlc.arg: sqlc
-- misreads "@now::timestamptz -".) The batch's ids are an array probed on
-- the primary key: as an IN (subquery), a never-analysed jobs table had
-- the planner hash them against a sequential scan of every job (issue 18).
DELETE FROM alkstore.jobs j
WHERE j.id = ANY (ARRAY(
    (SELECT y.id FROM alkstore.queues q CROSS JOIN LATERAL (
         SELECT x.id FROM alkstore.jobs x
         WHERE x.queue = q.name AND x.state = 'completed'
           AND x.finished_at IS NOT NULL
           AND x.finished_at < sqlc.arg(now)::timestamptz - q.completed_retention_us * '1 microsecond'::interval
         LIMIT @batch::integer
         FOR UPDATE SKIP LOCKED) AS y
     LIMIT @batch::integer)
    UNION ALL
    (SELECT y.id FROM alkstore.queues q CROSS JOIN LATERAL (
         SELECT x.id FROM alkstore.jobs x
         WHERE x.queue = q.name AND x.state IN ('cancelled', 'expired', 'dead')
           AND x.finished_at IS NOT NULL
           AND x.finished_at < sqlc.arg(now)::timestamptz - q.dead_retention_us * '1 microsecond'::interval
         LIMIT @batch::integer
         FOR UPDATE SKIP LOCKED) AS y
     WHERE q.dead_retention_us IS NOT NULL
     LIMIT @batch::integer)));

-- Observability (Stats).

-- name: StreamEventStats :many
-- Every stream with events, by a loose scan of events_stream_id (one probe
-- per stream); its newest offset (exact) and its events counted up to @cap
-- (a limit by subquery, see RetentionWindow: an ordered walk stopped at
-- @cap whatever the planner estimates).
WITH RECURSIVE st(stream) AS (
    SELECT min(x.stream) FROM alkstore.events x
    UNION ALL
    SELECT (SELECT min(x.stream) FROM alkstore.events x WHERE x.stream > st.stream)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT st.stream::text AS stream,
       COALESCE((SELECT max(e.id) FROM alkstore.events e WHERE e.stream = st.stream), 0)::bigint AS head_offset,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.events e WHERE e.stream >= st.stream AND e.stream <= st.stream
                              ORDER BY e.stream, e.id LIMIT (SELECT @cap::integer)) c)::bigint AS events
FROM st WHERE st.stream IS NOT NULL ORDER BY st.stream;

-- name: StreamHeadStats :many
-- Every stream with key rows (a loose scan of the primary key); its
-- headless rows counted up to @cap on compaction_heads_headless_at, its
-- keys with a head as its key rows counted on the primary key (index only:
-- the heap is not read) minus those, up to @cap; and its oldest headless
-- row (exact: the first entry of compaction_heads_headless_at).
WITH RECURSIVE st(stream) AS (
    SELECT min(x.stream) FROM alkstore.compaction_heads x
    UNION ALL
    SELECT (SELECT min(x.stream) FROM alkstore.compaction_heads x WHERE x.stream > st.stream)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT st.stream::text AS stream,
       ((SELECT count(*) FROM (SELECT 1 FROM alkstore.compaction_heads h WHERE h.stream = st.stream
                               ORDER BY h.stream, h.key LIMIT (hl.n + @cap::integer)) c) - hl.n)::bigint AS key_count,
       hl.n::bigint AS headless,
       COALESCE((SELECT min(h.headless_at) FROM alkstore.compaction_heads h
                 WHERE h.stream = st.stream AND h.headless_at IS NOT NULL), @now::timestamptz)::timestamptz AS oldest_headless
FROM st
CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM alkstore.compaction_heads h
                                               WHERE h.stream = st.stream AND h.headless_at IS NOT NULL
                                               ORDER BY h.stream, h.headless_at LIMIT @cap::integer) c) hl
WHERE st.stream IS NOT NULL ORDER BY st.stream;

-- name: ConsumerLags :many
-- Lag: the consumer's events still unread, counted up to @cap (a limit by
-- subquery, see RetentionWindow).
SELECT o.stream, o.consumer, o.committed_offset,
       (SELECT count(*) FROM (SELECT 1 FROM alkstore.events e
                              WHERE (e.stream, e.id) > (o.stream, o.committed_offset) AND e.stream <= o.stream
                              ORDER BY e.stream, e.id LIMIT (SELECT @cap::integer)) c)::bigint AS unread
FROM alkstore.consumer_offsets o ORDER BY o.stream, o.consumer;

-- name: StreamsWithHeadless :many
-- A loose scan of compaction_heads_headless_at: one probe per stream.
WITH RECURSIVE st(stream) AS (
    SELECT min(x.stream) FROM alkstore.compaction_heads x WHERE x.headless_at IS NOT NULL
    UNION ALL
    SELECT (SELECT min(x.stream) FROM alkstore.compaction_heads x
            WHERE x.headless_at IS NOT NULL AND x.stream > st.stream)
    FROM st WHERE st.stream IS NOT NULL
)
SELECT st.stream::text AS stream, COALESCE(s.headless_ttl_us, 3600000000)::bigint AS headless_ttl_us
FROM st LEFT JOIN alkstore.streams s ON s.name = st.stream
WHERE st.stream IS NOT NULL;

-- name: CompactedStreams :many
SELECT name FROM alkstore.streams WHERE compacted ORDER BY name;

-- name: JobQueues :many
-- Every queue with pending, running or finished jobs: a loose scan of each
-- of their partial indexes (one probe per queue).
WITH RECURSIVE p AS (
    SELECT min(x.queue) AS queue FROM alkstore.jobs x WHERE x.state = 'pending'
    UNION ALL
    SELECT (SELECT min(x.queue) FROM alkstore.jobs x WHERE x.state = 'pending' AND x.queue > p.queue)
    FROM p WHERE p.queue IS NOT NULL
), r AS (
    SELECT min(x.queue) AS queue FROM alkstore.jobs x WHERE x.state = 'running'
    UNION ALL
    SELECT (SELECT min(x.queue) FROM alkstore.jobs x WHERE x.state = 'running' AND x.queue > r.queue)
    FROM r WHERE r.queue IS NOT NULL
), d AS (
    SELECT min(x.queue) AS queue FROM alkstore.jobs x WHERE x.state IN ('completed', 'cancelled', 'expired', 'dead') AND x.finished_at IS NOT NULL
    UNION ALL
    SELECT (SELECT min(x.queue) FROM alkstore.jobs x WHERE x.state IN ('completed', 'cancelled', 'expired', 'dead') AND x.finished_at IS NOT NULL AND x.queue > d.queue)
    FROM d WHERE d.queue IS NOT NULL
)
SELECT queue::text FROM (SELECT queue FROM p UNION SELECT queue FROM r UNION SELECT queue FROM d) q
WHERE queue IS NOT NULL ORDER BY queue;

-- name: PartitionsDenied :one
-- Whether this role may not create or drop event partitions (only the
-- owner of alkstore.events, or a member of its role, may): retention and
-- trims then delete events row by row.
SELECT (NOT pg_has_role(c.relowner, 'USAGE'))::boolean AS denied
FROM pg_catalog.pg_class c WHERE c.oid = 'alkstore.events'::regclass;
