package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// openHookedPool is openHooked with a PostgreSQL pool of maxConns
// connections (on SQLite, openHooked).
func (e *engineEnv) openHookedPool(t *testing.T, hook stmtHook, maxConns int32) *store.Store {
	t.Helper()
	if e.name != "pg" {
		return e.openHooked(t, hook)
	}
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = pgHookTracer{hook}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	require.NoError(t, err)
	s, err := store.OpenPool(ctx(t), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); pool.Close() })
	return s
}

// openHookedWarm is openHooked whose PostgreSQL pool has all its
// connections open before the test begins: a heartbeat waits for a
// connection only until its claims' leases run out, and one opened then
// (a new backend, under -race at load 10) took most of a lease
// (TestWorkerHeartbeatsEveryDueClaimInOneStatement lost its claims in 1
// of 3 runs), the machine's cost, not what a test of the beats means.
func (e *engineEnv) openHookedWarm(t *testing.T, hook stmtHook) *store.Store {
	t.Helper()
	if e.name != "pg" {
		return e.openHooked(t, hook)
	}
	return e.openWarmTraced(t, pgHookTracer{hook})
}

// openWarmTraced is openHookedWarm's PostgreSQL store, its statements
// traced by tracer.
func (e *engineEnv) openWarmTraced(t *testing.T, tracer pgx.QueryTracer) *store.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	require.NoError(t, err)
	s, err := store.OpenPool(ctx(t), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); pool.Close() })
	// Every connection at once (each Acquire beside the others opens one
	// when none is idle), then back to the pool, idle and open.
	conns := make([]*pgxpool.Conn, 0, cfg.MaxConns)
	for range cfg.MaxConns - pool.Stat().AcquiredConns() {
		conn, err := pool.Acquire(ctx(t))
		require.NoError(t, err)
		require.NoError(t, conn.Ping(ctx(t)))
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Release()
	}
	return s
}

// TestWorkerHeartbeatsEveryDueClaimInOneStatement: a worker extends the
// claims of all its long handlers with one statement a tick
// (HeartbeatJobs), not one statement (and one connection, on SQLite one
// writer transaction) per handler. Eight handlers run together until the
// worker has beaten three times; no HeartbeatJob (the one-job form, left
// to Job.Heartbeat) runs, there are no more HeartbeatJobs than ticks, and
// every job's claim was extended past the lease its claim gave it. On
// main (6291004) it fails: HeartbeatJob ran eight times a tick (24 by
// the third tick) and HeartbeatJobs does not exist. The pool is warm
// and the lease 1.5 s, so that a beat never waits for a new connection
// against a short lease (it once did, at load 10 under -race: 1 run of 3
// lost its claims).
func TestWorkerHeartbeatsEveryDueClaimInOneStatement(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const handlers = 8
		const visibility = 1500 * time.Millisecond
		var counts stmtCounts
		beats := make(chan struct{}, 1000)
		s := e.openHookedWarm(t, func(name string) {
			counts.hook(name)
			if name == "HeartbeatJob" || name == "HeartbeatJobs" {
				beats <- struct{}{}
			}
		})
		c := ctx(t)
		q := s.Queue("beats")
		for range handlers {
			_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		started := make(chan struct{}, handlers)
		release := make(chan struct{})
		var mu sync.Mutex
		var problems []string
		wc, stop := context.WithCancel(c)
		defer stop()
		var done sync.WaitGroup
		done.Add(handlers)
		var began time.Time
		var wg sync.WaitGroup
		wg.Go(func() {
			_ = q.Work(wc, store.WorkOpts{Concurrency: handlers, Visibility: visibility, Timeout: time.Minute},
				func(ctx context.Context, j *store.Job) error {
					defer done.Done()
					first := *j.ClaimExpiresAt
					started <- struct{}{}
					select {
					case <-release:
					case <-ctx.Done():
						mu.Lock()
						problems = append(problems, fmt.Sprintf("job %d: handler cancelled: %v", j.ID, context.Cause(ctx)))
						mu.Unlock()
						return context.Cause(ctx)
					}
					now, err := q.Job(context.Background(), j.ID)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						problems = append(problems, fmt.Sprintf("job %d: %v", j.ID, err))
					case now.ClaimExpiresAt == nil || !now.ClaimExpiresAt.After(first):
						problems = append(problems, fmt.Sprintf("job %d: claim never extended past %v (now %v)", j.ID, first, now.ClaimExpiresAt))
					}
					return nil
				})
		})
		for range handlers {
			select {
			case <-started:
			case <-c.Done():
				t.Fatal("the handlers did not all start")
			}
		}
		began = time.Now()
		// Three heartbeat statements, whatever their kind: on main the
		// first tick's eight (one per handler) pass it at once.
		for range 3 {
			select {
			case <-beats:
			case <-c.Done():
				t.Fatal("no heartbeat ran")
			}
		}
		elapsed := time.Since(began)
		close(release)
		done.Wait()
		stop()
		wg.Wait()
		require.Empty(t, problems)
		require.Zero(t, counts.count("HeartbeatJob"), "the worker beat its claims one statement each")
		ticks := int(elapsed/(visibility/6)) + 1
		require.LessOrEqual(t, counts.count("HeartbeatJobs"), ticks+1, "more heartbeat statements than ticks")
	})
}

