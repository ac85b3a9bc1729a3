package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Queue statements on PostgreSQL.

func (o pgOps) enqueue(ctx context.Context, queue, topic string, now time.Time, j newJob) (int64, error) {
	var runAt *time.Time // NULL: due now (see EnqueueJob)
	if !j.runAt.Equal(now) {
		at := j.runAt // not &j.runAt: that moved all of j to the heap on every call
		runAt = &at
	}
	// A write the gate gives no wake runs the statement without a NOTIFY
	// (see EnqueueJob): its CASE cost every statement, notifying or not.
	p := pgdb.EnqueueJobParams{Queue: queue, Payload: j.payload, Priority: j.priority,
		MaxAttempts: j.maxAttempts, Now: now, RunAt: runAt, ExpiresAt: j.expiresAt, Headers: pgJSONOrNull(j.headers)}
	var id int64
	var err error
	w := o.wake(topic)
	if w == "" {
		id, err = o.q.EnqueueJob(ctx, p)
	} else {
		id, err = o.q.EnqueueJobNotify(ctx, pgdb.EnqueueJobNotifyParams{Queue: p.Queue, Payload: p.Payload,
			Priority: p.Priority, MaxAttempts: p.MaxAttempts, Now: p.Now, RunAt: p.RunAt, ExpiresAt: p.ExpiresAt,
			Wake: w, Headers: p.Headers})
	}
	o.sent(topic, w)
	return id, skipped("job", err)
}

func (o pgOps) enqueueMany(ctx context.Context, queue string, now time.Time, jobs []newJob) (_ []int64, err error) {
	topic := queueTopic(queue)
	w, seq := o.carryBatch(topic)
	defer func() { o.carried(topic, w, seq, err) }()
	if alikeRun(jobs, math.MaxInt) == len(jobs) { // the usual batch: only payloads differ
		j := jobs[0]
		p := pgdb.EnqueueJobsAlikeParams{Queue: queue, Priority: j.priority, MaxAttempts: j.maxAttempts, Now: now,
			RunAt: j.runAt, ExpiresAt: j.expiresAt, Headers: pgJSON(j.headers), Payloads: make([][]byte, len(jobs)),
			Wake: w}
		for i, j := range jobs {
			p.Payloads[i] = j.payload
		}
		row, err := o.q.EnqueueJobsAlike(ctx, p)
		var ids []int64
		if err == nil {
			ids = row.AppendIDs(make([]int64, 0, len(jobs)), len(jobs))
		}
		return allInserted(len(jobs), ids, err)
	}
	p := pgdb.EnqueueJobsParams{Queue: queue, Now: now, Wake: w,
		Payloads: make([][]byte, len(jobs)), Priorities: make([]int32, len(jobs)), MaxAttempts: make([]int32, len(jobs))}
	for i, j := range jobs {
		p.Payloads[i], p.Priorities[i], p.MaxAttempts[i] = j.payload, j.priority, j.maxAttempts
		// The timestamp arrays stay nil (NULL) unless a job needs them: see
		// EnqueueJobs.
		if !j.runAt.Equal(now) && p.RunAts == nil {
			p.RunAts = make([]time.Time, len(jobs))
			for k := range i {
				p.RunAts[k] = jobs[k].runAt
			}
		}
		if p.RunAts != nil {
			p.RunAts[i] = j.runAt
		}
		if j.expiresAt != nil && p.ExpiresAts == nil {
			p.HasExpiresAt, p.ExpiresAts = make([]bool, len(jobs)), make([]time.Time, len(jobs))
			for k := range i {
				p.ExpiresAts[k] = now
			}
		}
		if p.ExpiresAts != nil {
			if j.expiresAt != nil {
				p.HasExpiresAt[i], p.ExpiresAts[i] = true, *j.expiresAt
			} else {
				p.ExpiresAts[i] = now
			}
		}
	}
	p.Headers = pgHeaderArray(jobs)
	ids, err := o.q.EnqueueJobs(ctx, p)
	return allInserted(len(jobs), ids, err)
}

