package tests

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// On PostgreSQL, auto-commit Enqueues of one queue that arrive while two of
// its statements are in flight share an all-or-none batch
// (store/coalesce.go). These tests hold the two in flight (a statement hook
// on EnqueueJob, which runs after the statement committed), start callers
// that must then wait in the coalescer, and let the leads go. On SQLite
// nothing is shared: the same calls run one by one, and the same promises
// must hold.

// coalesceGate holds single-job statements in the hook while set.
type coalesceGate struct {
	in   atomic.Int64
	hold chan struct{}
}

// coalesceStore opens a store whose EnqueueJob statements stop in the hook
// while a gate is set, and counts the shared batches that committed
// (EnqueueSharedJobs statements that ran without error).
func coalesceStore(t *testing.T, e *engineEnv) (s *store.Store, gate *atomic.Pointer[coalesceGate], batches *atomic.Int64) {
	gate, batches = &atomic.Pointer[coalesceGate]{}, &atomic.Int64{}
	s = e.openHooked(t, func(name string) {
		switch name {
		case "EnqueueJob":
			if g := gate.Load(); g != nil {
				g.in.Add(1)
				<-g.hold
			}
		case "EnqueueSharedJobs":
			batches.Add(1)
		}
	})
	return s, gate, batches
}

// coalesceRound starts two leads held in the hook (PostgreSQL), then one
// Enqueue a payload, each on its own context, and waits until every one of
// them is in the coalescer (PostgreSQL: the leads in flight, the others
// waiting to share a batch). release lets the leads return (they must
// succeed); wait waits for the other calls.
func coalesceRound(t *testing.T, e *engineEnv, q *store.Queue, gate *atomic.Pointer[coalesceGate], ctxs []context.Context, payloads []string) (ids []int64, errs []error, done []chan struct{}, release func()) {
	c := ctx(t)
	leads := make(chan error, 2)
	var g *coalesceGate
	if e.name == "pg" {
		g = &coalesceGate{hold: make(chan struct{})}
		gate.Store(g)
		for i := range 2 {
			go func() { _, err := q.Enqueue(c, fmt.Appendf(nil, "lead-%d", i), store.EnqueueOpts{}); leads <- err }()
		}
		require.Eventually(t, func() bool { return g.in.Load() == 2 }, 10*time.Second, time.Millisecond)
	}
	ids, errs = make([]int64, len(payloads)), make([]error, len(payloads))
	done = make([]chan struct{}, len(payloads))
	for i := range payloads {
		done[i] = make(chan struct{})
		go func() {
			defer close(done[i])
			ids[i], errs[i] = q.Enqueue(ctxs[i], []byte(payloads[i]), store.EnqueueOpts{})
		}()
	}
	if e.name == "pg" {
		require.Eventually(t, func() bool { return goroutinesIn("(*coalescer).enqueue") >= len(payloads)+2 },
			10*time.Second, time.Millisecond)
	}
	return ids, errs, done, func() {
		if g == nil {
			return
		}
		gate.Store(nil)
		close(g.hold)
		require.NoError(t, <-leads)
		require.NoError(t, <-leads)
	}
}

func waitAll(t *testing.T, done []chan struct{}) {
	t.Helper()
	for _, d := range done {
		select {
		case <-d:
		case <-time.After(time.Minute):
			t.Fatal("an Enqueue did not return")
		}
	}
}

// countPayload counts the jobs of queue holding payload.
func countPayload(t *testing.T, e *engineEnv, queue, payload string) int {
	sql := "SELECT count(*) FROM alkstore.jobs WHERE queue = $1 AND payload = $2"
	if e.name == "lite" {
		sql = "SELECT count(*) FROM alk_jobs WHERE queue = ? AND payload = ?"
	}
	var n int
	require.NoError(t, e.sqlDB(t).QueryRowContext(ctx(t), sql, queue, []byte(payload)).Scan(&n))
	return n
}