// TestHeartbeatsKeepClaimsWhileConnectionsAreScarce: a worker's
// heartbeats hold every claim of its long handlers while connections are
// scarce and each heartbeat statement is slow. On PostgreSQL the store's
// pool has 2 connections, one held by the application's own transaction
// (an InTx blocked until the end); on SQLite statements share the writer.
// Every heartbeat statement holds its connection (writer) an eighth of
// the Visibility (a statement hook: a loaded server). Six handlers run
// three leases each, and a second store (another machine) works the same
// queue, taking any claim that lapses. Over three rounds (after a claim
// that warms the connection up) no handler is
// told its claim is lost and no job runs twice. On main (6291004) it
// fails in the first round: a tick's six one-job heartbeats queued one
// behind the other for the one connection (six eighths of a lease), the
// last claims lapsed, and the second store ran their jobs again.
func TestHeartbeatsKeepClaimsWhileConnectionsAreScarce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const handlers, rounds = 6, 3
		// A lease long enough that only the heartbeats' queueing, not a
		// loaded machine's stall, can make it lapse: at 600 ms the worker
		// itself took a lapsed claim again at load 30-40 (session 55).
		const visibility = time.Second
		s := e.openHookedPool(t, func(name string) {
			if name == "HeartbeatJob" || name == "HeartbeatJobs" {
				time.Sleep(visibility / 8) // the statement's connection stays held meanwhile
			}
		}, 2)
		c := ctx(t)
		if e.name == "pg" {
			held, release := make(chan struct{}), make(chan struct{})
			var tx sync.WaitGroup
			tx.Go(func() {
				_ = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
					if _, err := s.Stream("app").PublishTx(ctx, tx, []byte("x")); err != nil {
						return err
					}
					close(held)
					<-release
					return nil
				})
			})
			defer tx.Wait()
			defer close(release)
			<-held
		}
		// A first claim on a fresh connection is planned on a fresh server
		// backend: at load 20 it took most of a 600 ms lease before its
		// handlers started (the lease starts at the claim's time), a
		// claim's cost, not a heartbeat's. Warm the connection up.
		warm := s.Queue("scarce-warm")
		_, err := warm.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := warm.Claim(c, "warm", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.NoError(t, jobs[0].Ack(c))
		thief := e.open(t)
		for round := range rounds {
			q := s.Queue(fmt.Sprintf("scarce-%d", round))
			for range handlers {
				_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
				require.NoError(t, err)
			}
			var mu sync.Mutex
			runs := map[int64]int{}
			var problems []string
			run := func(who string) func(ctx context.Context, j *store.Job) error {
				return func(ctx context.Context, j *store.Job) error {
					mu.Lock()
					runs[j.ID]++
					if runs[j.ID] > 1 {
						problems = append(problems, fmt.Sprintf("round %d: job %d ran again (%s)", round, j.ID, who))
					}
					mu.Unlock()
					select {
					case <-time.After(3 * visibility):
						return nil
					case <-ctx.Done():
						if cause := context.Cause(ctx); errors.Is(cause, store.ErrClaimLost) {
							mu.Lock()
							problems = append(problems, fmt.Sprintf("round %d: job %d (%s): %v", round, j.ID, who, cause))
							mu.Unlock()
						}
						return context.Cause(ctx)
					}
				}
			}
			var started atomic.Int32
			wc, stop := context.WithCancel(c)
			var wg sync.WaitGroup
			main := run("the worker")
			wg.Go(func() {
				_ = q.Work(wc, store.WorkOpts{Concurrency: handlers, Visibility: visibility, Timeout: time.Minute},
					func(ctx context.Context, j *store.Job) error { started.Add(1); return main(ctx, j) })
			})
			for started.Load() < handlers {
				select {
				case <-c.Done():
					t.Fatal("the handlers did not all start")
				case <-time.After(time.Millisecond):
				}
			}
			// The other machine: it claims what lapses, at once.
			wg.Go(func() {
				_ = thief.Queue(q.Name()).Work(wc, store.WorkOpts{Concurrency: handlers, Visibility: visibility,
					Timeout: time.Minute, PollInterval: 10 * time.Millisecond}, run("the second store"))
			})
			for {
				st, err := thief.Queue(q.Name()).Stats(c) // not on the scarce pool
				require.NoError(t, err)
				if st.Ready+st.Scheduled+st.Running == 0 || c.Err() != nil {
					break
				}
				mu.Lock()
				failed := len(problems) > 0
				mu.Unlock()
				if failed {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			wg.Wait()
			require.Empty(t, problems)
			require.Len(t, runs, handlers)
		}
	})
}