func (o pgOps) enqueueAlike(ctx context.Context, queue string, now time.Time, j newJob, jobs []NewJob) ([]int64, error) {
	topic := queueTopic(queue)
	w, seq := o.carryBatch(topic)
	ids, err := o.q.EnqueueJobsAlikeFrom(ctx, pgdb.EnqueueJobsAlikeParams{Queue: queue, Priority: j.priority,
		MaxAttempts: j.maxAttempts, Now: now, RunAt: j.runAt, ExpiresAt: j.expiresAt, Headers: pgJSON(j.headers), Wake: w},
		pgPayloads(jobs), len(jobs), make([]int64, 0, len(jobs)))
	o.carried(topic, w, seq, err)
	return allInserted(len(jobs), ids, err)
}

// pgPayloads is the payloads of jobs as pgx encodes a bytea[] parameter
// (pgtype.ArrayGetter): each element a pointer into jobs whose BytesValue
// is the payload, nil a NULL, as for a [][]byte. pgx encodes a [][]byte
// through reflection, boxing every element (an allocation a job), and
// the [][]byte itself would be built for the call.
type pgPayloads []NewJob

func (a pgPayloads) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a pgPayloads) Index(i int) any { return (*pgPayload)(&a[i]) }

func (a pgPayloads) IndexType() any { return (*pgPayload)(nil) }

// Value is the payloads as a [][]byte, for a connection that encodes a
// parameter without knowing its type (the simple protocol, or
// QueryExecModeExec): pgx then takes the value a driver.Valuer gives. With
// the parameter's type known (the default, a prepared statement), pgx
// encodes the array through Index.
func (a pgPayloads) Value() (driver.Value, error) {
	b := make([][]byte, len(a))
	for i := range a {
		b[i] = a[i].Payload
	}
	return b, nil
}

// pgPayload is one job of pgPayloads, its payload a pgtype.BytesValuer.
type pgPayload NewJob

func (p *pgPayload) BytesValue() ([]byte, error) { return p.Payload, nil }

