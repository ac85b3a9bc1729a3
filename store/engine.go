package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/jackc/pgx/v5"
)

// ops is the engine seam: every statement the store runs, bound to one
// connection, pool or transaction. An engine implements it by calling its
// generated queries (db/pg, db/lite) and mapping their rows; all validation,
// error wrapping and transaction handling live above it, once. It is split
// by mechanism so that each file of an engine (stream_pg.go, queue_pg.go,
// …) implements one part, and a new mechanism adds its own part.
type ops interface {
	streamOps
	keyedOps
	queueOps
	queueAdminOps
	scheduleOps
	notifyOps
	maintenanceOps
	partitionOps
	groupOps
	statsOps
	horizonOps
}

// streamOps: publishing, reading and consumer offsets (stream_pg.go,
// stream_lite.go).
type streamOps interface {
	publish(ctx context.Context, r publishReq) (int64, error)
	// publishMany: keyed ones update their heads; headers holds each
	// message's stored headers, nil when none has any.
	publishMany(ctx context.Context, r publishManyReq) ([]int64, error)
	readSince(ctx context.Context, stream string, after int64, limit int) ([]Event, error)
	readFromConsumer(ctx context.Context, stream, consumer string, limit int) ([]Event, error)
	// saveOffset and resetOffset report whether they stored offset: a
	// save moves only forward, and neither stores an offset above both
	// offsetBounds' newest and acceptUpto (0, or an offset known to be an
	// event's).
	saveOffset(ctx context.Context, stream, consumer string, offset, acceptUpto int64) (bool, error)
	getOffset(ctx context.Context, stream, consumer string) (int64, error)
	resetOffset(ctx context.Context, stream, consumer string, offset, acceptUpto int64) (bool, error) // sets it, lower or higher
	offsetBounds(ctx context.Context, stream, consumer string) (offsetBounds, error)
	firstEventFrom(ctx context.Context, offset int64) (int64, error)                      // the first event id at or above offset, 0 for none
	streamExists(ctx context.Context, stream string) (bool, error)                        // Stream.Exists
	trim(ctx context.Context, stream string, horizon int64, now time.Time) (int64, error) // unheads what it deletes
}

// errSkippedRows is a multi-row insert's error when an application's
// trigger skipped rows of the batch (a PostgreSQL BEFORE INSERT row trigger
// returning NULL, SQLite's RAISE(IGNORE)): the batch is refused whole, as
// PublishMany and EnqueueMany promise all or none. which says which rows:
// how many, or the first one.
// It matches ErrNotStored.
func errSkippedRows(which string, of int) error {
	return notStored("a trigger skipped %s of the batch's %d rows: the batch is refused, all or none", which, of)
}

// errSkipped is a one-row insert's error when an application's trigger
// skipped the row: said as such, where the drivers' "no rows" from its
// RETURNING would read as ErrNotFound, a missing job or event. It matches
// ErrNotStored.
func errSkipped(what string) error {
	return notStored("a trigger skipped the %s: nothing was stored", what)
}

// errFireSkipped is a schedule's fire when an application's trigger skipped
// its job: the fire is refused whole (all or none, as the batches), so the
// schedule does not move past a boundary that enqueued nothing; the
// scheduler logs it and tries the fire again, as after any failed fire. It
// matches ErrNotStored; cause is PostgreSQL's AKSKP error (nil on SQLite),
// kept reachable with errors.As.
func errFireSkipped(cause error) error {
	return &notStoredError{cause: cause,
		text: "a trigger skipped the schedule's job: nothing was stored, and the schedule stays at the boundary it was to fire"}
}

// skipped maps a one-row INSERT ... RETURNING's "no rows" to errSkipped.
func skipped(what string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return errSkipped(what)
	}
	return err
}

// publishReq is one event to append; headers are its stored headers, nil
// when none.
type publishReq struct {
	stream, topic    string // topic: the stream's wake topic
	key              *string
	payload, headers []byte
}

// publishManyReq is a batch to append to one stream; headers holds each
// message's stored headers, nil when none has any.
type publishManyReq struct {
	stream  string
	msgs    []Message
	headers [][]byte
	now     time.Time
}

