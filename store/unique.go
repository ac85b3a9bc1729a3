package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ncruces/go-sqlite3"
)

// keyHeld reports whether err is a violation of the jobs' unique-key
// index (PostgreSQL's jobs_unique, 23505; SQLite's alk_jobs_unique,
// SQLITE_CONSTRAINT_UNIQUE on alk_jobs.unique_key): a unique key another
// job holds. Another unique violation (an application's trigger writing a
// row of its own, say) is not one: it stays the driver's error.
func keyHeld(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// jobs_unique_00039: the name 00039 builds it under before its rename.
		return pgErr.Code == "23505" && pgErr.TableName == "jobs" && strings.HasPrefix(pgErr.ConstraintName, "jobs_unique")
	}
	return errors.Is(err, sqlite3.CONSTRAINT_UNIQUE) && strings.Contains(err.Error(), "alk_jobs.unique_key")
}

// UniqueOpts make a job unique, as EnqueueOpts.Unique. While a job of the
// queue holds the key (it was enqueued with it and is in one of ByState's
// states), enqueueing another job with the same key adds nothing and
// returns the holder's id. The database enforces it (a unique index), so it
// holds across processes and concurrent transactions.
//
// A key is unique within its queue: the queue is the job's kind (one
// handler per queue), so keys of different queues never collide.
type UniqueOpts struct {
	// Key is the idempotency key, 1 to MaxKeyLen bytes of UTF-8 without
	// control characters ("welcome-mail:42"); empty: the job is not unique.
	Key string
	// ByPeriod, when positive, scopes the key to one period of the store's
	// clock: enqueue time truncated to a multiple of ByPeriod since the Unix
	// epoch. A job enqueued in the next period is not a duplicate.
	ByPeriod time.Duration
	// ByState lists the states in which a job holds its key; nil:
	// pending, running and completed (a completed job is kept only under a
	// completed-job retention). It must include pending and running: a live
	// job moves between them and must not meet a second holder of its key.
	// A job leaves the key free when it reaches a state not listed (with the
	// default: cancelled, expired or dead, or when it is deleted).
	ByState []JobState
}

// Enqueued is one job EnqueueUnique or EnqueueManyUnique placed.
type Enqueued struct {
	ID int64 // the job added, or the job that held the key
	// Duplicate says the key was held: no job was added and ID is the
	// holder's.
	Duplicate bool
}

// defaultUniqueStates is UniqueOpts.ByState's nil.
var defaultUniqueStates = []JobState{JobPending, JobRunning, "completed"}

// jobStates are the states a job can be in (schema 00006).
var jobStates = []JobState{JobPending, JobRunning, "completed", "cancelled", "expired", JobDead}

// uniqueColumns resolves o into the stored key digest and state list; a nil
// digest when o has no key.
func uniqueColumns(queue string, now time.Time, o UniqueOpts) ([]byte, string, error) {
	if o.Key == "" {
		if o.ByPeriod != 0 || o.ByState != nil {
			return nil, "", fmt.Errorf("%w: UniqueOpts without a Key", ErrInvalidArgument)
		}
		return nil, "", nil
	}
	if err := validateText("unique key ", o.Key, MaxKeyLen); err != nil {
		return nil, "", err
	}
	if err := checkMicros("UniqueOpts.ByPeriod", o.ByPeriod); err != nil {
		return nil, "", err
	}
	states := o.ByState
	if states == nil {
		states = defaultUniqueStates
	}
	var list strings.Builder
	list.WriteByte(',')
	seen := map[JobState]bool{}
	for _, st := range states {
		if !containsState(jobStates, st) {
			return nil, "", fmt.Errorf("%w: UniqueOpts.ByState: unknown state %q", ErrInvalidArgument, st)
		}
		if !seen[st] {
			seen[st] = true
			list.WriteString(string(st) + ",")
		}
	}
	if !seen[JobPending] || !seen[JobRunning] {
		return nil, "", fmt.Errorf("%w: UniqueOpts.ByState must include pending and running", ErrInvalidArgument)
	}
	// The digest: queue, key and period start, each length-prefixed so no
	// two different triples meet.
	h := sha256.New()
	var n [8]byte
	for _, part := range []string{queue, o.Key} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	var period int64
	if o.ByPeriod > 0 {
		p := o.ByPeriod.Microseconds()
		period = now.UnixMicro() / p * p
		if now.UnixMicro() < 0 && now.UnixMicro()%p != 0 {
			period -= p
		}
	}
	binary.BigEndian.PutUint64(n[:], uint64(period))
	h.Write(n[:])
	return h.Sum(nil), list.String(), nil
}