// claim waits for a connection as long as ctx allows, but once it has one
// its statements run to the end: pgx abandons a cancelled statement without
// knowing whether it committed, and a claim that committed unseen would
// leave its jobs running with no handler until their visibility ran out.
func (o pgOps) claim(ctx context.Context, r claimReq) ([]*Job, error) {
	conn, err := o.eng.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// The connection is ours, perhaps after a wait (a dial, or a pool
	// whose connections were all held): the claim's time, and its jobs'
	// lease, start now, as on SQLite once it holds the writer. Stamped
	// before the wait, a claim that waited handed out leases partly run
	// out, and their handlers' first heartbeat came too late (a fresh pool
	// of 2 beside an application's transaction at load 20: a Visibility
	// of 300 ms lost every claim of a round's first claim in 1 round of 16).
	r.stamp(r.clock())
	ctx, cancel := context.WithTimeout(uninterrupted(ctx), uninterruptedTimeout)
	defer cancel()
	q := pgdb.New(conn)
	// One statement: it also ends the jobs whose lapsed claim was their last
	// (see ClaimJobs's buried).
	// Each row is read into one reused row and made a job at once
	// (ClaimJobs allocated a row and its scan targets per job; issue 18).
	// The claim's jobs are allocated in runs that double (1, 2, 4, ...: a
	// claim of 100 jobs makes 7 allocations, not 100, and one of a few
	// jobs allocates no more than it needs twice over). A job kept after
	// its run keeps the others of its run alive with it (about half a KiB
	// each, and their payloads: the run is one object to the GC).
	jobs := make([]*Job, 0, r.n)
	var slab []claimedJob
	err = q.ClaimJobsEach(ctx, pgdb.ClaimJobsParams{Now: r.now, ClaimExpiresAt: r.expiresAt,
		ClaimToken: r.token, Worker: r.worker, Queue: r.queue, MaxJobs: int32(r.n)},
		func(row *pgdb.ClaimJobsRow) {
			if len(slab) == 0 { // ClaimJobs returns r.n rows at most
				slab = make([]claimedJob, max(min(len(jobs)+1, r.n-len(jobs)), 1))
			}
			c := &slab[0]
			slab = slab[1:]
			jobs = append(jobs, pgClaimedJob(c, row, r))
		})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// pgClaimedJob makes c the job ClaimJobs returned: the columns the claim
// did not stamp, and what it stamped (a running job has no finished_at), as
// the server stores them (microseconds).
func pgClaimedJob(c *claimedJob, row *pgdb.ClaimJobsRow, r claimReq) *Job {
	c.claimedAt, c.expiresAt = time.UnixMicro(r.now.UnixMicro()), time.UnixMicro(r.expiresAt.UnixMicro())
	c.j = Job{ID: row.ID, Queue: r.queue, Payload: row.Payload, Priority: int(row.Priority), State: JobRunning,
		Attempts: int(row.Attempts), MaxAttempts: int(row.MaxAttempts), CreatedAt: row.CreatedAt,
		RunAt: row.RunAt, ClaimedAt: &c.claimedAt, ClaimExpiresAt: &c.expiresAt,
		ExpiresAt: row.ExpiresAt, Worker: r.worker, LastError: deref(row.LastError),
		Errors: attemptErrors(row.Errors), Headers: decodeHeaders(row.Headers), token: r.token, mu: &c.mu, slot: &c.run}
	return &c.j
}

// claimedJob is a claimed job with its lock and claim times, allocated as
// one (a burn-down's allocations are a tenth of its client CPU), and on
// PostgreSQL with the other jobs of its claim.
type claimedJob struct {
	j                    Job
	mu                   sync.Mutex
	claimedAt, expiresAt time.Time
	run                  runningJob // its first run's (Job.runSlot)
}

// ack deletes the job in one statement when its queue keeps no completed
// jobs; otherwise CompleteJob decides again in one statement (deleted or
// completed), so a Configure committing between the two cannot make both
// miss.
func (o pgOps) ack(ctx context.Context, id, token int64, now time.Time) (bool, error) {
	p := pgdb.AckJobParams{ID: id, ClaimToken: token, Now: now}
	n, err := o.q.AckJob(ctx, p)
	if err != nil || n == 1 {
		return n == 1, err
	}
	n, err = o.q.CompleteJob(ctx, pgdb.CompleteJobParams(p))
	return n == 1, err
}

// ackMany is ack for a batch: CompleteJobs acks what AckJobs did not delete.
// Both skip rows another transaction holds (see AckJobs); the claims of
// those rows that are still live are then acked by one statement that
// waits for their locks (ackLocked), as AckJobs did for the whole batch
// before: AckMany answers once every claim was settled or found gone, or
// the wait failed (lock_timeout). A worker's ack loop leaves them to be
// acked apart (ackSkipping, worker.heldAcks).
func (o pgOps) ackMany(ctx context.Context, queue string, claims []claimRef, now time.Time) ([]int64, error) {
	acked, locked, err := o.ackSkipping(ctx, queue, claims, now)
	if err != nil || len(locked) == 0 {
		return acked, err
	}
	more, err := o.ackLocked(ctx, locked, now)
	return append(acked, more...), err
}

// ackLocked acks claims whose rows another transaction held when the
// batch's ack skipped them (see ackSkipping), by one statement that waits
// for the rows' locks (CompleteLockedJobs), fenced at now; it returns the
// ids it settled, the others' claims were gone.
//
// ctx's end (a hard stop of the store giving the wait up) cancels the
// statement on the server, on a pool given to OpenPool too, which the
// hard stop's cancel of every statement does not reach: pgx, told by the
// context, would only close the connection, and the server, blocked on
// the lock, would notice once it got it, its ack committed after
// Shutdown said it stored nothing. So the statement runs on a connection
// of its own, which a cancel sent for it does not go back to the pool
// (the cancel, which the server handles in its time, could cut the next
// statement there). The cancel is sent again until the statement returned
// (cancelUntil): ctx may end before the statement reached the server,
// which drops a cancel for a backend with no statement running
// (review59a F3: the ack then waited for the row after Shutdown returned,
// and committed once it was free).
func (o pgOps) ackLocked(ctx context.Context, claims []claimRef, now time.Time) ([]int64, error) {
	p := pgdb.CompleteLockedJobsParams{Now: now, Ids: make([]int64, len(claims)), ClaimTokens: make([]int64, len(claims))}
	for i, c := range claims {
		p.Ids[i], p.ClaimTokens[i] = c.id, c.token
	}
	conn, err := o.eng.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	returned := make(chan struct{})
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		cancelUntil(conn.Conn().PgConn(), returned)
	})
	ids, err := pgdb.New(conn).CompleteLockedJobs(uninterrupted(ctx), p)
	close(returned)
	if !stop() {
		<-cancelled
		_ = conn.Conn().Close(context.Background()) // the pool drops it as it comes back
	}
	conn.Release()
	return ids, err
}

