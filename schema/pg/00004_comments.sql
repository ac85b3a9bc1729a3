-- Comments on every alkstore table, column and the offset sequence, so that
-- a DBA reading the live schema (\d+, \dt+, \ds+) learns what each is for.
-- Times are timestamptz; durations in alkstore.streams are microseconds.

-- +goose Up
COMMENT ON SCHEMA alkstore IS 'alkstore: durable streams, queues, schedules and notifications of the application, managed by the alkstore library (goose history in alkstore.goose_db_version)';

COMMENT ON SEQUENCE alkstore.event_offset_seq IS 'Stream offsets (events.id), shared by every stream; CACHE 1 so that ids are drawn in real-time order across sessions';

COMMENT ON TABLE alkstore.events IS 'Stream events, one row per published message; id is the offset; deleted by trim, retention and compaction';
COMMENT ON COLUMN alkstore.events.id IS 'Offset: from alkstore.event_offset_seq, increasing in publish order across all streams';
COMMENT ON COLUMN alkstore.events.stream IS 'Stream name';
COMMENT ON COLUMN alkstore.events.key IS 'Compaction key (NULL: an unkeyed event); each key''s current value is named by compaction_heads';
COMMENT ON COLUMN alkstore.events.payload IS 'Message body as the application gave it (NULL: none; on a keyed event, a tombstone that deletes the key)';
COMMENT ON COLUMN alkstore.events.txid IS 'Top-level transaction id of the publisher, taken before the id was drawn: lets readers wait for older transactions and a transaction read its own events';
COMMENT ON COLUMN alkstore.events.created_at IS 'When the event was published';

COMMENT ON TABLE alkstore.consumer_offsets IS 'Saved read positions: one row per (stream, consumer)';
COMMENT ON COLUMN alkstore.consumer_offsets.stream IS 'Stream name';
COMMENT ON COLUMN alkstore.consumer_offsets.consumer IS 'Consumer name, chosen by the application';
COMMENT ON COLUMN alkstore.consumer_offsets.committed_offset IS 'Offset of the last event the consumer has processed; it resumes after it';
COMMENT ON COLUMN alkstore.consumer_offsets.updated_at IS 'When the offset was last saved';

COMMENT ON TABLE alkstore.streams IS 'Per-stream settings; a stream without a row uses the defaults';
COMMENT ON COLUMN alkstore.streams.name IS 'Stream name';
COMMENT ON COLUMN alkstore.streams.compacted IS 'Compacted: the janitor deletes events a newer value of their key superseded, and trims and retention never delete a key''s current head';
COMMENT ON COLUMN alkstore.streams.headless_ttl_us IS 'Microseconds a headless compaction_heads row (a lock without a value) is kept unused before the janitor deletes it';
COMMENT ON COLUMN alkstore.streams.retention_us IS 'Microseconds events are kept before the janitor deletes them (NULL: forever)';
COMMENT ON COLUMN alkstore.streams.min_compaction_lag_us IS 'Microseconds a superseded event is kept before compaction may delete it';
COMMENT ON COLUMN alkstore.streams.tombstone_retention_us IS 'Microseconds a tombstone (a keyed event without payload) is kept as its key''s head before the janitor deletes it and the head';

COMMENT ON TABLE alkstore.compaction_heads IS 'Per (stream, key) the newest value''s offset and the row transactions lock to serialise writes of the key; headless (head columns NULL) while the key has no value';
COMMENT ON COLUMN alkstore.compaction_heads.stream IS 'Stream name';
COMMENT ON COLUMN alkstore.compaction_heads.key IS 'Compaction key';
COMMENT ON COLUMN alkstore.compaction_heads.head_offset IS 'Offset (events.id) of the key''s newest value (NULL: headless)';
COMMENT ON COLUMN alkstore.compaction_heads.schema_version IS 'SchemaVersion() the application''s payload type reported for the head (NULL: headless)';
COMMENT ON COLUMN alkstore.compaction_heads.compaction_rank IS 'Rank of the head (ProduceOpts.Rank): only a value with a greater (rank, offset) replaces it (NULL: headless)';
COMMENT ON COLUMN alkstore.compaction_heads.created_at IS 'When the key was first locked or written';
COMMENT ON COLUMN alkstore.compaction_heads.updated_at IS 'When the head last changed; a headless row older than its stream''s headless_ttl_us is deleted';