func containsState(states []JobState, st JobState) bool {
	for _, s := range states {
		if s == st {
			return true
		}
	}
	return false
}

// uniqueRetries bounds how often placeUnique inserts again a job whose
// key's holder was gone before its id could be read (acked, cancelled or
// deleted between the two statements, on PostgreSQL).
const uniqueRetries = 8

// placeUnique is the one path of every enqueue that has unique jobs, above
// the engine seam. insert adds the jobs whose keys are free and returns,
// per job, its new id or 0 when its key was held (by a stored job or by an
// earlier job of the same batch); holders reads which jobs hold keys.
func placeUnique(jobs []newJob, insert func([]newJob) ([]int64, error),
	holders func(keys [][]byte) (map[string]int64, error)) ([]Enqueued, error) {
	out := make([]Enqueued, len(jobs))
	todo := make([]int, len(jobs))
	for i := range todo {
		todo[i] = i
	}
	for range uniqueRetries {
		batch := make([]newJob, len(todo))
		for k, i := range todo {
			batch[k] = jobs[i]
		}
		ids, err := insert(batch)
		if err != nil {
			return nil, err
		}
		var held []int
		var keys [][]byte
		for k, i := range todo {
			if ids[k] != 0 {
				out[i] = Enqueued{ID: ids[k]}
				continue
			}
			if jobs[i].uniqueKey == nil { // no key to be held: an application's trigger skipped it
				return nil, errSkippedRows("a job without a key", len(batch))
			}
			held = append(held, i)
			keys = append(keys, jobs[i].uniqueKey)
		}
		if len(held) == 0 {
			return out, nil
		}
		h, err := holders(keys)
		if err != nil {
			return nil, err
		}
		todo = todo[:0]
		for _, i := range held {
			if id, ok := h[string(jobs[i].uniqueKey)]; ok {
				out[i] = Enqueued{ID: id, Duplicate: true}
			} else {
				todo = append(todo, i) // the holder left meanwhile: the key is free again
			}
		}
		if len(todo) == 0 {
			return out, nil
		}
	}
	// Either each holder left before its id could be read, or an
	// application's trigger skips these jobs (a held key and a skipped
	// insert both come back without an id).
	return nil, notStored("%d jobs not placed after %d tries: their unique keys kept changing hands, or a trigger skips them", len(todo), uniqueRetries)
}

// EnqueueUnique adds a unique job (opts.Unique.Key must be set) and says
// whether it was a duplicate: then nothing was added and the result's ID is
// the job that holds the key. Enqueue does the same but returns only the id.
func (q *Queue) EnqueueUnique(ctx context.Context, payload []byte, opts EnqueueOpts) (Enqueued, error) {
	return q.enqueueUnique(ctx, autoWrite(ctx), payload, opts)
}

// EnqueueUniqueTx is EnqueueUnique inside tx. On PostgreSQL, when another
// open transaction added a job with the same key, it waits for that one to
// end: a duplicate if it commits, added if it rolls back.
func (q *Queue) EnqueueUniqueTx(ctx context.Context, tx Tx, payload []byte, opts EnqueueOpts) (Enqueued, error) {
	return q.enqueueUnique(ctx, tx.via(ctx), payload, opts)
}

func (q *Queue) enqueueUnique(ctx context.Context, v via, payload []byte, opts EnqueueOpts) (Enqueued, error) {
	if opts.Unique.Key == "" {
		return Enqueued{}, opErr("enqueue", q.name, fmt.Errorf("%w: EnqueueUnique needs opts.Unique.Key", ErrInvalidArgument))
	}
	r, err := q.enqueueMany(ctx, v, "enqueue", false, []NewJob{{Payload: payload, Opts: opts}})
	if err != nil {
		return Enqueued{}, err
	}
	return r.results()[0], nil
}

// EnqueueManyUnique is EnqueueMany for unique jobs (each needs
// Opts.Unique.Key) and reports, in order, each one's id and whether it was
// a duplicate. A key repeated in the batch is added once: the later jobs
// are duplicates of the first.
func (q *Queue) EnqueueManyUnique(ctx context.Context, jobs []NewJob) ([]Enqueued, error) {
	return q.enqueueManyUnique(ctx, autoWrite(ctx), jobs)
}