// ackSkipping is ackMany leaving the claims whose rows another
// transaction holds: it returns them (locked) unsettled. The ids go as the
// text of a bigint[] (see AckJobsText), written here beside the claims'
// JSON. When AckJobs and CompleteJobs settled fewer than every claim,
// JobClaims reads the others: those whose row still runs under their
// claim, its lease not run out at now, were skipped for a lock (or,
// rarely, the row changed between a statement's snapshot and its lock:
// ackLocked then settles it at once), the others are lost. Only then: an
// ack that settles its batch is one statement, as before.
func (o pgOps) ackSkipping(ctx context.Context, queue string, claims []claimRef, now time.Time) ([]int64, []claimRef, error) {
	buf := make([]byte, 0, 16+len(claims)*52)
	buf = append(buf, '{')
	for i, c := range claims {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, c.id, 10)
	}
	buf = append(buf, '}')
	ids := len(buf)
	buf = appendClaims(buf, claims)
	acked, err := o.q.AckJobsText(ctx, string(buf[:ids]), pgJSON(buf[ids:]), pgdb.AckJobsParams{Queue: queue, Now: now})
	if err != nil || len(acked) == len(claims) {
		return acked, nil, err
	}
	rest := pgdb.CompleteJobsParams{Now: now, Ids: make([]int64, len(claims)), ClaimTokens: make([]int64, len(claims))}
	for i, c := range claims {
		rest.Ids[i], rest.ClaimTokens[i] = c.id, c.token
	}
	more, err := o.q.CompleteJobs(ctx, rest)
	acked = append(acked, more...)
	if err != nil || len(acked) == len(claims) {
		return acked, nil, err
	}
	settled := make(map[int64]bool, len(acked))
	for _, id := range acked {
		settled[id] = true
	}
	var left []int64
	for _, c := range claims {
		if !settled[c.id] {
			left = append(left, c.id)
		}
	}
	rows, err := o.jobClaims(ctx, left)
	if err != nil {
		return acked, nil, err
	}
	live := make(map[int64]int64, len(rows))
	for _, r := range rows {
		if r.state == JobRunning && r.expires.After(now) {
			live[r.id] = r.token
		}
	}
	var locked []claimRef
	for _, c := range claims {
		if !settled[c.id] && live[c.id] == c.token {
			locked = append(locked, c)
		}
	}
	return acked, locked, nil
}

func (o pgOps) retry(ctx context.Context, r retryReq) (bool, error) {
	n, err := o.q.RetryJob(ctx, pgdb.RetryJobParams{ID: r.id, ClaimToken: r.token, Now: r.now, RunAt: r.runAt, Cause: r.cause})
	return n == 1, err
}

func (o pgOps) release(ctx context.Context, id, token int64, now time.Time) (bool, error) {
	n, err := o.q.ReleaseJob(ctx, pgdb.ReleaseJobParams{ID: id, ClaimToken: token, Now: now})
	return n == 1, err
}

func (o pgOps) bury(ctx context.Context, r buryReq) (bool, error) {
	n, err := o.q.BuryJob(ctx, pgdb.BuryJobParams{ID: r.id, ClaimToken: r.token, Now: r.now, Cause: r.cause, ExhaustedOnly: r.exhaustedOnly})
	return n == 1, err
}

func (o pgOps) heartbeat(ctx context.Context, r heartbeatReq) (bool, error) {
	n, err := o.q.HeartbeatJob(ctx, pgdb.HeartbeatJobParams{ID: r.id, ClaimToken: r.token, Now: r.now, ClaimExpiresAt: r.deadline})
	return n == 1, err
}

// heartbeatMany waits for a connection as long as ctx allows, as a claim
// does, then reads the time and runs HeartbeatJobs to its end.
func (o pgOps) heartbeatMany(ctx context.Context, r beatReq) (beatRes, error) {
	if o.inTx { // never: a worker's heartbeat is an auto-commit write
		return beatRes{}, errors.New("a worker's heartbeat runs on a connection of its own")
	}
	ids := make([]int64, len(r.claims))
	for i, c := range r.claims {
		ids[i] = c.id
	}
	claims := appendClaims(make([]byte, 0, 2+len(r.claims)*40), r.claims)
	conn, err := o.eng.pool.Acquire(ctx)
	if err != nil {
		return beatRes{}, err
	}
	defer conn.Release()
	ctx, cancel := context.WithTimeout(uninterrupted(ctx), uninterruptedTimeout)
	defer cancel()
	res := beatRes{now: r.clock()}
	res.deadline = res.now.Add(r.extend).Truncate(time.Microsecond)
	rows, err := pgdb.New(conn).HeartbeatJobs(ctx, pgdb.HeartbeatJobsParams{Ids: ids, Now: res.now, Claims: claims,
		ClaimExpiresAt: res.deadline})
	for _, row := range rows {
		res.live = append(res.live, row.ID)
		if row.Beat {
			res.beat = append(res.beat, row.ID)
		}
	}
	return res, err
}