// TestCoalescedEnqueueRefusalFailsItsCallerOnly: an application's BEFORE
// INSERT trigger skips one job (returns NULL / RAISE(IGNORE)) and refuses
// another (an error) among callers that share a batch: those two callers
// fail as they would alone, every other caller gets the id of its own job,
// and every other job is stored exactly once. Many rounds, each with a
// shared batch on PostgreSQL.
func TestCoalescedEnqueueRefusalFailsItsCallerOnly(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s, gate, batches := coalesceStore(t, e)
		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION filter_job() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF NEW.payload LIKE 'skip%'::bytea THEN RETURN NULL; END IF;
					IF NEW.payload LIKE 'refuse%'::bytea THEN RAISE EXCEPTION 'refused by the application'; END IF;
					RETURN NEW;
				END $$`,
				`CREATE TRIGGER filter_job BEFORE INSERT ON alkstore.jobs FOR EACH ROW EXECUTE FUNCTION filter_job()`)
		} else {
			e.execSQL(t, `CREATE TRIGGER skip_job BEFORE INSERT ON alk_jobs WHEN CAST(NEW.payload AS TEXT) LIKE 'skip%'
				BEGIN SELECT RAISE(IGNORE); END`,
				`CREATE TRIGGER refuse_job BEFORE INSERT ON alk_jobs WHEN CAST(NEW.payload AS TEXT) LIKE 'refuse%'
				BEGIN SELECT RAISE(ABORT, 'refused by the application'); END`)
		}
		q := s.Queue("filtered")
		c := ctx(t)
		_, err := q.Enqueue(c, []byte("first"), store.EnqueueOpts{}) // registers the queue
		require.NoError(t, err)
		_, skippedAlone := q.Enqueue(c, []byte("skip-alone"), store.EnqueueOpts{})
		require.Error(t, skippedAlone, "a skipped job's lone Enqueue")
		const rounds = 12
		for r := range rounds {
			batches.Store(0)
			payloads := make([]string, 6)
			for i := range payloads {
				payloads[i] = fmt.Sprintf("r%d-%d", r, i)
			}
			// Rounds with no refusal (the shared batch commits), then one
			// skipped job, one refused, or both.
			if r%4 == 1 || r%4 == 3 {
				payloads[r%6] = fmt.Sprintf("skip-r%d", r)
			}
			if r%4 == 2 || r%4 == 3 {
				payloads[(r+3)%6] = fmt.Sprintf("refuse-r%d", r)
			}
			ctxs := make([]context.Context, len(payloads))
			for i := range ctxs {
				ctxs[i] = c
			}
			ids, errs, done, release := coalesceRound(t, e, q, gate, ctxs, payloads)
			release()
			waitAll(t, done)
			if e.name == "pg" && r%4 == 0 { // (the hook sees statements that succeed only)
				assert.Positive(t, batches.Load(), "round %d: no shared batch was sent", r)
			}
			seen := map[int64]bool{}
			for i, p := range payloads {
				switch {
				case strings.HasPrefix(p, "skip"):
					if assert.Error(t, errs[i], "round %d: the skipped job's caller", r) {
						assert.Equal(t, skippedAlone.Error(), errs[i].Error(), "round %d: not the error of a lone Enqueue", r)
					}
				case strings.HasPrefix(p, "refuse"):
					if assert.Error(t, errs[i], "round %d: the refused job's caller", r) {
						assert.Contains(t, errs[i].Error(), "refused by the application")
						assert.Contains(t, errs[i].Error(), `enqueue "filtered"`)
					}
				default:
					if !assert.NoError(t, errs[i], "round %d: caller %s", r, p) {
						continue
					}
					assert.False(t, seen[ids[i]], "round %d: id %d given twice", r, ids[i])
					seen[ids[i]] = true
					j, err := q.Job(c, ids[i])
					require.NoError(t, err)
					assert.Equal(t, p, string(j.Payload), "round %d: id %d is not its caller's job", r, ids[i])
				}
				want := 1
				if errs[i] != nil {
					want = 0
				}
				assert.Equal(t, want, countPayload(t, e, "filtered", p), "round %d: rows of %s", r, p)
			}
		}
	})
}

// TestCoalescedEnqueueCallerLeavesWhileItsBatchWaits: a shared batch waits
// on a lock another connection holds. A caller whose context ends returns
// at once with its context's error while the others keep waiting (the
// batch has no deadline of its own) and, once the lock is released, get
// their jobs stored once. When every caller's context ends, the batch is
// cancelled: its wait ends while the lock is still held, and none of its
// jobs is stored. On SQLite the calls wait on the writer lock instead.
func TestCoalescedEnqueueCallerLeavesWhileItsBatchWaits(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s, gate, _ := coalesceStore(t, e)
		q := s.Queue("locked")
		c := ctx(t)
		_, err := q.Enqueue(c, []byte("first"), store.EnqueueOpts{})
		require.NoError(t, err)
		db := e.sqlDB(t)
		waiting := func() int { // PostgreSQL: shared batches waiting for the table lock
			var n int
			require.NoError(t, db.QueryRowContext(c, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE NOT l.granted AND l.relation = 'alkstore.jobs'::regclass AND a.query LIKE '%EnqueueSharedJobs%'`).Scan(&n))
			return n
		}
		for r := range 4 {
			all := r%2 == 1 // every caller leaves, or only the first
			payloads := []string{fmt.Sprintf("leave-%d", r), fmt.Sprintf("stay-%d-a", r), fmt.Sprintf("stay-%d-b", r), fmt.Sprintf("stay-%d-c", r)}
			ctxs := make([]context.Context, len(payloads))
			cancels := make([]context.CancelFunc, len(payloads))
			for i := range ctxs {
				ctxs[i], cancels[i] = context.WithCancel(c)
				defer cancels[i]()
			}
			if all {
				for i := range payloads {
					payloads[i] = fmt.Sprintf("leave-%d-%d", r, i)
				}
			}
			var unlock func()
			lock := func() {
				conn, err := db.Conn(c)
				require.NoError(t, err)
				tx, err := conn.BeginTx(c, nil)
				require.NoError(t, err)
				if e.name == "pg" {
					_, err = tx.ExecContext(c, `LOCK TABLE alkstore.jobs IN SHARE MODE`)
				} else {
					_, err = tx.ExecContext(c, `INSERT INTO lock_probe VALUES (1)`)
				}
				require.NoError(t, err)
				unlock = func() { require.NoError(t, tx.Rollback()); require.NoError(t, conn.Close()) }
			}
			if e.name == "lite" {
				e.execSQL(t, `CREATE TABLE IF NOT EXISTS lock_probe (x INTEGER)`)
				lock() // held before the calls: they wait for the writer lock
			}
			ids, errs, done, release := coalesceRound(t, e, q, gate, ctxs, payloads)
			if e.name == "pg" {
				lock() // the leads' statements have committed; the batch will wait
				release()
				require.Eventually(t, func() bool { return waiting() == 1 }, 10*time.Second, time.Millisecond,
					"the shared batch does not wait on the lock")
			}
			leaving := 1
			if all {
				leaving = len(payloads)
			}
			for i := range leaving {
				cancels[i]()
				select {
				case <-done[i]:
				case <-time.After(30 * time.Second):
					t.Fatalf("round %d: a caller whose context ended did not return while the lock was held", r)
				}
				if e.name == "pg" {
					assert.ErrorIs(t, errs[i], context.Canceled, "round %d: %s", r, payloads[i])
				} else { // SQLite's interrupted wait for the writer lock reports SQLITE_BUSY
					assert.Error(t, errs[i], "round %d: %s", r, payloads[i])
				}
			}
			for i := leaving; i < len(payloads); i++ {
				select {
				case <-done[i]:
					t.Fatalf("round %d: %s returned while the lock was held: %d %v", r, payloads[i], ids[i], errs[i])
				default:
				}
			}
			if all && e.name == "pg" {
				require.Eventually(t, func() bool { return waiting() == 0 }, 10*time.Second, time.Millisecond,
					"the batch of callers that all left still waits")
			}
			unlock()
			waitAll(t, done)
			for i := leaving; i < len(payloads); i++ {
				if assert.NoError(t, errs[i], "round %d: %s", r, payloads[i]) {
					j, err := q.Job(c, ids[i])
					require.NoError(t, err)
					assert.Equal(t, payloads[i], string(j.Payload))
				}
				assert.Equal(t, 1, countPayload(t, e, "locked", payloads[i]), "round %d: rows of %s", r, payloads[i])
			}
			for i := range leaving {
				n := countPayload(t, e, "locked", payloads[i])
				if all || e.name == "lite" {
					assert.Zero(t, n, "round %d: %s stored although its batch was cancelled", r, payloads[i])
				} else {
					assert.LessOrEqual(t, n, 1, "round %d: %s stored twice", r, payloads[i])
				}
			}
		}
	})
}