// keyedOps: the heads of keyed (compacted) streams (compaction_pg.go,
// compaction_lite.go).
type keyedOps interface {
	publishKeyed(ctx context.Context, e keyedEvent) (int64, error) // the event and its head upsert, atomically
	getHead(ctx context.Context, stream, key string) (*Head, error)
	lockHead(ctx context.Context, stream, key string) (*headRow, error) // nil: no row; locked until the tx ends
	eventPayload(ctx context.Context, id int64) (payload []byte, found bool, err error)
	insertHeadless(ctx context.Context, stream, key string, now time.Time) error
	touchHeadless(ctx context.Context, stream, key string, now time.Time) error
	listHeads(ctx context.Context, stream, after string, limit int) ([]Head, error)
	configureStream(ctx context.Context, name string, c StreamConfig) error
}

// queueOps: a job's way from enqueue through claim to its outcome, the
// statements workers run (queue_pg.go, queue_lite.go).
type queueOps interface {
	enqueue(ctx context.Context, queue, topic string, now time.Time, j newJob) (int64, error) // topic: queueTopic(queue)
	enqueueMany(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]int64, error)
	// enqueueAlike is enqueueMany for jobs that all have the options j
	// holds (resolved once; its payload is not used): the jobs' payloads
	// in order, their ids in the same order.
	enqueueAlike(ctx context.Context, queue string, now time.Time, j newJob, jobs []NewJob) ([]int64, error)
	// enqueueUnique adds the jobs whose keys are free (one transaction on
	// SQLite) and reads the holders of the others, through placeUnique.
	enqueueUnique(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]Enqueued, error)
	claim(ctx context.Context, r claimReq) ([]*Job, error) // buries spent expired claims first
	// ack, retry, bury and heartbeat are fenced by the claim token and report
	// whether the claim still held the job. ack and ackMany are one atomic
	// decision each: a held job is deleted, or ends completed when its queue
	// keeps completed jobs, whatever Configure commits meanwhile.
	ack(ctx context.Context, id, token int64, now time.Time) (bool, error)
	ackMany(ctx context.Context, queue string, claims []claimRef, now time.Time) ([]int64, error) // the ids acked; every claim of queue
	retry(ctx context.Context, r retryReq) (bool, error)
	bury(ctx context.Context, r buryReq) (bool, error)
	heartbeat(ctx context.Context, r heartbeatReq) (bool, error)
	// heartbeatMany extends many claims in one statement (a worker's tick;
	// see beatReq), reporting which ones it extended and which still held.
	heartbeatMany(ctx context.Context, r beatReq) (beatRes, error)
	// heartbeatLocked extends one claim whose row heartbeatMany found
	// held by another transaction, waiting for its lock (see
	// lockedBeatReq): the new lease, or ok false when the claim was gone.
	heartbeatLocked(ctx context.Context, r lockedBeatReq) (lease time.Time, ok bool, err error)
	release(ctx context.Context, id, token int64, now time.Time) (bool, error) // back to pending, attempt restored
	snooze(ctx context.Context, r snoozeReq) (bool, error)                     // to pending at runAt, attempt restored
	jobClaims(ctx context.Context, ids []int64) ([]jobClaim, error)            // state and claim token of each live row
	queuePaused(ctx context.Context, queue string) (bool, error)
	getJob(ctx context.Context, queue string, id int64) (*Job, error)
	registerQueue(ctx context.Context, queue string, now time.Time) error // a settings row with the defaults, if none
	sweepExpired(ctx context.Context, queue string, now time.Time) (int64, error)
	nextDue(ctx context.Context, queue string) (*time.Time, error)
}

// The settle statements take the claim (id and token) that fences them and
// the time they run at, besides what each one sets.

// retryReq: back to pending at runAt, recording cause.
type retryReq struct {
	claimRef
	now, runAt time.Time
	cause      string
}

// buryReq: to dead, recording cause; exhaustedOnly buries only a job whose
// attempts are spent.
type buryReq struct {
	claimRef
	now           time.Time
	cause         string
	exhaustedOnly bool
}

// heartbeatReq: the claim extended to deadline.
type heartbeatReq struct {
	claimRef
	now, deadline time.Time
}