// heartbeatLocked takes room for a lock wait (reserveLockWait; none:
// errNoLockWait at once, and the claim is beaten at the next tick, lost
// if the row is still held when its lease runs out), waits for a
// connection as long as ctx allows, then reads the time and runs
// HeartbeatLockedJob, which waits for the row's lock until r.until ends.
// Then cancel requests end the wait at the server (cancelUntil: one
// that came before the statement was dropped, and the statement waited
// for the row until it was cut off below, rollbackTimeout later), and the
// statement's reply is read before the connection goes (closed, not back
// to the pool: a cancel that reached the server late must not end
// another statement there). A statement that the server cannot be made to end within
// rollbackTimeout is cut off on the client side (the connection closed
// under it).
func (o pgOps) heartbeatLocked(ctx context.Context, r lockedBeatReq) (time.Time, bool, error) {
	if o.inTx { // never: a worker's heartbeat is an auto-commit write
		return time.Time{}, false, errors.New("a worker's heartbeat runs on a connection of its own")
	}
	release, err := o.eng.reserveLockWait()
	if err != nil {
		return time.Time{}, false, err
	}
	defer release()
	conn, err := o.eng.pool.Acquire(ctx)
	if err != nil {
		return time.Time{}, false, err
	}
	qctx, kill := context.WithCancel(uninterrupted(ctx))
	defer kill()
	returned, sent := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(r.until, func() {
		defer close(sent)
		cut := time.AfterFunc(rollbackTimeout, kill)
		defer cut.Stop()
		cancelUntil(conn.Conn().PgConn(), returned)
	})
	now := r.clock()
	lease, err := pgdb.New(conn).HeartbeatLockedJob(qctx, pgdb.HeartbeatLockedJobParams{ID: r.id, ClaimToken: r.token,
		Now: now, ExtendUs: r.extend.Microseconds()})
	close(returned)
	if !stop() { // a cancel request went: this connection goes with it
		<-sent
		pc := conn.Hijack()
		cctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_ = pc.Close(cctx)
		cancel()
	} else {
		conn.Release()
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, err
	case lease == nil: // never: the row's lease was set
		return time.Time{}, false, errors.New("HeartbeatLockedJob returned no lease")
	}
	return *lease, true, nil
}

// reserveLockWait takes room for a statement that waits for a row lock
// another transaction holds (a worker's heartbeat, HeartbeatLockedJob, or
// its ack, CompleteLockedJobs; see heartbeatLocked and heldAcks): one of
// the store's lock-wait slots and, as the wait parks a pooled connection for
// as long as the other transaction holds the row, one of txSlots, while
// the pool has a connection free beside the one it will take. It returns
// errNoLockWait at once when there is no room, and otherwise the function
// that gives the room back.
//
// The wait must not take the connection the store keeps for heartbeats,
// claims and settles. So it counts as a transactional handler (one of
// txSlots, never waited for), and starts only while the pool has a
// connection free beside the one it takes. Parked on the last connection,
// it left the beats of the worker's other claims none: unrelated jobs
// lost their claims and ran twice (review55b F1, F2: a pool of 2 beside
// the application's transaction; WorkTx at Concurrency 3 on a pool of 4).
func (o pgOps) reserveLockWait() (func(), error) { return o.eng.reserveLockWait() }

func (e *pgEngine) reserveLockWait() (func(), error) {
	select {
	case e.lockWaits <- struct{}{}:
	default:
		return nil, errNoLockWait
	}
	select {
	case e.txSlots <- struct{}{}:
	default:
		<-e.lockWaits
		return nil, errNoLockWait
	}
	release := func() { <-e.txSlots; <-e.lockWaits }
	if st := e.pool.Stat(); st.MaxConns()-st.AcquiredConns() < 2 {
		release()
		return nil, errNoLockWait
	}
	return release, nil
}

