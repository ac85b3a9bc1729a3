package store

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
	"github.com/alkstore/alkstore/internal/litedriver"
)

// Queue statements on SQLite. Times are stored as unix microseconds.

func (o liteOps) enqueue(ctx context.Context, queue, _ string, now time.Time, j newJob) (int64, error) {
	res, err := o.q.EnqueueJobCounted(ctx, litedb.EnqueueJobCountedParams{Queue: queue, Payload: j.payload, Priority: int64(j.priority),
		MaxAttempts: int64(j.maxAttempts), Now: now.UnixMicro(), RunAt: j.runAt.UnixMicro(), ExpiresAt: micros(j.expiresAt),
		Headers: liteHeaders(j.headers)})
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, cmp.Or(err, errSkipped("job"))
	}
	return res.LastInsertId()
}

// enqueueMany inserts the jobs with one statement per chunk of about
// enqueueChunk bytes of JSON (a batch of big payloads is not one string of
// gigabytes), all in one transaction on the writer slot: EnqueueJobsAlike
// for a run of at least alikeMin jobs that differ only in their payloads
// (or the batch's last jobs), EnqueueJobs for the rest. Inside the caller's
// transaction it runs after a savepoint (see allOrNone): a statement of
// several rows can fail half way (a trigger's RAISE(FAIL) keeps the rows
// before it; RAISE(IGNORE) skips a row and the batch is refused after).
//
// The statements are their Counted forms, without RETURNING (which SQLite
// runs as a trigger program a row, a fifth of the insert): each chunk reads
// JobIDCeiling first, and its ids are the ceiling's successors up to the
// statement's last_insert_rowid when there are exactly as many as the rows
// it stored. They are not when an application's trigger inserted jobs
// between the batch's: the batch is then rolled back (all or none) and
// stored again with RETURNING, whose ids say which rows are the batch's.
// An adopted transaction takes the RETURNING forms from the start (see
// liteOps.adopted).
func (o liteOps) enqueueMany(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]int64, error) {
	ids, err := o.enqueueBatch(ctx, queue, now, jobs, !o.adopted)
	if errors.Is(err, errIDsInterleaved) {
		ids, err = o.enqueueBatch(ctx, queue, now, jobs, false)
	}
	return ids, err
}

// errIDsInterleaved: a counted insert's ids are not contiguous (see
// enqueueMany); never returned to a caller.
var errIDsInterleaved = errors.New("alkstore: jobs inserted between the batch's")