// beatReq: the claims of a worker's tick, each extended to the time the
// statement runs at plus extend. ctx bounds only the wait for a connection
// (on SQLite, the writer slot): the time is read with clock once one is
// held, so that a claim that lapsed during the wait is not revived, and
// the statement then runs to its end (one cancelled half way might have
// committed unseen).
type beatReq struct {
	claims []claimRef
	clock  func() time.Time
	extend time.Duration
}

// beatRes: what heartbeatMany did at now: beat, the ids it extended to
// deadline, and live, the ids whose claim still held (beat among them);
// an id of the request missing from live is lost. On PostgreSQL an id in
// live but not in beat was locked by another transaction (see
// HeartbeatJobs); on SQLite live is beat.
type beatRes struct {
	now, deadline time.Time
	beat, live    []int64
}

// lockedBeatReq: one claim of a worker's tick whose row another
// transaction held (on PostgreSQL, live but not beat), extended once its
// lock comes by extend from then. ctx bounds only the wait for a
// connection (until the claim's lease runs out): the time is read with
// clock once one is held, and the claim is fenced at it as beatReq's
// are. The wait for the lock lasts until until ends (the handler's run,
// the worker); then the statement is cancelled at the server.
type lockedBeatReq struct {
	claimRef
	clock  func() time.Time
	extend time.Duration
	until  context.Context
}

// errNoLockWait: heartbeatLocked found every connection it may park on a
// lock in use (see pgEngine.lockWaits); the claim waits for a later tick.
var errNoLockWait = errors.New("every connection a heartbeat may hold waiting for a row lock is in use")

// snoozeReq: back to pending at runAt, attempt restored.
type snoozeReq struct {
	claimRef
	now, runAt time.Time
}

// queueAdminOps: what an operator (console, CLI) does to a queue and its
// jobs (queue_admin.go drives them).
type queueAdminOps interface {
	setQueuePaused(ctx context.Context, queue string, paused bool, now time.Time) error // wakes the queue's workers in other processes
	cancel(ctx context.Context, queue string, id int64, now time.Time) (bool, error)
	requeue(ctx context.Context, queue string, id int64, now time.Time) (bool, error) // not into a key another job holds
	jobKeyHolder(ctx context.Context, queue string, id int64) (keyHolder, error)      // why requeue moved nothing
	requeueDead(ctx context.Context, r requeueDeadReq) (int64, error)
	deleteJob(ctx context.Context, queue string, id int64) (bool, error) // not a running one
	findJob(ctx context.Context, id int64) (*Job, error)                 // by id alone, any queue
	listJobs(ctx context.Context, r listJobsReq) ([]*Job, error)
	configureQueue(ctx context.Context, queue string, c QueueConfig, now time.Time) error
	queueSettings(ctx context.Context) ([]QueueInfo, error) // Name, Paused, Config of queues with a row
	queueStats(ctx context.Context, queue string, now time.Time) (QueueStats, error)
}

// requeueDeadReq moves at most batch of a queue's dead jobs that died
// before before back to pending.
type requeueDeadReq struct {
	queue       string
	now, before time.Time
	batch       int
}

// listJobsReq is one page of a queue's jobs in state, after the id after.
type listJobsReq struct {
	queue string
	state JobState
	after int64
	limit int
}

// scheduleOps: schedules and the scheduler's lease (schedule_pg.go,
// schedule_lite.go). Schedule writes that schedulers must hear of (upsert,
// resume, lease release) wake the scheduler topic in other processes on
// commit.
type scheduleOps interface {
	upsertSchedule(ctx context.Context, sc ScheduleInfo) error // UpdatedAt is now
	deleteSchedule(ctx context.Context, name string) (bool, error)
	pauseSchedule(ctx context.Context, name string, now time.Time) (bool, error)
	resumeSchedule(ctx context.Context, r scheduleResume) (bool, error)
	getSchedule(ctx context.Context, name string) (ScheduleInfo, error)
	listSchedules(ctx context.Context) ([]ScheduleInfo, error)
	dueSchedules(ctx context.Context, now, afterAt time.Time, afterName string, limit int) ([]ScheduleInfo, error)
	fireSchedule(ctx context.Context, f scheduleFire) (bool, error) // advance and enqueue, atomically; false: not fired
	nextScheduleFire(ctx context.Context) (*time.Time, error)
	acquireLease(ctx context.Context, l lease, now time.Time) (bool, error)
	getLease(ctx context.Context, name string) (lease, error)
	releaseLease(ctx context.Context, name string, token int64) (bool, error)
}