func (o pgOps) getJob(ctx context.Context, queue string, id int64) (*Job, error) {
	row, err := o.q.GetJob(ctx, pgdb.GetJobParams{ID: id, Queue: queue})
	if err != nil {
		return nil, err
	}
	return pgJob(row), nil
}

func (o pgOps) findJob(ctx context.Context, id int64) (*Job, error) {
	row, err := o.q.FindJob(ctx, id)
	if err != nil {
		return nil, err
	}
	return pgJob(row), nil
}

func (o pgOps) registerQueue(ctx context.Context, queue string, now time.Time) error {
	return o.q.RegisterQueue(ctx, pgdb.RegisterQueueParams{Name: queue, Now: now})
}

func (o pgOps) sweepExpired(ctx context.Context, queue string, now time.Time) (int64, error) {
	return o.q.SweepExpiredJobs(ctx, pgdb.SweepExpiredJobsParams{Queue: queue, Now: now})
}

func (o pgOps) cancel(ctx context.Context, queue string, id int64, now time.Time) (bool, error) {
	topic := claimTopic(queue)
	w := o.wake(topic)
	n, err := o.q.CancelJob(ctx, pgdb.CancelJobParams{Queue: queue, ID: id, Now: now, Wake: w})
	o.sent(topic, w)
	return n == 1, err
}

func (o pgOps) snooze(ctx context.Context, r snoozeReq) (bool, error) {
	n, err := o.q.SnoozeJob(ctx, pgdb.SnoozeJobParams{ID: r.id, ClaimToken: r.token, Now: r.now, RunAt: r.runAt})
	return n == 1, err
}

func (o pgOps) jobClaims(ctx context.Context, ids []int64) ([]jobClaim, error) {
	rows, err := o.q.JobClaims(ctx, ids)
	return mapRows(rows, err, func(r pgdb.JobClaimsRow) jobClaim {
		return jobClaim{id: r.ID, state: JobState(r.State), token: deref(r.ClaimToken), expires: deref(r.ClaimExpiresAt)}
	})
}

func (o pgOps) setQueuePaused(ctx context.Context, queue string, paused bool, now time.Time) error {
	topic := queueTopic(queue)
	w := o.wake(topic)
	err := o.q.SetQueuePaused(ctx, pgdb.SetQueuePausedParams{Queue: queue, Paused: paused, Now: now, Wake: w})
	o.sent(topic, w)
	return err
}

func (o pgOps) queuePaused(ctx context.Context, queue string) (bool, error) {
	return o.q.QueuePaused(ctx, queue)
}

func (o pgOps) requeue(ctx context.Context, queue string, id int64, now time.Time) (bool, error) {
	n, err := o.q.RequeueJob(ctx, pgdb.RequeueJobParams{Queue: queue, ID: id, Now: now})
	if err == nil && n == 1 {
		err = o.wakeOthers(ctx, queueTopic(queue))
	}
	return n == 1, err
}

// wakeOthers sends topic's wake to other processes (on commit, in a
// transaction) for an operator's write whose statement carries none: a
// job requeued or deleted. Workers elsewhere then claim a requeued job at
// once, and their Store.Changes hears of both; without it they waited for
// their poll and a console for its next sample. Not for hot paths: it is
// a statement of its own.
func (o pgOps) wakeOthers(ctx context.Context, topic string) error {
	w := o.wake(topic)
	var err error
	if w != "" {
		err = o.q.Notify(ctx, w)
	}
	o.sent(topic, w)
	return err
}

func (o pgOps) jobKeyHolder(ctx context.Context, queue string, id int64) (keyHolder, error) {
	r, err := o.q.JobKeyHolder(ctx, pgdb.JobKeyHolderParams{Queue: queue, ID: id})
	return keyHolder{key: r.UniqueKey, holder: deref(r.HolderID)}, err
}

func (o pgOps) queueStats(ctx context.Context, queue string, now time.Time) (QueueStats, error) {
	r, err := o.q.QueueStats(ctx, pgdb.QueueStatsParams{Queue: queue, Now: now, Cap: clampLimit(StatsCountLimit)})
	return QueueStats{Ready: r.Ready, Scheduled: r.Scheduled, Running: r.Running, Dead: r.Dead,
		Completed: r.Completed, Cancelled: r.Cancelled, Expired: r.Expired,
		OldestReady: now.Sub(r.OldestReady)}, err
}

