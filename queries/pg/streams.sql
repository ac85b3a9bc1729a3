-- Streams: durable, ordered events with per-consumer offsets (PostgreSQL).

-- name: PublishEvent :one
-- A plain VALUES row with no NOTIFY: the usual publish, whose wake the
-- gate already sent or owes (store/notify_pg.go); one that carries a wake
-- runs PublishEventNotify, a Tx's first publish PublishEventWithTxid. The
-- transaction id is assigned before nextval draws the offset; the settled
-- horizon (SettledSnapshot) depends on that order. The offset's CASE calls
-- pg_current_xact_id() in its condition, which a CASE evaluates before its
-- result (the id is never NULL, so the result is always nextval), and txid
-- reads the id that call assigned. headers is NULL (none) or the JSON text
-- of the event's headers (see EnqueueJob). The materialized CTE the
-- VALUES row replaced cost a publish a CTE scan and its executor setup
-- (callgrind, commit included: 190.1k -> 177.5k instructions); the
-- NOTIFY's CASE in every statement, notifying or not, and NULLIF(headers,
-- '') 6.6k of 120.2k (callgrind on the backend, w42: this form 113.6k).
INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
VALUES (CASE WHEN pg_current_xact_id() IS NULL THEN NULL ELSE nextval('alkstore.event_offset_seq') END,
        @stream::text, sqlc.narg(key)::text, sqlc.narg(payload)::bytea, pg_current_xact_id(),
        sqlc.narg(headers)::text::jsonb)
RETURNING id;

-- name: PublishEventNotify :one
-- PublishEvent carrying a wake, which is sent with NOTIFY, so only if the
-- event commits; wake is never empty (the store runs PublishEvent then).
-- It rides in the headers expression as in EnqueueJobNotify (pg_notify
-- returns void, never NULL, so headers is always the argument).
-- Otherwise PublishEvent's statement (db/pg/publish_twins_test.go).
INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
VALUES (CASE WHEN pg_current_xact_id() IS NULL THEN NULL ELSE nextval('alkstore.event_offset_seq') END,
        @stream::text, sqlc.narg(key)::text, sqlc.narg(payload)::bytea, pg_current_xact_id(),
        CASE WHEN pg_notify('alkstore', @wake::text) IS NULL THEN NULL ELSE sqlc.narg(headers)::text::jsonb END)
RETURNING id;

-- name: PublishEventWithTxid :one
-- PublishEventNotify, returning the transaction id too, and sending its
-- NOTIFY only when wake is not empty (a Tx's first publish, with or
-- without a wake, runs it; one statement a transaction): it gives the
-- store the id of a transaction it began, which proves a horizon
-- candidate for what was drawn before that Tx began (store/horizon.go,
-- pgOps.offer). Only that publish needs it (pgOps.offering): the extra
-- result column cost every publish about 3% of its server instructions
-- (callgrind, one auto-commit publish: 127.4k with it, 123.9k without).
INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
VALUES (CASE WHEN pg_current_xact_id() IS NULL THEN NULL ELSE nextval('alkstore.event_offset_seq') END,
        @stream::text, sqlc.narg(key)::text, sqlc.narg(payload)::bytea, pg_current_xact_id(),
        CASE WHEN @wake::text <> '' AND pg_notify('alkstore', @wake::text) IS NULL THEN NULL ELSE sqlc.narg(headers)::text::jsonb END)
RETURNING id, txid;