COMMENT ON TABLE alkstore.jobs IS 'Queue jobs, live (pending, running) and dead, one row each';
COMMENT ON SEQUENCE alkstore.jobs_id_seq IS 'Job ids (jobs.id is an identity column)';
COMMENT ON COLUMN alkstore.jobs.id IS 'Job id, increasing in enqueue order';
COMMENT ON COLUMN alkstore.jobs.queue IS 'Queue name';
COMMENT ON COLUMN alkstore.jobs.payload IS 'Job body as the application gave it';
COMMENT ON COLUMN alkstore.jobs.priority IS 'Higher runs first among ready jobs';
COMMENT ON COLUMN alkstore.jobs.state IS 'pending (waiting for run_at or a worker), running (claimed) or dead (failed for good, out of attempts, expired or cancelled; kept until requeued or deleted)';
COMMENT ON COLUMN alkstore.jobs.attempts IS 'Claims so far';
COMMENT ON COLUMN alkstore.jobs.max_attempts IS 'Claims allowed before the job dies';
COMMENT ON COLUMN alkstore.jobs.created_at IS 'When the job was enqueued';
COMMENT ON COLUMN alkstore.jobs.run_at IS 'Earliest time the job may be claimed';
COMMENT ON COLUMN alkstore.jobs.claimed_at IS 'When the current or last claim was taken';
COMMENT ON COLUMN alkstore.jobs.claim_expires_at IS 'When the current claim lapses and the job may be claimed again (set while running)';
COMMENT ON COLUMN alkstore.jobs.claim_token IS 'Fences the current claim: settling the job needs it (set while running)';
COMMENT ON COLUMN alkstore.jobs.expires_at IS 'A job past it is never handed out and goes to dead with last_error ''expired'' (NULL: never expires)';
COMMENT ON COLUMN alkstore.jobs.worker IS 'Name of the worker holding or last holding the claim';
COMMENT ON COLUMN alkstore.jobs.last_error IS 'Why the last attempt failed or the job died';
COMMENT ON COLUMN alkstore.jobs.died_at IS 'When the job became dead';

COMMENT ON TABLE alkstore.schedules IS 'Recurring jobs: each row enqueues a job into its queue at every boundary of its spec';
COMMENT ON COLUMN alkstore.schedules.name IS 'Schedule name';
COMMENT ON COLUMN alkstore.schedules.spec IS 'When it fires: 5- or 6-field cron, @every <duration> or @hourly, @daily, @weekly, @monthly, @yearly';
COMMENT ON COLUMN alkstore.schedules.tz IS 'IANA time zone the spec is read in';
COMMENT ON COLUMN alkstore.schedules.queue IS 'Queue each fire enqueues into';
COMMENT ON COLUMN alkstore.schedules.payload IS 'Body of each enqueued job';
COMMENT ON COLUMN alkstore.schedules.priority IS 'Priority of each enqueued job';
COMMENT ON COLUMN alkstore.schedules.max_attempts IS 'max_attempts of each enqueued job';
COMMENT ON COLUMN alkstore.schedules.next_fire_at IS 'The next boundary to fire; advanced in the fire''s transaction';
COMMENT ON COLUMN alkstore.schedules.paused IS 'A paused schedule does not fire';
COMMENT ON COLUMN alkstore.schedules.last_fired_at IS 'The boundary fired last (NULL: never fired)';
COMMENT ON COLUMN alkstore.schedules.created_at IS 'When the schedule was created';
COMMENT ON COLUMN alkstore.schedules.updated_at IS 'When the schedule was last changed or fired';

COMMENT ON TABLE alkstore.leases IS 'Leases electing one holder for a singleton role (the scheduler)';
COMMENT ON COLUMN alkstore.leases.name IS 'Role name';
COMMENT ON COLUMN alkstore.leases.owner IS 'Name of the holder';
COMMENT ON COLUMN alkstore.leases.token IS 'Tells apart two runs that share an owner name';
COMMENT ON COLUMN alkstore.leases.renewed_at IS 'When the holder last took or renewed the lease';
COMMENT ON COLUMN alkstore.leases.expires_at IS 'After this anyone may take the lease';

-- +goose Down
-- Comments are documentation: leaving them in place undoes nothing.
SELECT 1;