func (o pgOps) nextDue(ctx context.Context, queue string) (*time.Time, error) {
	return dueTime(o.q.NextJobDue(ctx, queue))
}

func pgJob(r pgdb.AlkstoreJob) *Job {
	return &Job{ID: r.ID, Queue: r.Queue, Payload: r.Payload, Priority: int(r.Priority), State: JobState(r.State),
		Attempts: int(r.Attempts), MaxAttempts: int(r.MaxAttempts), CreatedAt: r.CreatedAt, RunAt: r.RunAt,
		ClaimedAt: r.ClaimedAt, ClaimExpiresAt: r.ClaimExpiresAt, ExpiresAt: r.ExpiresAt,
		Worker: deref(r.Worker), LastError: deref(r.LastError), Errors: attemptErrors(r.Errors), FinishedAt: r.FinishedAt,
		Headers: decodeHeaders(r.Headers), token: deref(r.ClaimToken)}
}

// pgHeaderArray is the headers column of a batch of jobs for unnest: nil
// when no job has headers (unnest of it yields no rows, and Postgres pads
// the shorter arrays of the select list with NULLs, so every row gets
// NULL); otherwise one JSON text per job, "" for none (NULLIF makes it
// NULL).
func pgHeaderArray(jobs []newJob) []string {
	var hs []string
	for i, j := range jobs {
		if j.headers == nil {
			continue
		}
		if hs == nil {
			hs = make([]string, len(jobs))
		}
		hs[i] = string(j.headers)
	}
	return hs
}

func (o pgOps) requeueDead(ctx context.Context, r requeueDeadReq) (int64, error) {
	n, err := o.q.RequeueDeadJobs(ctx, pgdb.RequeueDeadJobsParams{Queue: r.queue, Now: r.now, Before: r.before, Batch: clampLimit(r.batch)})
	if err == nil && n > 0 {
		err = o.wakeOthers(ctx, queueTopic(r.queue))
	}
	return n, err
}

func (o pgOps) deleteJob(ctx context.Context, queue string, id int64) (bool, error) {
	n, err := o.q.DeleteJob(ctx, pgdb.DeleteJobParams{Queue: queue, ID: id})
	if err == nil && n == 1 {
		err = o.wakeOthers(ctx, queueTopic(queue))
	}
	return n == 1, err
}

func (o pgOps) listJobs(ctx context.Context, r listJobsReq) ([]*Job, error) {
	switch r.state {
	case JobPending:
		rows, err := o.q.ListPendingJobs(ctx, pgdb.ListPendingJobsParams{Queue: r.queue, After: r.after, MaxJobs: clampLimit(r.limit)})
		return mapRows(rows, err, pgJob)
	case JobRunning:
		rows, err := o.q.ListRunningJobs(ctx, pgdb.ListRunningJobsParams{Queue: r.queue, After: r.after, MaxJobs: clampLimit(r.limit)})
		return mapRows(rows, err, pgJob)
	}
	rows, err := o.q.ListJobs(ctx, pgdb.ListJobsParams{Queue: r.queue, State: string(r.state), After: r.after, MaxJobs: clampLimit(r.limit)})
	return mapRows(rows, err, pgJob)
}

func (o pgOps) configureQueue(ctx context.Context, queue string, c QueueConfig, now time.Time) error {
	return o.q.ConfigureQueue(ctx, pgdb.ConfigureQueueParams{Name: queue, Now: now,
		CompletedRetentionUs: c.CompletedRetention.Microseconds(), DeadRetentionUs: retentionUs(c.DeadRetention)})
}

func (o pgOps) queueSettings(ctx context.Context) ([]QueueInfo, error) {
	rows, err := o.q.ListQueueSettings(ctx)
	return mapRows(rows, err, func(r pgdb.ListQueueSettingsRow) QueueInfo {
		return QueueInfo{Name: r.Name, Paused: r.Paused, Config: QueueConfig{
			CompletedRetention: time.Duration(r.CompletedRetentionUs) * time.Microsecond,
			DeadRetention:      fromRetentionUs(r.DeadRetentionUs)}}
	})
}