-- name: PublishEvents :many
-- Many events in one statement; offsets follow the input order; one wake;
-- all or none (see EnqueueJobs).
-- Keyed events upsert their keys' heads in the same statement: per key the
-- batch's newest offset (rank 0, schema version 1), by the winner rule (see
-- compaction.sql). The head rows are written in key order, so concurrent
-- batches that share keys lock them in one order and never deadlock: byte
-- order (COLLATE "C", the heads' key column's since 00046; events.key has
-- the database's), the order SQLite's and Go's sort take.
WITH tx AS MATERIALIZED (
    SELECT pg_current_xact_id() AS txid,
           CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
),
ins AS (
    INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
    SELECT nextval('alkstore.event_offset_seq'), @stream::text,
           CASE WHEN u.keyed THEN u.key END, u.payload, tx.txid, NULLIF(u.headers, '')::jsonb
    FROM tx, (SELECT unnest(@keyed::boolean[]) AS keyed,
                     unnest(@keys::text[]) AS key,
                     unnest(@payloads::bytea[]) AS payload,
                     unnest(@headers::text[]) AS headers) AS u
    RETURNING id, key, payload IS NULL AS tomb
),
heads AS (
    INSERT INTO alkstore.compaction_heads AS h (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at, tombstone_at)
    SELECT @stream::text, ins.key, max(ins.id), 1, 0, @now::timestamptz, @now::timestamptz, NULL,
           CASE WHEN max(ins.id) FILTER (WHERE ins.tomb) = max(ins.id) THEN now() END
    FROM ins
    WHERE ins.key IS NOT NULL
    GROUP BY ins.key
    ORDER BY ins.key COLLATE "C"
    ON CONFLICT (stream, key) DO UPDATE
    SET head_offset = EXCLUDED.head_offset, schema_version = EXCLUDED.schema_version,
        compaction_rank = EXCLUDED.compaction_rank, updated_at = EXCLUDED.updated_at, headless_at = NULL,
        tombstone_at = EXCLUDED.tombstone_at
    WHERE h.head_offset IS NULL
       OR (EXCLUDED.compaction_rank, EXCLUDED.head_offset) > (h.compaction_rank, h.head_offset)
)
SELECT ins.id FROM ins
WHERE alkstore.all_inserted((SELECT count(*) FROM ins), cardinality(@payloads::bytea[]));

-- name: PublishEventsWithTxid :many
-- PublishEvents, every row carrying the transaction id too, as
-- PublishEventWithTxid returns it (a Tx's first publish).
WITH tx AS MATERIALIZED (
    SELECT pg_current_xact_id() AS txid,
           CASE WHEN @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
),
ins AS (
    INSERT INTO alkstore.events (id, stream, key, payload, txid, headers)
    SELECT nextval('alkstore.event_offset_seq'), @stream::text,
           CASE WHEN u.keyed THEN u.key END, u.payload, tx.txid, NULLIF(u.headers, '')::jsonb
    FROM tx, (SELECT unnest(@keyed::boolean[]) AS keyed,
                     unnest(@keys::text[]) AS key,
                     unnest(@payloads::bytea[]) AS payload,
                     unnest(@headers::text[]) AS headers) AS u
    RETURNING id, key, payload IS NULL AS tomb, txid
),
heads AS (
    INSERT INTO alkstore.compaction_heads AS h (stream, key, head_offset, schema_version, compaction_rank, created_at, updated_at, headless_at, tombstone_at)
    SELECT @stream::text, ins.key, max(ins.id), 1, 0, @now::timestamptz, @now::timestamptz, NULL,
           CASE WHEN max(ins.id) FILTER (WHERE ins.tomb) = max(ins.id) THEN now() END
    FROM ins
    WHERE ins.key IS NOT NULL
    GROUP BY ins.key
    ORDER BY ins.key COLLATE "C"
    ON CONFLICT (stream, key) DO UPDATE
    SET head_offset = EXCLUDED.head_offset, schema_version = EXCLUDED.schema_version,
        compaction_rank = EXCLUDED.compaction_rank, updated_at = EXCLUDED.updated_at, headless_at = NULL,
        tombstone_at = EXCLUDED.tombstone_at
    WHERE h.head_offset IS NULL
       OR (EXCLUDED.compaction_rank, EXCLUDED.head_offset) > (h.compaction_rank, h.head_offset)
)
SELECT ins.id, ins.txid FROM ins
WHERE alkstore.all_inserted((SELECT count(*) FROM ins), cardinality(@payloads::bytea[]));

-- name: SettledSnapshot :one
-- What the settled horizon needs from this statement's snapshot: its xmin;
-- its xmax and age(xmax), from which the caller derives the next unassigned
-- transaction id as of a moment after the snapshot (age() measures from
-- ReadNextTransactionId() in a transaction without an id; xmax alone is
-- latestCompletedXid + 1, which running transactions can exceed); the
-- newest offset the snapshot sees that this transaction did not write; and
-- whether this transaction holds an id (then age() measures from that id);
-- and the stored proven candidate (settled_candidate's one row, read by one
-- join; 0, 0 while none is stored).
SELECT pg_snapshot_xmin(snap)::text::bigint AS xmin,
       pg_snapshot_xmax(snap)::text::bigint AS xmax,
       age(pg_snapshot_xmax(snap)::xid)::bigint AS xmax_age,
       COALESCE((SELECT max(e.id) FROM alkstore.events e
                 WHERE e.txid IS DISTINCT FROM pg_current_xact_id_if_assigned()), 0)::bigint AS visible_head,
       (pg_current_xact_id_if_assigned() IS NOT NULL)::boolean AS has_xid,
       COALESCE(p.head, 0)::bigint AS proven_head,
       COALESCE(p.next, 0)::bigint AS proven_next
FROM pg_current_snapshot() AS snap
LEFT JOIN alkstore.settled_candidate p ON p.one;

-- name: ReadEvents :many
-- Events after an offset, cut at the settled horizon inside the statement,
-- in one round trip: no event above the horizon leaves the server. A
-- transaction that has written to the stream sees its own uncommitted
-- events too, and every event visible to it up to its last own one (the
-- cut, upto, is the greater of the horizon and that offset; SQLite's read
-- in a writing transaction returns the same), so its own offset, saved as
-- a consumer's, skips no committed event below it. Its last own event
-- above the horizon is found on events_stream_id's range of the stream
-- above the horizon, walked up from the horizon (w): a walk down from the
-- stream's newest event, ORDER BY ... DESC LIMIT 1, does not stop at the
-- horizon (a backward scan stops on the row comparison's first column
-- only) and read the plan test's whole 200k-event stream (773 buffers).
-- snap holds SettledSnapshot's figures of this statement's own snapshot
-- (the one its page reads in; pg_current_snapshot() is the statement's
-- snapshot however often it is called). The horizon is the greatest head
-- among the caller's candidates (@nexts, @heads: store/horizon.go) that
-- this snapshot's xmin proves, @floor (a head the caller knows every later
-- snapshot proves), and, when @learn, the snapshot's own candidate when it
-- settles in itself (nothing ran). The candidates ascend in next and in
-- head (horizon.proof), so the greatest proven head is the one after the
-- last next <= xmin: width_bucket counts those (a binary search; 0, an
-- index that yields NULL, when there are none). The first row carries the
-- snapshot's figures and the horizon, so the caller learns the candidate
-- and knows whether committed events wait above the horizon: it is cut's
-- row, id 0 (offsets start at 1) and NULL or empty event columns. The
-- page's events follow, their snapshot NULL: the first branch of a UNION
-- ALL, whose Append runs its branches in order (never a Parallel Append:
-- the CTE scan is parallel-restricted). The stream is the caller's: no
-- row sends it. The figures go in one bytea column, snapshot, built once a
-- statement from their binary send forms: xmin, xmax, age(xmax) and the
-- visible head (8 bytes each), whether the transaction holds an id (1
-- byte), the horizon (8); none is NULL. As six columns, sent again in every
-- row, they cost the server about 200 ns an event of a page of 1,000 (a
-- quarter of its time) and the client their decoding; as one column sent
-- in every row, still about 100 ns an event of the server's (a bytea
-- copied and sent a row) and 41 bytes. concat_ws into text instead looked
-- up every argument's output function each statement: a few microseconds
-- a read. Inside cut, subqueries are kept apart by OFFSET 0 instead of
-- materialized CTEs and a function scan (about 50k fewer instructions a
-- read, callgrind; the plan is the same). Every function in snap is
-- stable: OFFSET 0 alone keeps the planner from copying them, and the
-- visible head's sublink, into every reference; h's keeps the horizon's
-- expression from being compiled twice (README, Performance: h pulled up
-- cost a read 4k more).
-- The page reads its bounds as initplans (once a statement: the cut, a
-- CTE scan; the stream, @after and @lim, a Result each), so a page row
-- passes an Index Scan, a Limit and the Append and nothing else: the head row joined to the page as the page's outer
-- row (a LEFT JOIN LATERAL to VALUES (true), (false), the head's page
-- LIMIT 0) put a Nested Loop, a CASE and two COALESCEs on every row, and
-- a page ordered by (stream, id) made the branch a Subquery Scan that
-- drops the sort's stream column (an Append and a Subquery Scan a row).
-- The page's stream is bounded three times, "stream = @stream", ">=" and
-- "<=": the btree keeps the equality alone (the bounds it implies are
-- redundant), one comparison of the stream an index entry where ">=" and
-- "<=" alone took two (callgrind, server instructions a page of a replay
-- in pages of 1,000: 4.51M for the joined form, 4.24M with the equality
-- added to it; this statement 3.89M; the bench's raw SQL 3.43M; a read of
-- 1 event 432k -> 421k). The range is for the planner: with the equality
-- alone, and ORDER BY id (or stream, id, which the equality reduces to
-- id; id alone leaves no sort column to drop), a plan may walk
-- events_pkey in id order and filter every other stream's rows (the plan
-- test's small stream after the big one: 3,030 buffers, analysed, custom
-- and generic, where this reads 8-10); the range's estimate (0.5% of the
-- rows) keeps events_stream_id the cheaper path in every plan. The index
-- scan starts at (@stream, @after) from the bound on id (a row comparison
-- (stream, id) > (@stream, @after), as the page once had, starts it there
-- too, but costs the scan two comparisons more an entry). The plain
-- bounds on id also let PostgreSQL skip every partition below @after and
-- above the cut (the horizon, or the transaction's last own event above
-- it), in custom and generic plans alike (at run time: the bounds are
-- parameters the initplans set).
-- With two bounds on id, one of them unknown when planning, the planner
-- estimates the primary key's range as narrow (0.5% of the rows): the
-- stream's bounds must be as unknown, or a custom plan, which knows how
-- big the stream is, reads it all by the primary key or a bitmap and sorts
-- it. So @stream and @after reach the page through initplans of their
-- own, like the horizon, and @lim too: a custom plan that knew the
-- limit (100) and estimated fewer rows in the range sorted the page's
-- partitions instead of reading them in order (TestReadsPrunePartitions:
-- every row of the stream up to the cut read, then sorted); an unknown
-- limit is taken as a tenth of the rows, and the partitions are read in
-- order, the first limit's worth only. cut holds only what the first row
-- and the page read from it (the snapshot column and the cut;
-- ReadEventsFromConsumer's also the offset): a CTE scan is set up with
-- cut's whole row type and projects its column out of it, and when the
-- stream and @after came through cut too, in CTE scans of their own, the
-- read of one event outside a transaction cost 241.5k instructions
-- against 228.1k (callgrind on the backend).
-- The visible head is looked for at or above @floor only, and is @floor
-- when no visible event is there (max(newest, @floor)): every offset up to
-- @floor is settled, its owners' ids below the next of the floor's proof,
-- which this snapshot's xmin, hence its next, reaches (outside a
-- transaction; inside one @floor is 0), so that head pairs with the
-- snapshot's next into a valid candidate, and nothing visible above @floor
-- is left out. Unbounded, the walk down events_pkey for the newest row
-- checked every entry of the newest leaf page first (PostgreSQL 15 reads a
-- page's matching entries at once): callgrind on the backend, a read of one
-- event beside 445 events 336.4k -> 292.0k instructions. The bound also
-- prunes the partitions below @floor in generic plans. The newest is the
-- first row of that walk (ORDER BY id DESC LIMIT 1), not max(id): the
-- planner turns max() into the same walk but under a Result and a second
-- initplan of its own, which the executor set up at every read (callgrind
-- on the backend, a read of one event 247.9k -> 241.5k instructions).
WITH cut AS MATERIALIZED (
    SELECT int8send(h.xmin) || int8send(h.xmax) || int8send(h.xmax_age) || int8send(h.visible_head)
               || boolsend(h.own IS NOT NULL) || int8send(h.horizon) AS snapshot,
           GREATEST(h.horizon, CASE WHEN h.own IS NOT NULL THEN
               (SELECT max(w.id) FROM (
                    SELECT o.id FROM alkstore.events o
                    WHERE (o.stream, o.id) > (h.stream, h.horizon) AND o.stream >= h.stream AND o.stream <= h.stream
                      AND o.id > h.horizon AND o.txid = h.own
                    ORDER BY o.stream, o.id
                    OFFSET 0) AS w) END)::bigint AS upto
    FROM (
    SELECT snap.xmin, snap.xmax, snap.xmax_age, snap.visible_head, snap.own, @stream::text AS stream,
           GREATEST(@floor::bigint, (@heads::bigint[])[width_bucket(snap.xmin, @nexts::bigint[])],
                    CASE WHEN @learn::boolean AND snap.own IS NULL AND snap.xmax_age >= 0 AND snap.xmax_age < 2147483647
                              AND snap.xmax + snap.xmax_age <= snap.xmin
                         THEN snap.visible_head END)::bigint AS horizon
    FROM (
        SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
               pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
               age(pg_snapshot_xmax(pg_current_snapshot())::xid)::bigint AS xmax_age,
               COALESCE((SELECT v.id FROM alkstore.events v
                         WHERE v.id >= @floor::bigint AND v.txid IS DISTINCT FROM pg_current_xact_id_if_assigned()
                         ORDER BY v.id DESC LIMIT 1),
                        @floor::bigint)::bigint AS visible_head,
               pg_current_xact_id_if_assigned() AS own
        OFFSET 0
    ) AS snap
    OFFSET 0
    ) AS h
)
SELECT c.snapshot::bytea AS snapshot, 0::bigint AS id, NULL::text AS key, NULL::bytea AS payload,
       'epoch'::timestamptz AS created_at, NULL::jsonb AS headers
FROM cut c
UNION ALL
(SELECT NULL::bytea, e.id, e.key, e.payload, e.created_at, e.headers
 FROM alkstore.events e
 WHERE e.stream = (SELECT @stream::text)
   AND e.stream >= (SELECT @stream::text) AND e.stream <= (SELECT @stream::text)
   AND e.id > (SELECT @after::bigint)
   AND e.id <= (SELECT cut.upto FROM cut)
 ORDER BY e.id
 LIMIT (SELECT @lim::integer));

-- name: ReadEventsOutsideTx :many
-- ReadEvents for a read outside a transaction (every receiver's, and
-- ReadSince's): it runs alone, auto-commit, and takes no transaction id,
-- so it has no events of its own and the page is cut at the horizon
-- (upto). ReadEvents's lookup of the transaction's last own event is a
-- SubPlan that never runs then, but PostgreSQL sets it up at every run (an
-- Aggregate and an index scan of every partition): callgrind on the
-- backend, a read of one event 292.0k -> 247.3k instructions (the bare
-- page's index scan 78.7k). Nor has it a transaction id
-- (pg_current_xact_id_if_assigned() is NULL): the snapshot's byte for it
-- is false, the horizon's condition that it is NULL holds, and every
-- event's txid (NOT NULL) is distinct from it, so the walk for the visible
-- head has no filter; a read of one event about 229k -> 221k instructions
-- (callgrind on the backend; 346.6k-346.9k -> 339.2k-339.8k with the
-- publish before it). Otherwise ReadEvents's statement
-- (db/pg/read_twins_test.go).
WITH cut AS MATERIALIZED (
    SELECT int8send(h.xmin) || int8send(h.xmax) || int8send(h.xmax_age) || int8send(h.visible_head)
               || boolsend(false) || int8send(h.horizon) AS snapshot,
           h.horizon AS upto
    FROM (
    SELECT snap.xmin, snap.xmax, snap.xmax_age, snap.visible_head, @stream::text AS stream,
           GREATEST(@floor::bigint, (@heads::bigint[])[width_bucket(snap.xmin, @nexts::bigint[])],
                    CASE WHEN @learn::boolean AND snap.xmax_age >= 0 AND snap.xmax_age < 2147483647
                              AND snap.xmax + snap.xmax_age <= snap.xmin
                         THEN snap.visible_head END)::bigint AS horizon
    FROM (
        SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
               pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
               age(pg_snapshot_xmax(pg_current_snapshot())::xid)::bigint AS xmax_age,
               COALESCE((SELECT v.id FROM alkstore.events v
                         WHERE v.id >= @floor::bigint
                         ORDER BY v.id DESC LIMIT 1),
                        @floor::bigint)::bigint AS visible_head
        OFFSET 0
    ) AS snap
    OFFSET 0
    ) AS h
)
SELECT c.snapshot::bytea AS snapshot, 0::bigint AS id, NULL::text AS key, NULL::bytea AS payload,
       'epoch'::timestamptz AS created_at, NULL::jsonb AS headers
FROM cut c
UNION ALL
(SELECT NULL::bytea, e.id, e.key, e.payload, e.created_at, e.headers
 FROM alkstore.events e
 WHERE e.stream = (SELECT @stream::text)
   AND e.stream >= (SELECT @stream::text) AND e.stream <= (SELECT @stream::text)
   AND e.id > (SELECT @after::bigint)
   AND e.id <= (SELECT cut.upto FROM cut)
 ORDER BY e.id
 LIMIT (SELECT @lim::integer));

-- name: ReadEventsFromConsumer :many
-- As ReadEvents, after the consumer's saved offset (snapshot also carries
-- it, 8 bytes after the horizon: a read that goes on reads on with
-- ReadEvents). The offset reaches the
-- page through cut like @after in ReadEvents: a plain bound on id from the
-- subquery beside the stream's bounds, in a custom plan on tables
-- autovacuum had not analysed yet, read the whole stream through a bitmap
-- and sorted it (the plan test's never-analysed case) when the stream was
-- a constant; as a parameter the initplan sets it prunes partitions below
-- the offset like ReadEvents.
WITH cut AS MATERIALIZED (
    SELECT int8send(h.xmin) || int8send(h.xmax) || int8send(h.xmax_age) || int8send(h.visible_head)
               || boolsend(h.own IS NOT NULL) || int8send(h.horizon) || int8send(h.after) AS snapshot,
           GREATEST(h.horizon, CASE WHEN h.own IS NOT NULL THEN
               (SELECT max(w.id) FROM (
                    SELECT o.id FROM alkstore.events o
                    WHERE (o.stream, o.id) > (h.stream, h.horizon) AND o.stream >= h.stream AND o.stream <= h.stream
                      AND o.id > h.horizon AND o.txid = h.own
                    ORDER BY o.stream, o.id
                    OFFSET 0) AS w) END)::bigint AS upto,
           h.after
    FROM (
    SELECT snap.xmin, snap.xmax, snap.xmax_age, snap.visible_head, snap.own, @stream::text AS stream,
           COALESCE((SELECT o.committed_offset FROM alkstore.consumer_offsets o
                     WHERE o.stream = @stream::text AND o.consumer = @consumer::text), 0)::bigint AS after,
           GREATEST(@floor::bigint, (@heads::bigint[])[width_bucket(snap.xmin, @nexts::bigint[])],
                    CASE WHEN @learn::boolean AND snap.own IS NULL AND snap.xmax_age >= 0 AND snap.xmax_age < 2147483647
                              AND snap.xmax + snap.xmax_age <= snap.xmin
                         THEN snap.visible_head END)::bigint AS horizon
    FROM (
        SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
               pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
               age(pg_snapshot_xmax(pg_current_snapshot())::xid)::bigint AS xmax_age,
               COALESCE((SELECT v.id FROM alkstore.events v
                         WHERE v.id >= @floor::bigint AND v.txid IS DISTINCT FROM pg_current_xact_id_if_assigned()
                         ORDER BY v.id DESC LIMIT 1),
                        @floor::bigint)::bigint AS visible_head,
               pg_current_xact_id_if_assigned() AS own
        OFFSET 0
    ) AS snap
    OFFSET 0
    ) AS h
)
SELECT c.snapshot::bytea AS snapshot, 0::bigint AS id, NULL::text AS key, NULL::bytea AS payload,
       'epoch'::timestamptz AS created_at, NULL::jsonb AS headers
FROM cut c
UNION ALL
(SELECT NULL::bytea, e.id, e.key, e.payload, e.created_at, e.headers
 FROM alkstore.events e
 WHERE e.stream = (SELECT @stream::text)
   AND e.stream >= (SELECT @stream::text) AND e.stream <= (SELECT @stream::text)
   AND e.id > (SELECT cut.after FROM cut)
   AND e.id <= (SELECT cut.upto FROM cut)
 ORDER BY e.id
 LIMIT (SELECT @lim::integer));

-- name: SaveOffset :execrows
-- Monotone: a lower save leaves the stored offset as it is. An offset
-- above the newest one drawn for any event (the sequence's last value,
-- never lower than an offset a reader was given, whether its event was
-- trimmed since or not) is not saved: no event has it yet, and it would
-- skip the stream's next events (attack59 F1). @accept_upto raises that
-- bound: to the offset for one a reader was given (a receiver's), or for
-- one an event has at or above it (OffsetBounds), since a row imported or
-- copied without its sequence (logical replication carries none) is
-- delivered (review59b F5). The statement names no events table: a
-- generic plan locks every relation it names, partitions included, each
-- execution, whether or not a subquery on it runs (with the probe of
-- events in it and 40 partitions a save took 80 locks, 64 of them outside
-- the fast path, and 2.4-3.9 times the server CPU: review59c F1). 0 rows:
-- a save that moved nothing, or that refusal; OffsetBounds, run only
-- then, tells which, so a save that moves the offset stays this one
-- statement.
INSERT INTO alkstore.consumer_offsets (stream, consumer, committed_offset)
SELECT @stream::text, @consumer::text, @committed_offset::bigint
WHERE @committed_offset::bigint <= GREATEST(COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'::regclass), 0), @accept_upto::bigint)
ON CONFLICT (stream, consumer) DO UPDATE
SET committed_offset = GREATEST(alkstore.consumer_offsets.committed_offset, EXCLUDED.committed_offset),
    updated_at = now()
WHERE alkstore.consumer_offsets.committed_offset < EXCLUDED.committed_offset;

-- name: ResetOffset :execrows
-- Sets the consumer's offset to exactly @committed_offset, lower or higher
-- (a deliberate rewind or skip, unlike the monotone SaveOffset), of any
-- stream, one nothing was published to yet included (a consumer placed
-- at deploy time). A non-empty wake tells Store.Changes elsewhere, on
-- commit (SaveOffset, a consumer's progress, carries none: it is too
-- frequent to be worth one); only when the offset is stored: the bound
-- is decided first (b) and gates the NOTIFY (review59b F4); @accept_upto
-- as SaveOffset's. 0 rows: refused, as SaveOffset refuses; OffsetBounds
-- says why.
WITH b AS MATERIALIZED (
    SELECT @committed_offset::bigint <= GREATEST(COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'::regclass), 0), @accept_upto::bigint) AS ok
), w AS MATERIALIZED (
    SELECT b.ok, CASE WHEN b.ok AND @wake::text <> '' THEN pg_notify('alkstore', @wake::text)::text END AS woke
    FROM b
)
INSERT INTO alkstore.consumer_offsets (stream, consumer, committed_offset)
SELECT @stream::text, @consumer::text, @committed_offset::bigint
FROM w
WHERE w.ok
ON CONFLICT (stream, consumer) DO UPDATE
SET committed_offset = EXCLUDED.committed_offset, updated_at = now();

-- name: OffsetBounds :one
-- Why SaveOffset or ResetOffset stored nothing: the consumer's offset (-1
-- when it has none) and the newest offset drawn for any event (their bound:
-- the sequence's last value; -1 when this role may not read the sequence,
-- whose pg_sequence_last_value is then NULL on some releases). It names no
-- events relation, so that a lower or equal save's plan locks none
-- (FirstEventFrom does, only for an offset past the sequence).
SELECT COALESCE((SELECT o.committed_offset FROM alkstore.consumer_offsets o
                 WHERE o.stream = @stream::text AND o.consumer = @consumer::text), -1)::bigint AS committed_offset,
       (CASE WHEN has_sequence_privilege('alkstore.event_offset_seq', 'SELECT, USAGE')
             THEN COALESCE(pg_sequence_last_value('alkstore.event_offset_seq'::regclass), 0)
             ELSE -1 END)::bigint AS newest_offset;

-- name: FirstEventFrom :one
-- The first event id at or above @committed_offset, 0 for none: for an
-- offset past the sequence (OffsetBounds), which a row imported without
-- the sequence can have; the save or reset then goes again with the bound
-- raised to the offset (@accept_upto). One descent of the primary key of
-- each partition the offset does not prune.
SELECT COALESCE((SELECT e.id FROM alkstore.events e WHERE e.id >= @committed_offset::bigint ORDER BY e.id LIMIT 1), 0)::bigint AS id;

-- name: StreamExists :one
-- Whether anything of the stream is stored: an event, a head (headless
-- ones too), settings, a consumer's offset or a consumer group (the
-- operator tools' check before a reset, not the library's). A probe is a
-- scalar subquery ordered by its index, not an EXISTS, whose ORDER BY and
-- LIMIT the planner drops: PostgreSQL's generic plan then read
-- compaction_heads whole for a stream it does not hold.
SELECT ((SELECT x.stream FROM alkstore.consumer_offsets x WHERE x.stream = @stream::text ORDER BY x.stream, x.consumer LIMIT 1) IS NOT NULL
       OR EXISTS (SELECT 1 FROM alkstore.streams s WHERE s.name = @stream::text)
       OR (SELECT h.stream FROM alkstore.compaction_heads h WHERE h.stream = @stream::text ORDER BY h.stream, h.key LIMIT 1) IS NOT NULL
       OR (SELECT e.stream FROM alkstore.events e WHERE e.stream = @stream::text ORDER BY e.stream, e.id LIMIT 1) IS NOT NULL
       OR (SELECT g.stream FROM alkstore.consumer_groups g WHERE g.stream = @stream::text ORDER BY g.stream, g.grp LIMIT 1) IS NOT NULL)::boolean AS known;

-- name: GetOffset :one
SELECT COALESCE((SELECT committed_offset FROM alkstore.consumer_offsets
                 WHERE stream = @stream AND consumer = @consumer), 0)::bigint AS committed_offset;

-- name: UnheadTrimmed :exec
-- Runs before TrimStream, in its transaction. On a stream that is not
-- compacted, the heads whose events the trim deletes become headless, so
-- the key takes its next value by the winner rule instead of keeping a head
-- that no longer exists. Rows are locked in key order (see PublishEvents).
UPDATE alkstore.compaction_heads h
SET head_offset = NULL, schema_version = 0, compaction_rank = 0, updated_at = @now::timestamptz, headless_at = @now::timestamptz,
    tombstone_at = NULL
WHERE h.head_offset <= @horizon::bigint
  AND (h.stream, h.key) IN (
    SELECT x.stream, x.key FROM alkstore.compaction_heads x
    WHERE x.stream = @stream::text AND x.head_offset <= @horizon::bigint
      AND NOT EXISTS (SELECT 1 FROM alkstore.streams s WHERE s.name = x.stream AND s.compacted)
    ORDER BY x.key
    FOR UPDATE OF x);

-- name: TrimStream :execrows
-- Current heads are spared: those of a compacted stream, and any that
-- became a head after UnheadTrimmed ran. A head row never points at a
-- deleted event.
DELETE FROM alkstore.events e
WHERE e.stream = @stream::text AND e.id <= @horizon::bigint
  AND NOT EXISTS (SELECT 1 FROM alkstore.compaction_heads h
                  WHERE h.stream = e.stream AND h.key = e.key AND h.head_offset = e.id);