// scheduleResume unpauses a schedule at spec and tz, firing next.
type scheduleResume struct {
	name, spec, tz string
	next, now      time.Time
}

// notifyOps: durable notifications (notify_pg.go, notify_lite.go).
type notifyOps interface {
	notify(ctx context.Context, channel string, payload []byte, now time.Time) error
	pruneNotifications(ctx context.Context, cutoff time.Time, keep int) (int64, error)
}

// maintenanceOps: the janitor's passes (maintenance.go drives them); each
// call is one bounded transaction.
type maintenanceOps interface {
	maintainedStreams(ctx context.Context) ([]streamSettings, error)   // retention or compacted
	streamsWithHeadless(ctx context.Context) ([]streamSettings, error) // name, headlessTTL
	deleteExpiredHeadless(ctx context.Context, stream string, cutoff time.Time, limit int) (int64, error)
	// retainWindow deletes the prefix past retention of the stream's oldest
	// window events (unheading what it deletes, unless compacted).
	retainWindow(ctx context.Context, r retainReq) (int64, error)
	// compactWindow walks the window events after st.compactedThrough and
	// deletes at most limit superseded versions of their keys; it returns
	// the new cursor (st.compactedThrough when there was nothing to walk or
	// the limit was reached), and held when the cursor stayed because
	// another transaction held versions of the window (PostgreSQL; never
	// on SQLite, where a transaction holds the one writer).
	compactWindow(ctx context.Context, r compactReq) (deleted, through int64, held bool, err error)
	// tombstoneTx runs fn in one transaction with the tombstone pass's
	// statements: one page of expireTombstones (maintenance.go), which
	// both engines share.
	tombstoneTx(ctx context.Context, fn func(tombQueries) error) error
	sweepAllExpiredJobs(ctx context.Context, now time.Time, batch int) (int64, error)
	deleteFinishedJobs(ctx context.Context, now time.Time, batch int) (int64, error)
}

// retainReq is one retention pass over the stream's oldest window events,
// deleting those before cutoff.
type retainReq struct {
	st          streamSettings
	cutoff, now time.Time
	window      int
}

// tombReq is one tombstone pass over a stream: tombstones at or below
// through (the compaction cursor) older than cutoff (TombstoneRetention)
// go, with their keys' other versions older than lagCutoff
// (MinCompactionLag).
type tombReq struct {
	stream            string
	through           int64
	cutoff, lagCutoff time.Time
	limit             int
}

// tombQueries are the tombstone pass's statements inside one transaction.
type tombQueries interface {
	// tombstonePage reads the page of r.stream's tombstones at or below
	// r.through after after, at most page of them, oldest first, and
	// where the next page starts: on PostgreSQL the tombstone heads
	// older than r.cutoff (locked, skipping held rows), by (tombstone_at,
	// key); on SQLite the tombstone events, heads or not, by offset.
	tombstonePage(ctx context.Context, r tombReq, after tombPos, page int) (rows []tombRow, next tombPos, err error)
	// deleteKeyOtherVersions deletes the key's versions other than head
	// older than lagCutoff (on PostgreSQL skipping held rows).
	deleteKeyOtherVersions(ctx context.Context, stream, key string, head int64, lagCutoff time.Time) error
	keyHasOtherVersions(ctx context.Context, stream, key string, head int64) (bool, error)
	// deleteTombstone deletes the key's head row and its tombstone event.
	deleteTombstone(ctx context.Context, stream, key string, head int64) error
}

// tombRow is one tombstone of a page: expired when older than the cutoff
// (on PostgreSQL every row read is), take when also still its key's head
// (on PostgreSQL: its event checked to be that tombstone still).
type tombRow struct {
	key           string
	head          int64
	expired, take bool
}

// tombPos is where a tombstone page starts: after offset id on SQLite,
// after (at, key) on PostgreSQL; the zero value is the stream's start.
type tombPos struct {
	id  int64
	at  time.Time
	key string
}