// enqueueUnique places a batch all or none: in auto-commit its rounds
// (placeUnique) run in one transaction, so that a round that fails (a job an
// application's trigger skipped) rolls back the jobs the rounds before it
// stored, as SQLite's one transaction does. A single job needs none.
//
// A batch's insert waits for each key another open transaction inserted,
// holding the keys it stored before it, so two batches whose keys overlap
// in opposite orders can wait for each other. PostgreSQL breaks such a
// cycle by failing one of them (40P01, after deadlock_timeout); in
// auto-commit that batch rolled back whole and goes again after a random
// wait, up to uniqueDeadlockTries times in all. Inside the caller's
// transaction the error is the caller's (the cycle may hold its own
// earlier writes).
func (o pgOps) enqueueUnique(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]Enqueued, error) {
	for try := 1; ; try++ {
		var placed []Enqueued
		err := o.allOrNone(ctx, len(jobs) > 1, func(o pgOps) error {
			var err error
			placed, err = o.placeUnique(ctx, queue, now, jobs)
			return err
		})
		if o.inTx || len(jobs) == 1 || try == uniqueDeadlockTries || !isDeadlock(err) {
			return placed, err
		}
		// Gone again at once, the batch could take a key back before the
		// batch that was let go took it and rebuild the same cycle (a
		// review saw four in a row): wait a random while, growing.
		t := time.NewTimer(rand.N(time.Duration(5<<try) * time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return placed, err
		case <-t.C:
		}
	}
}

// uniqueDeadlockTries bounds how often an auto-commit batch of unique jobs
// runs when PostgreSQL fails it to break a lock cycle (see enqueueUnique).
const uniqueDeadlockTries = 5

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

func (o pgOps) placeUnique(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]Enqueued, error) {
	return placeUnique(jobs, func(batch []newJob) ([]int64, error) {
		topic := queueTopic(queue)
		w := o.wake(topic)
		defer o.sent(topic, w)
		if len(batch) == 1 && batch[0].uniqueKey != nil { // the common case, without arrays
			j := batch[0]
			got, err := o.q.EnqueueUniqueJob(ctx, pgdb.EnqueueUniqueJobParams{Queue: queue, Payload: j.payload,
				Priority: j.priority, MaxAttempts: j.maxAttempts, Now: now, RunAt: j.runAt, ExpiresAt: j.expiresAt,
				UniqueKey: j.uniqueKey, UniqueStates: j.uniqueStates, Headers: pgJSON(j.headers), Wake: w})
			if err != nil || len(got) == 0 {
				return []int64{0}, err
			}
			return got[:1], nil
		}
		n := len(batch)
		p := pgdb.EnqueueUniqueJobsParams{Queue: queue, Now: now, Wake: w,
			Payloads: make([][]byte, n), Priorities: make([]int32, n), MaxAttempts: make([]int32, n),
			RunAts: make([]time.Time, n), HasExpiresAt: make([]bool, n), ExpiresAts: make([]time.Time, n),
			UniqueKeys: make([][]byte, n), UniqueStates: make([]string, n)}
		for i, j := range batch {
			p.Payloads[i], p.Priorities[i], p.MaxAttempts[i], p.RunAts[i] = j.payload, j.priority, j.maxAttempts, j.runAt
			p.UniqueKeys[i], p.UniqueStates[i] = j.uniqueKey, j.uniqueStates
			if p.UniqueKeys[i] == nil {
				p.UniqueKeys[i] = []byte{} // NULLIF makes it NULL; a nil element would be NULL too, but say it
			}
			if j.expiresAt != nil {
				p.HasExpiresAt[i], p.ExpiresAts[i] = true, *j.expiresAt
			} else {
				p.ExpiresAts[i] = now
			}
		}
		p.Headers = pgHeaderArray(batch)
		rows, err := o.q.EnqueueUniqueJobs(ctx, p)
		if err != nil {
			return nil, err
		}
		inserted := make([]insertedJob, len(rows))
		for i, r := range rows {
			inserted[i] = insertedJob{id: r.ID, uniqueKey: r.UniqueKey}
		}
		return matchInserted(batch, inserted)
	}, func(keys [][]byte) (map[string]int64, error) {
		rows, err := o.q.UniqueJobIDs(ctx, keys)
		if err != nil {
			return nil, err
		}
		held := make(map[string]int64, len(rows))
		for _, r := range rows {
			held[string(r.UniqueKey)] = r.ID
		}
		return held, nil
	})
}