// goroutinesIn counts the goroutines whose stack holds a call of fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		k := runtime.Stack(buf, true)
		if k < len(buf) {
			return strings.Count(string(buf[:k]), fn+"(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestCoalescedEnqueueWakesWorkers: jobs of a shared batch wake a worker
// waiting on their queue, in this store and in another one (the batch's
// NOTIFY), long before its one-minute safety poll. (The worker handles the
// held leads' jobs first, woken by their commits, then waits again.)
func TestCoalescedEnqueueWakesWorkers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		for _, other := range []bool{false, true} {
			t.Run(fmt.Sprint("other store ", other), func(t *testing.T) {
				s, gate, batches := coalesceStore(t, e)
				ws := s
				if other {
					ws = e.open(t)
				}
				name := fmt.Sprint("woken-", other)
				q := s.Queue(name)
				c := ctx(t)
				_, err := q.Enqueue(c, []byte("first"), store.EnqueueOpts{})
				require.NoError(t, err)
				var handled atomic.Int64
				wctx, cancel := context.WithCancel(c)
				werr := make(chan error, 1)
				go func() {
					werr <- ws.Queue(name).Work(wctx, store.WorkOpts{Concurrency: 4, PollInterval: time.Minute},
						func(ctx context.Context, j *store.Job) error { handled.Add(1); return nil })
				}()
				require.Eventually(t, func() bool { return handled.Load() == 1 }, 30*time.Second, time.Millisecond)
				payloads := []string{"w0", "w1", "w2", "w3", "w4", "w5"}
				ctxs := []context.Context{c, c, c, c, c, c}
				_, errs, done, release := coalesceRound(t, e, q, gate, ctxs, payloads)
				release()
				waitAll(t, done)
				for _, err := range errs {
					require.NoError(t, err)
				}
				if e.name == "pg" {
					assert.Positive(t, batches.Load(), "no shared batch was sent")
				}
				require.Eventually(t, func() bool { return handled.Load() == int64(1+len(payloads)+2*btoi(e.name == "pg")) },
					30*time.Second, time.Millisecond, "jobs not handled before the safety poll (handled %d)", handled.Load())
				cancel()
				require.NoError(t, <-werr)
			})
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