// EnqueueManyUniqueTx is EnqueueManyUnique inside tx, all or none there
// too: a batch of more than one job runs after a savepoint and rolls back
// to it when it fails, so none of its jobs stays in tx, and tx goes on on
// both engines (see EnqueueManyTx).
func (q *Queue) EnqueueManyUniqueTx(ctx context.Context, tx Tx, jobs []NewJob) ([]Enqueued, error) {
	return q.enqueueManyUnique(ctx, tx.via(ctx), jobs)
}

func (q *Queue) enqueueManyUnique(ctx context.Context, v via, jobs []NewJob) ([]Enqueued, error) {
	for i, nj := range jobs {
		if nj.Opts.Unique.Key == "" {
			return nil, opErr("enqueue many", q.name, fmt.Errorf("%w: job %d: EnqueueManyUnique needs Opts.Unique.Key", ErrInvalidArgument, i))
		}
	}
	r, err := q.enqueueMany(ctx, v, "enqueue many", true, jobs)
	if err != nil {
		return nil, err
	}
	return r.results(), nil
}

// EnqueueUnique encodes v and adds it as a unique job, as
// Queue.EnqueueUnique.
func (t *JobQueue[T]) EnqueueUnique(ctx context.Context, v T, opts EnqueueOpts) (Enqueued, error) {
	payload, err := t.encode(v)
	if err != nil {
		return Enqueued{}, opErr("enqueue", t.q.name, err)
	}
	return t.q.EnqueueUnique(ctx, payload, opts)
}

// EnqueueUniqueTx is EnqueueUnique inside tx.
func (t *JobQueue[T]) EnqueueUniqueTx(ctx context.Context, tx Tx, v T, opts EnqueueOpts) (Enqueued, error) {
	payload, err := t.encode(v)
	if err != nil {
		return Enqueued{}, opErr("enqueue", t.q.name, err)
	}
	return t.q.EnqueueUniqueTx(ctx, tx, payload, opts)
}

// EnqueueManyUnique encodes every value and adds the batch as
// Queue.EnqueueManyUnique does (every job needs Opts.Unique.Key).
func (t *JobQueue[T]) EnqueueManyUnique(ctx context.Context, jobs []TypedJob[T]) ([]Enqueued, error) {
	nj, err := t.encodeAll(jobs)
	if err != nil {
		return nil, err
	}
	return t.q.EnqueueManyUnique(ctx, nj)
}

// EnqueueManyUniqueTx is EnqueueManyUnique inside tx.
func (t *JobQueue[T]) EnqueueManyUniqueTx(ctx context.Context, tx Tx, jobs []TypedJob[T]) ([]Enqueued, error) {
	nj, err := t.encodeAll(jobs)
	if err != nil {
		return nil, err
	}
	return t.q.EnqueueManyUniqueTx(ctx, tx, nj)
}

// insertedJob is a row an insert of unique jobs returned.
type insertedJob struct {
	id        int64
	uniqueKey []byte // nil for a job without a key
}

// matchInserted maps the rows a multi-row insert returned back to its
// jobs: 0 for a job that was not inserted. A key's row goes to the first
// job with that key (later ones in the batch were its duplicates); jobs
// without a key were inserted in input order, so their ids ascend.
func matchInserted(batch []newJob, rows []insertedJob) ([]int64, error) {
	byKey := make(map[string]int64, len(rows))
	var plain []int64
	for _, r := range rows {
		if r.uniqueKey == nil {
			plain = append(plain, r.id)
		} else {
			byKey[string(r.uniqueKey)] = r.id
		}
	}
	slices.Sort(plain)
	ids := make([]int64, len(batch))
	for i, j := range batch {
		if j.uniqueKey == nil {
			if len(plain) == 0 { // every job without a key is inserted, unless a trigger skipped it
				return nil, errSkippedRows("a job without a key", len(batch))
			}
			ids[i], plain = plain[0], plain[1:]
			continue
		}
		if id, ok := byKey[string(j.uniqueKey)]; ok {
			ids[i] = id
			delete(byKey, string(j.uniqueKey))
		}
	}
	return ids, nil
}

// checkMicros refuses a duration the database cannot store: it keeps
// durations in whole microseconds, so a positive one below 1µs would be
// stored as 0 (which means "none" or breaks a CHECK) and a negative one
// means nothing.
func checkMicros(field string, d time.Duration) error {
	if d < 0 || (d > 0 && d < time.Microsecond) {
		return fmt.Errorf("%w: %s %s (want 0 or at least 1µs)", ErrInvalidArgument, field, d)
	}
	return nil
}