// enqueueBatch is enqueueMany's one try: counted says by the Counted
// statements, returning errIDsInterleaved when their ids cannot be told.
func (o liteOps) enqueueBatch(ctx context.Context, queue string, now time.Time, jobs []newJob, counted bool) ([]int64, error) {
	ids := make([]int64, 0, len(jobs))
	err := o.allOrNone(ctx, len(jobs) > 1, func(q *litedb.Queries) error {
		for rest := jobs; len(rest) > 0; {
			if n := alikeRun(rest, enqueueChunk); n >= alikeMin || n == len(rest) {
				got, err := insertAlike(ctx, q, queue, now, rest[0], payloadsJSONB(rest[:n], newJobPayload), n, counted, ids)
				if err != nil {
					return err
				}
				ids, rest = got, rest[n:]
				continue
			}
			js, n := jobsJSON(rest, enqueueChunk)
			if counted {
				ceiling, err := q.JobIDCeiling(ctx)
				if err != nil {
					return err
				}
				res, err := q.EnqueueJobsCounted(ctx, litedb.EnqueueJobsCountedParams{Queue: queue, Now: now.UnixMicro(), Jobs: js})
				if err != nil {
					return err
				}
				if ids, err = countedIDs(ids, ceiling, res, n); err != nil {
					return err
				}
				rest = rest[n:]
				continue
			}
			got, err := q.EnqueueJobs(ctx, litedb.EnqueueJobsParams{Queue: queue, Now: now.UnixMicro(), Jobs: js})
			if err != nil {
				return err
			}
			if len(got) != n {
				return errSkippedRows(strconv.Itoa(n-len(got)), n)
			}
			slices.Sort(got) // inserted in order: ascending ids are the jobs' in order
			ids, rest = append(ids, got...), rest[n:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// countedIDs appends to ids those of the n jobs a Counted insert stored
// (res) after JobIDCeiling read ceiling, in the jobs' order. Each row the
// insert stored got a higher id than ceiling (AUTOINCREMENT), in order,
// the last one res's LastInsertId (a trigger's inserts do not change it
// once the trigger ends, nor res's RowsAffected): n rows between ceiling
// and that id when it is ceiling+n are the ids in between, all of them. A
// single row's id is its own.
func countedIDs(ids []int64, ceiling int64, res sql.Result, n int) ([]int64, error) {
	stored, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if stored != int64(n) {
		return nil, errSkippedRows(strconv.FormatInt(int64(n)-stored, 10), n)
	}
	last, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	if n > 1 && last-ceiling != stored {
		return nil, errIDsInterleaved
	}
	for id := last - stored + 1; id <= last; id++ {
		ids = append(ids, id)
	}
	return ids, nil
}

// enqueueAlike inserts jobs that all have the options j holds: in chunks of
// about enqueueChunk bytes of payloads, each one EnqueueJobsAlike, in one
// transaction on the writer slot (a savepoint in the caller's), its ids
// counted or returned as enqueueMany's.
func (o liteOps) enqueueAlike(ctx context.Context, queue string, now time.Time, j newJob, jobs []NewJob) ([]int64, error) {
	ids, err := o.enqueueAlikeBatch(ctx, queue, now, j, jobs, !o.adopted)
	if errors.Is(err, errIDsInterleaved) {
		ids, err = o.enqueueAlikeBatch(ctx, queue, now, j, jobs, false)
	}
	return ids, err
}

// enqueueAlikeBatch is enqueueAlike's one try (see enqueueBatch).
func (o liteOps) enqueueAlikeBatch(ctx context.Context, queue string, now time.Time, j newJob, jobs []NewJob, counted bool) ([]int64, error) {
	ids := make([]int64, 0, len(jobs))
	err := o.allOrNone(ctx, len(jobs) > 1, func(q *litedb.Queries) error {
		for rest := jobs; len(rest) > 0; {
			n := payloadRun(rest, enqueueChunk)
			got, err := insertAlike(ctx, q, queue, now, j, payloadsJSONB(rest[:n], jobPayload), n, counted, ids)
			if err != nil {
				return err
			}
			ids, rest = got, rest[n:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// payloadRun returns how many jobs from the first on go in one
// EnqueueJobsAlike: as alikeRun counts, up to limit bytes of payloads
// (and their JSONB headers), at least one job.
func payloadRun(jobs []NewJob, limit int) int {
	size := len(jobs[0].Payload) + 9
	n := 1
	for n < len(jobs) {
		if size += len(jobs[n].Payload) + 9; size > limit {
			break
		}
		n++
	}
	return n
}

// alikeMin is the shortest run of alike jobs inside a batch that gets a
// statement of its own (a batch's last jobs always may).
const alikeMin = 16

// liteMaxAttemptsDefault is alk_jobs.max_attempts's DEFAULT (schema
// 00038), which EnqueueJobsPlainCounted leaves to SQLite; DefaultMaxAttempts
// as that migration wrote it.
const liteMaxAttemptsDefault = 25

// insertAlike inserts n jobs that differ only in their payloads (b, their
// payloadsJSONB), with j's options, with one EnqueueJobsAlike
// (EnqueueJobsAlikeCounted when counted; EnqueueJobsPlainCounted when
// counted and j's priority, max attempts, expiry and headers are the
// columns' defaults)
// and appends their ids to ids, in the jobs' order.
func insertAlike(ctx context.Context, q *litedb.Queries, queue string, now time.Time, j newJob, b []byte, n int, counted bool, ids []int64) ([]int64, error) {
	if counted {
		ceiling, err := q.JobIDCeiling(ctx)
		if err != nil {
			return nil, err
		}
		var res sql.Result
		if j.priority == 0 && j.maxAttempts == liteMaxAttemptsDefault && j.expiresAt == nil && j.headers == nil {
			// The columns' defaults: the INSERT need not name them.
			res, err = q.EnqueueJobsPlainCounted(ctx, litedb.EnqueueJobsPlainCountedParams{Queue: queue,
				Now: now.UnixMicro(), RunAt: j.runAt.UnixMicro(), Payloads: b})
		} else {
			res, err = q.EnqueueJobsAlikeCounted(ctx, litedb.EnqueueJobsAlikeCountedParams{Queue: queue, Priority: int64(j.priority),
				MaxAttempts: int64(j.maxAttempts), Now: now.UnixMicro(), RunAt: j.runAt.UnixMicro(), ExpiresAt: micros(j.expiresAt),
				Headers: liteHeaders(j.headers), Payloads: b})
		}
		if err != nil {
			return nil, err
		}
		return countedIDs(ids, ceiling, res, n)
	}
	got, err := q.EnqueueJobsAlike(ctx, litedb.EnqueueJobsAlikeParams{Queue: queue, Priority: int64(j.priority),
		MaxAttempts: int64(j.maxAttempts), Now: now.UnixMicro(), RunAt: j.runAt.UnixMicro(), ExpiresAt: micros(j.expiresAt),
		Headers: liteHeaders(j.headers), Payloads: b})
	if err != nil {
		return nil, err
	}
	if len(got) != n {
		return nil, errSkippedRows(strconv.Itoa(n-len(got)), n)
	}
	slices.Sort(got) // inserted in order: ascending ids are the jobs' in order
	return append(ids, got...), nil
}

// enqueueChunk bounds the JSON of one EnqueueJobs statement, and the
// payloads of one EnqueueJobsAlike (a single job bigger than that goes
// alone).
const enqueueChunk = 1 << 20

// JSONB element types (https://sqlite.org/jsonb.html): the low four bits
// of an element's first byte.
const (
	jsonbNull    = 0x0
	jsonbTextRaw = 0xa // a string whose payload is its bytes, unescaped
	jsonbArray   = 0xb
)

// payloadsJSONB encodes the jobs' payloads (payload gives a job's) as
// EnqueueJobsAlike's JSONB array: each payload a raw string of its bytes
// (json_each's value is that text, which the statement casts to a BLOB:
// the same bytes, whatever they are), nil a JSON null (NULL).
func payloadsJSONB[J any](jobs []J, payload func(*J) []byte) []byte {
	size := 0
	for i := range jobs {
		if p := payload(&jobs[i]); p == nil {
			size++
		} else {
			size += jsonbHeaderLen(len(p)) + len(p)
		}
	}
	b := make([]byte, 0, jsonbHeaderLen(size)+size)
	b = appendJSONBHeader(b, jsonbArray, size)
	for i := range jobs {
		p := payload(&jobs[i])
		if p == nil {
			b = append(b, jsonbNull)
			continue
		}
		b = appendJSONBHeader(b, jsonbTextRaw, len(p))
		b = append(b, p...)
	}
	return b
}

func newJobPayload(j *newJob) []byte { return j.payload }

func jobPayload(j *NewJob) []byte { return j.Payload }

// appendJSONBHeader appends the header of a JSONB element of type t whose
// payload is n bytes: its size in the first byte's high four bits up to
// 11, else in the 1, 2, 4 or 8 big-endian bytes that 12, 13, 14 or 15
// there announce.
func appendJSONBHeader(b []byte, t byte, n int) []byte {
	switch {
	case n <= 11:
		return append(b, byte(n)<<4|t)
	case n <= math.MaxUint8:
		return append(b, 0xc0|t, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xd0|t), uint16(n))
	case uint64(n) <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xe0|t), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xf0|t), uint64(n))
}

// jsonbHeaderLen is the length of appendJSONBHeader's header for n bytes.
func jsonbHeaderLen(n int) int {
	switch {
	case n <= 11:
		return 1
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	case uint64(n) <= math.MaxUint32:
		return 5
	}
	return 9
}

// jobsJSON encodes jobs from the first on as EnqueueJobs' JSON array, until
// it passes limit bytes (at least one job), and returns it with the number
// of jobs it holds.
func jobsJSON(jobs []newJob, limit int) (string, int) {
	b := make([]byte, 0, min(limit, len(jobs)*(2*len(jobs[0].payload)+80))+2)
	b = append(b, '[')
	n := 0
	for _, j := range jobs {
		if n > 0 && len(b)+2*len(j.payload)+len(j.headers) > limit {
			break
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"p":`...)
		if j.payload == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '"')
			b = hex.AppendEncode(b, j.payload)
			b = append(b, '"')
		}
		b = append(b, `,"pr":`...)
		b = strconv.AppendInt(b, int64(j.priority), 10)
		b = append(b, `,"ma":`...)
		b = strconv.AppendInt(b, int64(j.maxAttempts), 10)
		b = append(b, `,"ra":`...)
		b = strconv.AppendInt(b, j.runAt.UnixMicro(), 10)
		b = append(b, `,"ex":`...)
		if j.expiresAt == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, j.expiresAt.UnixMicro(), 10)
		}
		if j.headers != nil { // a JSON object already: stored as its text
			b = append(b, `,"h":`...)
			b = append(b, j.headers...)
		}
		b = append(b, '}')
		n++
	}
	b = append(b, ']')
	return string(b), n
}

// claim runs in one transaction, so a cancelled claim either committed (and
// Claim returns its jobs) or rolled back: none is left running unseen. The
// writer slot holds from choosing the jobs (ClaimableReadyJobs) to stamping
// them. The jobs are made from the rows after the commit: every other write
// of the database waits while the writer slot is held (a worker's acks, its
// next claim), so the slot is held for the statements, not for the
// allocations of a hundred jobs (issue 18).
//
// The transaction is litedriver.WriteTx's, its statements prepared once on
// the writer's connection and run without database/sql. A claim reads the
// ready jobs and whether any claim of the queue lapsed (ClaimableReadyJobs);
// only when one did does it bury the exhausted ones (BuryExhaustedClaims)
// and read the claimable jobs again, lapsed claims included
// (ClaimableJobs). Both together took a one-job claim from 467k to 327k
// instructions (callgrind, the client; ClaimableReadyJobs says what the
// statements themselves save), and stamping one job by its id (ClaimJob)
// to 250k.
//
// A worker's claim also runs, after its stamp, the ack its worker lent it
// (r.lent, see lentAck): one commit for both. When that ack fails (a lent
// claim was lost: the counts fall short; or a statement failed), the
// transaction rolls back and the claim runs again without it, and the
// worker acks the lent jobs after, as an ack of its own, which says which
// claims were lost.
func (o liteOps) claim(ctx context.Context, r claimReq) ([]*Job, error) {
	if o.db == nil { // never: a claim is an auto-commit write (autoWrite)
		return nil, errors.New("a SQLite claim runs on the writer slot, in a transaction of its own")
	}
	var rows []liteClaimable
	defer func() { putClaimRows(rows) }()
	var lent []claimRef // the claims r.lent gave, settled in the claim's transaction
	n, taken := r.n, false
	stampTx := func(w *litedriver.Writer, ack bool) error {
		// The writer is ours, perhaps after a wait: the time of the claim,
		// and what freed up meanwhile.
		r.stamp(r.clock())
		now := r.now.UnixMicro()
		if r.grow != nil && !taken {
			n += r.grow()
		}
		// The rows are read into one reused row and kept with what a job
		// needs copied out of it: the payload (each its own), and the
		// other text columns only when set (rarely).
		rows = claimRowsFor(rows, n)
		lapsed := false
		keep := func(row *litedb.ClaimableRow) {
			if row.ID == 0 { // ClaimableReadyJobs: some claim lapsed
				lapsed = true
				return
			}
			c := liteClaimable{id: row.ID, payload: row.Payload, priority: row.Priority, attempts: row.Attempts,
				maxAttempts: row.MaxAttempts, createdAt: row.CreatedAt, runAt: row.RunAt, expiresAt: row.ExpiresAt}
			if row.LastError != nil {
				c.lastError = string(row.LastError)
			}
			if len(row.Errors) > 2 { // not "[]"
				c.errors = bytes.Clone(row.Errors)
			}
			if row.Headers != nil {
				c.headers = bytes.Clone(row.Headers)
			}
			rows = append(rows, c)
		}
		err := o.q.ClaimableReadyJobsOn(w, litedb.ClaimableReadyJobsParams{Queue: r.queue, Now: now, MaxJobs: int64(n)}, keep)
		if err != nil {
			return err
		}
		if lapsed {
			if _, err := o.q.BuryExhaustedClaimsOn(w, litedb.BuryExhaustedClaimsParams{Now: now, Queue: r.queue}); err != nil {
				return err
			}
			rows = rows[:0]
			err = o.q.ClaimableJobsOn(w, litedb.ClaimableJobsParams{Queue: r.queue, Now: now, MaxJobs: int64(n)}, keep)
			if err != nil {
				return err
			}
		}
		if len(rows) > n { // ready jobs and lapsed claims: the first n of the two in claim order
			slices.SortFunc(rows, func(a, b liteClaimable) int {
				switch {
				case a.priority != b.priority:
					return cmp.Compare(b.priority, a.priority)
				case a.runAt != b.runAt:
					return cmp.Compare(a.runAt, b.runAt)
				}
				return cmp.Compare(a.id, b.id)
			})
			rows = rows[:n]
		}
		if len(rows) > 0 {
			// The stamp's values are bound as the columns' own types, not
			// cast in the statement: SQLite evaluates an UPDATE's SET
			// expressions for every row, a CAST of each parameter included
			// (see ClaimJobs). sqlc types a parameter a nullable column
			// takes uncast as a pointer.
			stampedAt, expiresAt, token, worker := now, r.expiresAt.UnixMicro(), r.token, r.worker
			var stamped int64
			var ids []int64
			if len(rows) == 1 { // a list of one costs SQLite more than the id (ClaimJob)
				stamped, err = o.q.ClaimJobOn(w, litedb.ClaimJobParams{Now: &stampedAt, ClaimExpiresAt: &expiresAt,
					ClaimToken: &token, Worker: &worker, ID: rows[0].id})
			} else {
				ids = make([]int64, len(rows))
				for i, row := range rows {
					ids[i] = row.id
				}
				stamped, err = o.q.ClaimJobsOn(w, litedb.ClaimJobsParams{Now: &stampedAt, ClaimExpiresAt: &expiresAt,
					ClaimToken: &token, Worker: &worker, Ids: ids})
			}
			if err != nil {
				return err
			}
			if stamped != int64(len(rows)) { // the writer slot is held: cannot happen
				return fmt.Errorf("the claim stamped %d of the %d jobs it chose", stamped, len(rows))
			}
			if r.recent != nil {
				r.recent.record(token, rows[0].id, ids, r.expiresAt)
			}
		}
		if !ack {
			return nil
		}
		// The lent ack, after the stamp (which takes only pending jobs and
		// lapsed claims: a lent job whose claim lapsed and that this claim
		// took again is not the lent claim's any more, and its token finds
		// nothing). Its time is the claim's: the writer is held since.
		if !taken {
			taken, lent = true, r.lent.take()
		}
		if len(lent) == 0 {
			return nil
		}
		if err := o.settleHeld(w, r.queue, lent, now); err != nil {
			return lentAckFailed{err}
		}
		return nil
	}
	ack := r.lent != nil
	err := litedriver.WriteTx(ctx, o.db, func(w *litedriver.Writer) error { return stampTx(w, ack) })
	if failed := (lentAckFailed{}); errors.As(err, &failed) {
		// Some lent claim was lost, or the ack failed: claim again without
		// it; the worker acks the lent jobs after (see worker.settleLent).
		ack = false
		err = litedriver.WriteTx(ctx, o.db, func(w *litedriver.Writer) error { return stampTx(w, false) })
	}
	if err == nil && ack && len(lent) > 0 {
		r.lent.acked, r.lent.ids = true, make([]int64, len(lent))
		for i, c := range lent {
			r.lent.ids[i] = c.id
		}
	}
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	// Each job is allocated with its lock, claim times and first run
	// (claimedJob), in runs that double, as on PostgreSQL (see pgOps.claim):
	// 7 allocations for 100 jobs, where each job made five. A job kept
	// after its run keeps the others of its run alive with it (about half
	// a KiB each, and their payloads: the run is one object to the GC).
	jobs := make([]*Job, len(rows))
	var slab []claimedJob
	for i := range rows {
		if len(slab) == 0 {
			slab = make([]claimedJob, min(i+1, len(rows)-i))
		}
		jobs[i] = liteClaimedJob(&slab[0], &rows[i], r)
		slab = slab[1:]
	}
	return jobs, nil
}

// claimRows holds the claims' row buffers between claims (see
// claimRowsFor), of at most maxPooledClaimRows rows. A claim of 100 made
// one of 16 KiB, 152 of the 1,047 bytes a job of a burn-down allocated
// (each job's claimedJob is 640 more), and the collector's share of a job
// follows the bytes: callgrind of the whole process, a Work burn-down at
// Concurrency 100, 21,000 less 6,000 jobs, 81.76k-82.21k instructions a
// job (four runs) -> 80.92k-80.95k (two), the runtime's share 5.8k-6.5k ->
// 5.5k-5.6k, SQLite's unchanged (issue 18, session 57).
var claimRows sync.Pool

const maxPooledClaimRows = 1024

// claimRowsFor returns an empty buffer for n rows: rows when it has the
// room, else one from claimRows or a new one.
func claimRowsFor(rows []liteClaimable, n int) []liteClaimable {
	if cap(rows) >= n {
		return rows[:0]
	}
	if p, ok := claimRows.Get().(*[]liteClaimable); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]liteClaimable, 0, max(n, 16))
}

// putClaimRows gives a claim's row buffer back once its jobs are made
// (they keep no part of it), cleared so that it keeps no payload alive.
func putClaimRows(rows []liteClaimable) {
	if cap(rows) == 0 || cap(rows) > maxPooledClaimRows {
		return
	}
	rows = rows[:cap(rows)]
	clear(rows)
	claimRows.Put(&rows)
}

// liteClaimable is a row of ClaimableJobs, kept from the claim's
// transaction to its jobs (see liteOps.claim).
type liteClaimable struct {
	id, priority, attempts, maxAttempts, createdAt, runAt int64
	expiresAt                                             sql.NullInt64
	payload                                               []byte
	lastError                                             string
	errors, headers                                       []byte // nil unless set
}

// ack deletes the job in one statement when its queue keeps no completed
// jobs; otherwise one transaction decides again (deleted or completed), so
// a Configure cannot commit between the two statements.
func (o liteOps) ack(ctx context.Context, id, token int64, now time.Time) (bool, error) {
	p := litedb.AckJobParams{ID: id, ClaimToken: token, Now: now.UnixMicro()}
	n, err := o.q.AckJob(ctx, p)
	if err != nil || n == 1 {
		return n == 1, err
	}
	err = o.atomically(ctx, func(q *litedb.Queries) error {
		if n, err = q.AckJob(ctx, p); err != nil || n == 1 {
			return err
		}
		n, err = q.CompleteJob(ctx, litedb.CompleteJobParams{ID: id, ClaimToken: token, Now: p.Now})
		return err
	})
	return n == 1, err
}

func (o liteOps) release(ctx context.Context, id, token int64, now time.Time) (bool, error) {
	n, err := o.q.ReleaseJob(ctx, litedb.ReleaseJobParams{ID: id, ClaimToken: token, Now: now.UnixMicro()})
	return n == 1, err
}

// ackMany is ack for a batch. On its own (auto-commit) it is the worker's
// ack (ackGrowing): all or none, since a first statement committed on its
// own and a second transaction that the context then refused failed the
// call with the context's error although the held claims were acked (and
// a retry found them spent). Inside a transaction the jobs the first
// statement did not delete are acked by the next ones.
func (o liteOps) ackMany(ctx context.Context, queue string, claims []claimRef, now time.Time) ([]int64, error) {
	if o.db != nil {
		return o.ackGrowing(ctx, queue, claims, func() time.Time { return now }, nil)
	}
	js := claimPairs(claims)
	p := litedb.AckJobsParams{Now: now.UnixMicro(), Queue: queue, Claims: js}
	ids, err := o.q.AckJobs(o.queryWrite(ctx), p)
	if err != nil || len(ids) == len(claims) {
		return ids, err
	}
	err = o.atomically(ctx, func(q *litedb.Queries) error {
		deleted, err := q.AckJobs(ctx, p)
		if err != nil {
			return err
		}
		completed, err := q.CompleteJobs(ctx, litedb.CompleteJobsParams{Now: p.Now, Claims: p.Claims})
		ids = append(append(ids, deleted...), completed...)
		return err
	})
	return ids, err
}

// errClaimsLost ends an ack's transaction whose counts say that some claim
// was lost: it is acked again, returning the ids.
var errClaimsLost = errors.New("claims lost")

// ackGrowing is ackMany for a worker's ack loop, in one transaction, so a
// Configure cannot commit between its statements: once it holds the
// writer (which a claim may have held meanwhile) it reads the time and
// adds the claims more appends (the jobs that finished while it waited),
// so that one transaction acks them all. The
// statements count the rows they settle (AckJobsCounted, then
// CompleteJobsCounted for a queue that keeps completed jobs, one of each
// a claim token: ackCounted), in
// litedriver.WriteTx's transaction, prepared once on the writer's
// connection and run without database/sql (as a claim's): when the counts
// come to the claims, every claim was held and acked. Otherwise the
// transaction rolls back and acks again with AckJobs and CompleteJobs,
// which return the ids they settled.
func (o liteOps) ackGrowing(ctx context.Context, queue string, claims []claimRef, clock func() time.Time,
	more func([]claimRef) []claimRef) ([]int64, error) {
	if o.db == nil { // never: a worker's ack is an auto-commit write (autoWrite)
		return nil, errors.New("a SQLite worker's ack runs on the writer slot, in a transaction of its own")
	}
	var ids []int64
	err := litedriver.WriteTx(ctx, o.db, func(w *litedriver.Writer) error {
		if more != nil {
			claims = more(claims)
		}
		if len(claims) == 0 {
			return nil
		}
		if err := o.settleHeld(w, queue, claims, clock().UnixMicro()); err != nil {
			return err
		}
		ids = make([]int64, len(claims))
		for i, c := range claims {
			ids[i] = c.id
		}
		return nil
	})
	if !errors.Is(err, errClaimsLost) {
		if err != nil {
			return nil, err
		}
		return ids, nil
	}
	// Some claim was lost: ack the same claims again, saying which.
	err = o.atomically(ctx, func(q *litedb.Queries) error {
		js := claimPairs(claims)
		now := clock().UnixMicro()
		p := litedb.AckJobsParams{Now: now, Queue: queue, Claims: js}
		var err error
		if ids, err = q.AckJobs(ctx, p); err != nil || len(ids) == len(claims) {
			return err
		}
		completed, err := q.CompleteJobs(ctx, litedb.CompleteJobsParams{Now: now, Claims: js})
		ids = append(ids, completed...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// settleHeld acks claims (at least one) on w at now, as ackGrowing's
// first try does: it fails with errClaimsLost when the statements' counts
// say that some claim was not held (nothing is then known of which: the
// caller rolls the transaction back).
func (o liteOps) settleHeld(w *litedriver.Writer, queue string, claims []claimRef, now int64) error {
	var n int64
	var err error
	if len(claims) == 1 { // a JSON object of one costs SQLite more than the pair (AckJob)
		n, err = o.ackOne(w, claims[0], now)
	} else {
		n, err = o.ackCounted(w, queue, claims, now)
	}
	if err != nil {
		return err
	}
	if n != int64(len(claims)) {
		return errClaimsLost
	}
	return nil
}

// ackOne settles one claim on w and returns the rows it settled: a JSON
// object of one costs SQLite more than the pair (AckJob).
func (o liteOps) ackOne(w *litedriver.Writer, c claimRef, now int64) (int64, error) {
	n, err := o.q.AckJobOn(w, litedb.AckJobParams{ID: c.id, ClaimToken: c.token, Now: now})
	if err == nil && n == 0 {
		n, err = o.q.CompleteJobOn(w, litedb.CompleteJobParams{Now: now, ID: c.id, ClaimToken: c.token})
	}
	return n, err
}

// lentAckFailed ends a claim's transaction whose lent ack (see lentAck)
// failed with err (errClaimsLost included): the claim runs again without
// it.
type lentAckFailed struct{ err error }

func (e lentAckFailed) Error() string { return "the lent ack failed: " + e.err.Error() }
func (e lentAckFailed) Unwrap() error { return e.err }

// ackCounted is ackGrowing's ack of more than one claim on w, counting the
// rows it settles. A worker's batch holds the jobs of one or a few claims:
// the jobs of a claim with at least claimAckMin of them in the batch are
// settled by a list of their ids under its token (AckJobsOfClaim, or
// CompleteJobsOfClaim when the queue keeps completed jobs, which
// QueueKeepsCompleted reads first, in this transaction); the others by
// their pairs, all in one statement (AckJobsCounted, then
// CompleteJobsCounted when it deleted fewer). Each statement is fenced by
// its tokens: a job claimed again under another token is not settled by
// the old one's.
func (o liteOps) ackCounted(w *litedriver.Writer, queue string, claims []claimRef, now int64) (int64, error) {
	byToken := claims
	if !slices.IsSortedFunc(claims, claimRef.cmpToken) {
		byToken = slices.Clone(claims)
		slices.SortFunc(byToken, claimRef.cmpToken)
	}
	var settled int64
	var rest []claimRef // the claims with fewer than claimAckMin jobs here
	var ids []int64
	keeps, read := false, false
	for i := 0; i < len(byToken); {
		token := byToken[i].token
		j := i + 1
		for j < len(byToken) && byToken[j].token == token {
			j++
		}
		if j-i < claimAckMin {
			rest = append(rest, byToken[i:j]...)
			i = j
			continue
		}
		if !read {
			var err error
			if keeps, err = o.q.QueueKeepsCompletedOn(w, queue); err != nil {
				return settled, err
			}
			read, ids = true, make([]int64, 0, len(byToken))
		}
		ids = ids[:0]
		for _, c := range byToken[i:j] {
			ids = append(ids, c.id)
		}
		var n int64
		var err error
		if keeps {
			n, err = o.q.CompleteJobsOfClaimOn(w, litedb.CompleteJobsOfClaimParams{Now: now, ClaimToken: token, Queue: queue, Ids: ids})
		} else {
			n, err = o.q.AckJobsOfClaimOn(w, litedb.AckJobsOfClaimParams{ClaimToken: token, Now: now, Queue: queue, Ids: ids})
		}
		if err != nil {
			return settled, err
		}
		settled += n
		i = j
	}
	switch {
	case len(rest) == 1: // a JSON object of one costs SQLite more than the pair (AckJob)
		n, err := o.ackOne(w, rest[0], now)
		return settled + n, err
	case len(rest) > 1:
		js := claimPairs(rest)
		n, err := o.q.AckJobsCountedOn(w, litedb.AckJobsCountedParams{Now: now, Queue: queue, Claims: js})
		if err == nil && n < int64(len(rest)) {
			var m int64
			m, err = o.q.CompleteJobsCountedOn(w, litedb.CompleteJobsCountedParams{Now: now, Claims: js})
			n += m
		}
		return settled + n, err
	}
	return settled, nil
}

// claimAckMin is the fewest jobs of a claim that ackCounted settles by a
// list of their ids: each slot of a list costs its statement about 3.5k
// instructions, NULL or not (see AckJobsOfClaim), so a list pays for
// itself only with enough of its slots used (callgrind, the statements
// alone, 100 jobs in a batch under claims of k jobs each, a list of 16
// slots a claim against one statement of pairs: k = 16 28.2k against
// 35.6k a job, 12 29.9k/36.1k, 10 34.4k/37.2k, 7 35.1k/36.4k, 5
// 43.0k/38.2k, 1 132k/33.8k).
const claimAckMin = 8

func (o liteOps) retry(ctx context.Context, r retryReq) (bool, error) {
	n, err := o.q.RetryJob(ctx, litedb.RetryJobParams{ID: r.id, ClaimToken: r.token, Now: r.now.UnixMicro(),
		RunAt: r.runAt.UnixMicro(), Cause: r.cause})
	return n == 1, err
}

func (o liteOps) bury(ctx context.Context, r buryReq) (bool, error) {
	n, err := o.q.BuryJob(ctx, litedb.BuryJobParams{ID: r.id, ClaimToken: r.token, Now: r.now.UnixMicro(), Cause: r.cause,
		ExhaustedOnly: r.exhaustedOnly})
	return n == 1, err
}

func (o liteOps) heartbeat(ctx context.Context, r heartbeatReq) (bool, error) {
	n, err := o.q.HeartbeatJob(ctx, litedb.HeartbeatJobParams{ID: r.id, ClaimToken: r.token, Now: r.now.UnixMicro(),
		ClaimExpiresAt: r.deadline.UnixMicro()})
	return n == 1, err
}

// heartbeatMany takes the writer slot (waiting as long as ctx allows),
// then reads the time and runs HeartbeatJobs in a transaction of its own.
func (o liteOps) heartbeatMany(ctx context.Context, r beatReq) (beatRes, error) {
	if o.db == nil { // never: a worker's heartbeat is an auto-commit write
		return beatRes{}, errors.New("a worker's heartbeat runs on the writer slot, in a transaction of its own")
	}
	js := claimPairs(r.claims)
	var res beatRes
	err := litedriver.WriteTx(ctx, o.db, func(w *litedriver.Writer) error {
		res = beatRes{now: r.clock()}
		res.deadline = res.now.Add(r.extend).Truncate(time.Microsecond)
		ids, err := o.q.HeartbeatJobsOn(w, litedb.HeartbeatJobsParams{ClaimExpiresAt: res.deadline.UnixMicro(), Claims: js,
			Now: res.now.UnixMicro()})
		res.beat, res.live = ids, ids
		return err
	})
	return res, err
}

// holdClaims runs HoldClaims in the transaction of a transactional
// handler, which holds the writer (see runner.holdOthers).
func (o liteOps) holdClaims(ctx context.Context, claims []claimRef, now, deadline time.Time) ([]int64, error) {
	return o.q.HoldClaims(ctx, litedb.HoldClaimsParams{ClaimExpiresAt: deadline.UnixMicro(), Claims: claimPairs(claims),
		Now: now.UnixMicro()})
}

// setClaims runs HeartbeatJobs in the transaction of a transactional
// handler, as it commits (see runner.releaseOthers).
func (o liteOps) setClaims(ctx context.Context, claims []claimRef, now, deadline time.Time) ([]int64, error) {
	return o.q.HeartbeatJobs(ctx, litedb.HeartbeatJobsParams{ClaimExpiresAt: deadline.UnixMicro(), Claims: claimPairs(claims),
		Now: now.UnixMicro()})
}

// reviveClaims runs ReviveClaims in the transaction a transactional
// handler's began again on the writer once SQLite rolled its first back
// whole (see runner.settleAfresh).
func (o liteOps) reviveClaims(ctx context.Context, claims []claimRef, deadline time.Time) ([]int64, error) {
	return o.q.ReviveClaims(ctx, litedb.ReviveClaimsParams{ClaimExpiresAt: deadline.UnixMicro(), Claims: claimPairs(claims)})
}

// heartbeatLocked: HeartbeatJobs on SQLite skips no claim (the writer
// slot serialises every write, so no row is held apart from it), and a
// worker never calls this; it runs HeartbeatLockedJob as heartbeat runs
// HeartbeatJob.
func (o liteOps) heartbeatLocked(ctx context.Context, r lockedBeatReq) (time.Time, bool, error) {
	lease, err := o.q.HeartbeatLockedJob(ctx, litedb.HeartbeatLockedJobParams{ID: r.id, ClaimToken: r.token,
		Now: r.clock().UnixMicro(), ExtendUs: r.extend.Microseconds()})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, err
	case lease == nil: // never: the row's lease was set
		return time.Time{}, false, errors.New("HeartbeatLockedJob returned no lease")
	}
	return time.UnixMicro(*lease), true, nil
}

func (o liteOps) getJob(ctx context.Context, queue string, id int64) (*Job, error) {
	row, err := o.q.GetJob(ctx, litedb.GetJobParams{ID: id, Queue: queue})
	if err != nil {
		return nil, err
	}
	return liteJob(row), nil
}

func (o liteOps) findJob(ctx context.Context, id int64) (*Job, error) {
	row, err := o.q.FindJob(ctx, id)
	if err != nil {
		return nil, err
	}
	return liteJob(row), nil
}

func (o liteOps) registerQueue(ctx context.Context, queue string, now time.Time) error {
	return o.q.RegisterQueue(ctx, litedb.RegisterQueueParams{Name: queue, Now: now.UnixMicro()})
}

func (o liteOps) sweepExpired(ctx context.Context, queue string, now time.Time) (int64, error) {
	return o.q.SweepExpiredJobs(ctx, litedb.SweepExpiredJobsParams{Queue: queue, Now: now.UnixMicro()})
}

func (o liteOps) cancel(ctx context.Context, queue string, id int64, now time.Time) (bool, error) {
	n, err := o.q.CancelJob(ctx, litedb.CancelJobParams{Queue: queue, ID: id, Now: now.UnixMicro()})
	return n == 1, err
}

func (o liteOps) snooze(ctx context.Context, r snoozeReq) (bool, error) {
	n, err := o.q.SnoozeJob(ctx, litedb.SnoozeJobParams{ID: r.id, ClaimToken: r.token, Now: r.now.UnixMicro(), RunAt: r.runAt.UnixMicro()})
	return n == 1, err
}

func (o liteOps) jobClaims(ctx context.Context, ids []int64) ([]jobClaim, error) {
	js, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := o.q.JobClaims(ctx, string(js))
	return mapRows(rows, err, func(r litedb.JobClaimsRow) jobClaim {
		c := jobClaim{id: r.ID, state: JobState(r.State), token: deref(r.ClaimToken)}
		if r.ClaimExpiresAt != nil {
			c.expires = time.UnixMicro(*r.ClaimExpiresAt)
		}
		return c
	})
}

func (o liteOps) setQueuePaused(ctx context.Context, queue string, paused bool, now time.Time) error {
	p := int64(0)
	if paused {
		p = 1
	}
	return o.q.SetQueuePaused(ctx, litedb.SetQueuePausedParams{Queue: queue, Paused: p, Now: now.UnixMicro()})
}

func (o liteOps) queuePaused(ctx context.Context, queue string) (bool, error) {
	p, err := o.q.QueuePaused(ctx, queue)
	return p == 1, err
}

func (o liteOps) requeue(ctx context.Context, queue string, id int64, now time.Time) (bool, error) {
	n, err := o.q.RequeueJob(ctx, litedb.RequeueJobParams{Queue: queue, ID: id, Now: now.UnixMicro()})
	return n == 1, err
}

func (o liteOps) jobKeyHolder(ctx context.Context, queue string, id int64) (keyHolder, error) {
	r, err := o.q.JobKeyHolder(ctx, litedb.JobKeyHolderParams{Queue: queue, ID: id})
	return keyHolder{key: r.UniqueKey, holder: deref(r.HolderID)}, err
}

func (o liteOps) queueStats(ctx context.Context, queue string, now time.Time) (QueueStats, error) {
	r, err := o.q.QueueStats(ctx, litedb.QueueStatsParams{Queue: queue, Now: now.UnixMicro(), Cap: StatsCountLimit})
	return QueueStats{Ready: r.Ready, Scheduled: r.Scheduled, Running: r.Running, Dead: r.Dead,
		Completed: r.Completed, Cancelled: r.Cancelled, Expired: r.Expired,
		OldestReady: now.Sub(time.UnixMicro(r.OldestReady))}, err
}

func (o liteOps) nextDue(ctx context.Context, queue string) (*time.Time, error) {
	return dueTime(o.q.NextJobDue(ctx, queue))
}

func liteJob(r litedb.AlkJob) *Job {
	return &Job{ID: r.ID, Queue: r.Queue, Payload: r.Payload, Priority: int(r.Priority), State: JobState(r.State),
		Attempts: int(r.Attempts), MaxAttempts: int(r.MaxAttempts), CreatedAt: time.UnixMicro(r.CreatedAt),
		RunAt: time.UnixMicro(r.RunAt), ClaimedAt: fromMicros(r.ClaimedAt), ClaimExpiresAt: fromMicros(r.ClaimExpiresAt),
		ExpiresAt: fromMicros(r.ExpiresAt), Worker: deref(r.Worker), LastError: deref(r.LastError),
		Errors: attemptErrors([]byte(r.Errors)), FinishedAt: fromMicros(r.FinishedAt), Headers: decodeHeadersPtr(r.Headers),
		token: deref(r.ClaimToken)}
}

// liteClaimedJob makes c the job ClaimJobs stamped: the columns
// ClaimableJobs read (attempts before the claim's), and what the claim
// stamped (a running job has no finished_at).
func liteClaimedJob(c *claimedJob, row *liteClaimable, r claimReq) *Job {
	c.claimedAt, c.expiresAt = time.UnixMicro(r.now.UnixMicro()), time.UnixMicro(r.expiresAt.UnixMicro())
	var expires *time.Time
	if row.expiresAt.Valid {
		expires = new(time.UnixMicro(row.expiresAt.Int64))
	}
	c.j = Job{ID: row.id, Queue: r.queue, Payload: row.payload, Priority: int(row.priority), State: JobRunning,
		Attempts: int(row.attempts) + 1, MaxAttempts: int(row.maxAttempts), CreatedAt: time.UnixMicro(row.createdAt),
		RunAt: time.UnixMicro(row.runAt), ClaimedAt: &c.claimedAt, ClaimExpiresAt: &c.expiresAt,
		ExpiresAt: expires, Worker: r.worker, LastError: row.lastError,
		Errors: attemptErrors(row.errors), Headers: decodeHeaders(row.headers), token: r.token, mu: &c.mu, slot: &c.run}
	return &c.j
}

func micros(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	m := t.UnixMicro()
	return &m
}

func fromMicros(m *int64) *time.Time {
	if m == nil {
		return nil
	}
	t := time.UnixMicro(*m)
	return &t
}

// enqueueUnique inserts and reads the holders in one transaction on the
// writer slot, or after a savepoint in the caller's (all or none of a
// batch is stored; see allOrNone). A single job needs none:
// its insert is one statement, and placeUnique inserts it again should its
// key's holder leave before the holder's id is read.
func (o liteOps) enqueueUnique(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]Enqueued, error) {
	if len(jobs) == 1 {
		return liteOps{q: o.q, db: o.db}.placeUnique(ctx, queue, now, jobs)
	}
	var placed []Enqueued
	err := o.allOrNone(ctx, true, func(q *litedb.Queries) error {
		var err error
		placed, err = liteOps{q: q}.placeUnique(ctx, queue, now, jobs)
		return err
	})
	return placed, err
}

func (o liteOps) placeUnique(ctx context.Context, queue string, now time.Time, jobs []newJob) ([]Enqueued, error) {
	return placeUnique(jobs, func(batch []newJob) ([]int64, error) {
		ids := make([]int64, len(batch))
		for i, j := range batch {
			p := litedb.EnqueueUniqueJobsParams{Queue: queue, Payload: j.payload, Priority: int64(j.priority),
				MaxAttempts: int64(j.maxAttempts), Now: now.UnixMicro(), RunAt: j.runAt.UnixMicro(),
				ExpiresAt: micros(j.expiresAt), UniqueKey: j.uniqueKey, Headers: liteHeaders(j.headers)}
			if j.uniqueKey != nil {
				p.UniqueStates = &j.uniqueStates
			}
			var got []int64
			var err error
			if len(batch) == 1 {
				got, err = o.q.EnqueueUniqueJob(o.queryWrite(ctx), litedb.EnqueueUniqueJobParams(p))
			} else {
				got, err = o.q.EnqueueUniqueJobs(o.queryWrite(ctx), p)
			}
			if err != nil {
				return nil, err
			}
			if len(got) == 1 {
				ids[i] = got[0]
			}
		}
		return ids, nil
	}, func(keys [][]byte) (map[string]int64, error) {
		held := make(map[string]int64, len(keys))
		for _, k := range keys {
			got, err := o.q.UniqueJobIDs(ctx, k)
			if err != nil {
				return nil, err
			}
			if len(got) == 1 {
				held[string(k)] = got[0]
			}
		}
		return held, nil
	})
}

// claimPairs is appendClaims's JSON object as a string.
func claimPairs(claims []claimRef) string {
	return string(appendClaims(make([]byte, 0, 2+len(claims)*32), claims))
}

func (o liteOps) requeueDead(ctx context.Context, r requeueDeadReq) (int64, error) {
	return o.q.RequeueDeadJobs(ctx, litedb.RequeueDeadJobsParams{Queue: r.queue, Now: r.now.UnixMicro(),
		Before: r.before.UnixMicro(), Batch: int64(r.batch)})
}

func (o liteOps) deleteJob(ctx context.Context, queue string, id int64) (bool, error) {
	n, err := o.q.DeleteJob(ctx, litedb.DeleteJobParams{Queue: queue, ID: id})
	return n == 1, err
}

func (o liteOps) listJobs(ctx context.Context, r listJobsReq) ([]*Job, error) {
	switch r.state {
	case JobPending:
		rows, err := o.q.ListPendingJobs(ctx, litedb.ListPendingJobsParams{Queue: r.queue, After: r.after, MaxJobs: int64(r.limit)})
		return mapRows(rows, err, liteJob)
	case JobRunning:
		rows, err := o.q.ListRunningJobs(ctx, litedb.ListRunningJobsParams{Queue: r.queue, After: r.after, MaxJobs: int64(r.limit)})
		return mapRows(rows, err, liteJob)
	}
	rows, err := o.q.ListJobs(ctx, litedb.ListJobsParams{Queue: r.queue, State: string(r.state), After: r.after, MaxJobs: int64(r.limit)})
	return mapRows(rows, err, liteJob)
}

func (o liteOps) configureQueue(ctx context.Context, queue string, c QueueConfig, now time.Time) error {
	return o.q.ConfigureQueue(ctx, litedb.ConfigureQueueParams{Name: queue, Now: now.UnixMicro(),
		CompletedRetentionUs: c.CompletedRetention.Microseconds(), DeadRetentionUs: retentionUs(c.DeadRetention)})
}

func (o liteOps) queueSettings(ctx context.Context) ([]QueueInfo, error) {
	rows, err := o.q.ListQueueSettings(ctx)
	return mapRows(rows, err, func(r litedb.ListQueueSettingsRow) QueueInfo {
		return QueueInfo{Name: r.Name, Paused: r.Paused != 0, Config: QueueConfig{
			CompletedRetention: time.Duration(r.CompletedRetentionUs) * time.Microsecond,
			DeadRetention:      fromRetentionUs(r.DeadRetentionUs)}}
	})
}