// compactReq is one compaction pass over the window events after
// st.compactedThrough, deleting at most limit superseded versions written
// before cutoff.
type compactReq struct {
	st            streamSettings
	cutoff        time.Time
	window, limit int
}

// partitionOps: event partitions (partitions_pg.go; SQLite has none and
// does nothing).
type partitionOps interface {
	createPartitions(ctx context.Context, opts PartitionOpts) (int64, error)
	dropExpiredPartitions(ctx context.Context, now time.Time, trimStream string, trimHorizon int64) (partitions, events int64, err error)
	partitionsDenied(ctx context.Context) (bool, error)
}

// statsOps: the counts Store.Stats reports (maintenance_pg.go,
// maintenance_lite.go).
type statsOps interface {
	streamCounts(ctx context.Context, limit int) ([]StreamStats, error)              // Name, HeadOffset, Events
	headCounts(ctx context.Context, now time.Time, limit int) ([]StreamStats, error) // Name, Keys, Headless, OldestHeadless
	consumerLags(ctx context.Context, limit int) (streams []string, lags []ConsumerStats, err error)
	compactedStreams(ctx context.Context) ([]string, error)
	jobQueues(ctx context.Context) ([]string, error) // queues with pending, running or finished jobs
}

// horizonOps: the settled horizon (see HorizonStats; horizon_pg.go,
// horizon_lite.go). SQLite's settles every committed offset, so it reports
// math.MaxInt64 and nothing else.
type horizonOps interface {
	settledHorizon(ctx context.Context) (int64, error)
	firstEventAbove(ctx context.Context, offset int64) (*time.Time, error) // created_at; nil: none
	oldestWriteTransaction(ctx context.Context) (*WriteTransaction, error) // nil: none
}

// engine is one database behind a Store.
type engine interface {
	kind() string  // "pg" or "lite"
	readOps() ops  // auto-commit reads; never wait for a writer
	writeOps() ops // auto-commit writes
	begin(ctx context.Context) (driverTx, error)
	// startFeed starts the cross-process wake feed into hub; ready closes once
	// every later notification will reach it.
	startFeed(hub *wake.Hub, log *slog.Logger) (stop func(), ready <-chan struct{})
	listen(ctx context.Context, s *Store, channel string, onClose func()) (*Listener, error)
	// close releases the connections; abandoned says transactions are still
	// open, whose connections go back (and close) when they end.
	close(abandoned bool)
	// interrupt cancels the statements running on the store's connections
	// (a hard stop), where the engine can.
	interrupt()
	// endLockWaits ends, where the engine waits for locks with a timeout
	// of its own (SQLite's busy timeout), the waits of the store's
	// statements for a lock another connection holds, now and from now
	// on, and cuts nothing else (a hard stop: see Store.shutdown);
	// lockWaitsEnded reports whether it ended any of writes, and of
	// reads.
	endLockWaits()
	lockWaitsEnded() (writes, reads bool)
}

// driverTx is a database transaction as the engine sees it.
type driverTx interface {
	ops() ops
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	query(ctx context.Context, sql string, args ...any) (Rows, error)
	queryRow(ctx context.Context, sql string, args ...any) Row
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
	// abandon is the rollback the store makes from another goroutine than
	// the one using the transaction (a hard Shutdown, Work leaving a
	// handler behind, the leak cleanup), which may be running a statement
	// in it: on PostgreSQL it cancels that statement and waits for it,
	// bounded by ctx, never touching the connection while it runs
	// (txGuard); database/sql serialises a *sql.Tx itself.
	abandon(ctx context.Context) error
	// endedAfter is asked after a statement of the transaction failed with
	// err: non-nil (why) when the transaction no longer exists on its
	// connection while the driver would still run statements for it, each
	// committing on its own (SQLite).
	endedAfter(err error) error
}

// Rows is the result of Tx.Query on either engine.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is the result of Tx.QueryRow on either engine. Scan returns an error
// matching ErrNotFound when there was no row.
type Row interface {
	Scan(dest ...any) error
}

// mapRows maps a query's generated rows to the store's type.
func mapRows[R, T any](rows []R, err error, mapRow func(R) T) ([]T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = mapRow(r)
	}
	return out, nil
}
