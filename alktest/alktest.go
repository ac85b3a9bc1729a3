// Package alktest helps test code that uses alkstore queues, as rivertest
// does for River: assert that a job was (or was not) enqueued, in a store or
// inside a transaction, matching its typed payload; run one given job
// through a handler without a worker loop (WorkJob, or Work to enqueue it
// first), on its own or inside a test transaction the test rolls back
// (WorkTx, WorkJobTx); and open a store of the test's own on either engine
// (NewStore).
//
// The assertions read every job of the queue, whatever its state, page by
// page in id order. The store forms read in a read-only transaction of
// their own that is one snapshot on both engines (REPEATABLE READ on
// PostgreSQL; on SQLite a read transaction, which takes no writer slot, so
// they work while a transaction of yours is open). The Tx forms read in
// the caller's transaction and see what it sees, its uncommitted jobs
// included; at PostgreSQL's default READ COMMITTED each page is its own
// statement, and a job is still read once, in a state it had, however it
// moves between states meanwhile (pages follow ids, not states).
package alktest

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/alkstore/alkstore/internal/jobhook"
	"github.com/alkstore/alkstore/store"
)

// pageSize is how many jobs one read of an assertion holds (payloads may
// be up to 4 MiB each).
const pageSize = 100

// hooks are the store operations alktest needs that are not public API.
var hooks = jobhook.Get[*store.Queue, store.Tx, *store.Job]()

// Match selects jobs by their decoded payload (and the job, for its
// priority, state or run time). A nil Match matches every job, those whose
// payload does not decode included; a non-nil one is asked only about jobs
// whose payload decodes.
type Match[T any] func(job *store.Job, v T) bool

// Payload matches jobs whose decoded payload equals want
// (reflect.DeepEqual). When no job matches, the failure says which job is
// closest and how its payload differs from want.
func Payload[T any](want T) Match[T] {
	return func(j *store.Job, v T) bool {
		if reflect.DeepEqual(v, want) {
			return true
		}
		if j != nil {
			if m, ok := asking.Load(j); ok {
				m.(*miss).want = want
			}
		}
		return false
	}
}

// asking holds the job an assertion is asking its match about, for the
// duration of that call only (ask), and a Payload match turned down
// records there the payload it wanted, so that a failure can say how the
// job differs. A match called outside an assertion finds no entry and
// keeps nothing: it kept each job it turned down, payload and all, until
// alktest read that job again (attack58), for ever for the jobs of a
// match called on its own.
var asking sync.Map // *store.Job → *miss

// miss is what a Payload match turned down: the value it wanted.
type miss struct{ want any }

// ask is match's answer about j's payload v, and the value a Payload
// match wanted when it turned j down (nil otherwise).
func ask[T any](match Match[T], j *store.Job, v T) (ok bool, want any) {
	m := &miss{}
	asking.Store(j, m)
	defer asking.Delete(j)
	ok = match(j, v)
	return ok, m.want
}

// RequireEnqueued fails tb unless q holds a job (in any state) that match
// accepts, and returns the first such job, in enqueue (id) order. The
// failure lists the queue's jobs and, for a Payload match, says how the
// closest one differs.
func RequireEnqueued[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], match Match[T]) *store.Job {
	tb.Helper()
	return requireFound(ctx, tb, q, nil, match)
}

// RequireEnqueuedTx is RequireEnqueued inside tx: it sees the jobs tx
// enqueued and has not committed.
func RequireEnqueuedTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T], match Match[T]) *store.Job {
	tb.Helper()
	return requireFound(ctx, tb, q, &tx, match)
}

// RequireNotEnqueued fails tb if q holds a job that match accepts.
func RequireNotEnqueued[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], match Match[T]) {
	tb.Helper()
	requireNone(ctx, tb, q, nil, match)
}

// RequireNotEnqueuedTx is RequireNotEnqueued inside tx.
func RequireNotEnqueuedTx[T any](ctx context.Context, tb testing.TB, tx store.Tx, q *store.JobQueue[T], match Match[T]) {
	tb.Helper()
	requireNone(ctx, tb, q, &tx, match)
}

func requireFound[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], tx *store.Tx, match Match[T]) *store.Job {
	tb.Helper()
	mustStore(tb, q)
	var found *store.Job
	r := newReport(q, tx)
	scan(ctx, tb, q, tx, func(j *store.Job) bool {
		v, err := q.Payload(j)
		ok, want := match == nil, any(nil)
		if !ok && err == nil {
			ok, want = ask(match, j, v)
		}
		if ok {
			want = nil
		}
		r.add(j, v, err, want)
		if ok {
			found = j
		}
		return !ok
	})
	if found == nil {
		tb.Fatalf("%s", r.noMatch())
	}
	return found
}

func requireNone[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], tx *store.Tx, match Match[T]) {
	tb.Helper()
	mustStore(tb, q)
	var found *store.Job
	var payloadErr error
	scan(ctx, tb, q, tx, func(j *store.Job) bool {
		v, err := q.Payload(j)
		ok := match == nil || (err == nil && match(j, v))
		if ok {
			found, payloadErr = j, err
			return false
		}
		return true
	})
	if found != nil {
		r := newReport(q, tx)
		tb.Fatalf("alktest: job %d of queue %q%s matches, want none: %s", found.ID, q.Queue().Name(), r.where, describe(found, payloadErr))
	}
}

// mustStore fails tb unless q is a handle of an open store's queue.
func mustStore[T any](tb testing.TB, q *store.JobQueue[T]) {
	tb.Helper()
	if q == nil || q.Queue().Store() == nil {
		tb.Fatalf("alktest: queue has no store (a nil or zero-value handle?)")
	}
}

// scan hands each job of q to fn, in id order, until fn returns false.
func scan[T any](ctx context.Context, tb testing.TB, q *store.JobQueue[T], tx *store.Tx, fn func(*store.Job) bool) {
	tb.Helper()
	err := hooks.ScanJobs(ctx, q.Queue(), tx, pageSize, func(page []*store.Job) bool {
		for _, j := range page {
			if !fn(j) {
				return false
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("alktest: read the jobs of queue %q: %v", q.Queue().Name(), err)
	}
}
