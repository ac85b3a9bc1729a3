package tests

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestHardShutdownBoundedWhileTheServerIsFrozenPostgres: a server that
// stops answering but keeps its sockets open (a frozen host, a partition
// without resets, a black-holed old primary) must not hold the loops or a
// hard Shutdown past their bound. The server's backends of the test's
// database are stopped (SIGSTOP; the test runs as root, the cluster as
// postgres) while a Work handler is in flight and a group member
// consumes; the handler then returns, its ack meeting the frozen server,
// and Shutdown stops hard at once. Shutdown must return within its bound
// (handlers' 5 s, the loops' 2 s more, a margin: 15 s here), and Work and
// Consume with ErrClosed by then, though the server stays frozen: the
// store gives its settles up, and the job runs again after its lease.
// Before, the ack waited for ever (pgx cuts a statement short only when
// its context ends, and the settle's never did), so Work returned only
// once the server was continued (attack60b F0). A freezer stops the
// backends the store connects afterwards too, until the test continues
// them all (t.Cleanup). PostgreSQL only: the fault is a server's that
// answers no more; SQLite has none, its statements run in the process.
func TestHardShutdownBoundedWhileTheServerIsFrozenPostgres(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	s := e.open(t)
	l := startFrozenLoops(t, s, context.Background())
	f := freezeWithAckInFlight(t, e, l)

	begun := time.Now()
	done, cancel := context.WithCancel(context.Background())
	cancel() // a hard stop right away
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(done) }()
	const bound = 15 * time.Second
	select {
	case err := <-shut:
		assert.Error(t, err, "a hard stop that gave settles up says so")
		assert.Less(t, time.Since(begun), bound, "Shutdown past its bound: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("Shutdown not returned 30 s after a hard stop, the server frozen")
	}
	l.mustReturn(t, begun, bound+5*time.Second, func(t *testing.T, name string, err error) {
		assert.ErrorIs(t, err, store.ErrClosed, name)
	})
	assert.False(t, f.continued(), "the server was frozen throughout")
}

// TestALoopsStopGivesUpNoAckOfAHealthyServerPostgres: the application's
// own pool (OpenPool) is busy, its transactions holding every connection,
// for a while after a Work stop with Grace 1 s; the handler had finished
// and its ack waits for a connection. The ack must wait and commit: a
// first form of the fix above gave a loop's settles up Grace plus 7 s
// after its stop, on a server that answers, and the job was left running
// to run again (review60b F0, 4 of 4). The connections are held until the
// stop's old bound (8 s) has passed. PostgreSQL only: OpenPool.
func TestALoopsStopGivesUpNoAckOfAHealthyServerPostgres(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(c, cfg)
	require.NoError(t, err)
	s, err := store.OpenPool(c, pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); pool.Close() })
	q := s.Queue("busy-pool")
	require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
	id, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	loops, stop := context.WithCancel(c)
	defer stop()
	worked := make(chan error, 1)
	go func() {
		worked <- q.Work(loops, store.WorkOpts{Concurrency: 1, Grace: time.Second, Visibility: 5 * time.Minute},
			func(ctx context.Context, j *store.Job) error {
				close(started)
				<-release
				return nil
			})
	}()
	<-started
	var held []*pgxpool.Conn
	var releaseOnce sync.Once
	releaseAll := func() {
		releaseOnce.Do(func() {
			for _, conn := range held {
				conn.Release()
			}
		})
	}
	t.Cleanup(releaseAll) // before Close's cleanup: pool.Close waits for them
	for int(pool.Stat().AcquiredConns()) < int(cfg.MaxConns) {
		actx, cancel := context.WithTimeout(c, 200*time.Millisecond)
		conn, err := pool.Acquire(actx)
		cancel()
		if err == nil {
			held = append(held, conn)
		}
	}
	begun := time.Now()
	stop()
	close(release) // the handler finished well within Grace
	select {
	case err := <-worked:
		t.Fatalf("Work returned %v after %v while its ack could not have run", err, time.Since(begun))
	case <-time.After(10 * time.Second): // past Grace + 7 s
	}
	releaseAll()
	select {
	case err := <-worked:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Work did not return once the pool had connections again")
	}
	j, err := q.Job(c, id)
	require.NoError(t, err)
	assert.Equal(t, store.JobCompleted, j.State, "the finished job's ack was carried out")
}

// TestADetachedLoopContextStillClaims: a handler's or a RunLoop
// function's context detached with context.WithoutCancel (a background
// task keeping the trace values) claims after the loop returned: the
// caller asked for no end. A first form of the fix above kept each loop's
// give-up point among its context's values and ended it as the loop
// returned: the claim failed with "timeout: context already done"
// (review60b F1, both forms, 4 of 4 on PostgreSQL). Both engines.
func TestADetachedLoopContextStillClaims(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q, other := s.Queue("detached-a"), s.Queue("detached-b")
		_, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{})
		require.NoError(t, err)
		for range 2 {
			_, err = other.Enqueue(c, []byte("o"), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		loops, stop := context.WithCancel(c)
		var captured context.Context
		require.NoError(t, q.Work(loops, store.WorkOpts{Concurrency: 1}, func(ctx context.Context, j *store.Job) error {
			captured = ctx
			stop()
			return nil
		}))
		jobs, err := other.Claim(context.WithoutCancel(captured), "bg", 1, time.Minute)
		require.NoError(t, err, "Claim with a detached handler context after Work returned")
		assert.Len(t, jobs, 1)

		var rl context.Context
		require.NoError(t, s.RunLoop(c, "detached", func(ctx context.Context) error { rl = ctx; return nil }))
		jobs, err = other.Claim(context.WithoutCancel(rl), "bg", 1, time.Minute)
		require.NoError(t, err, "Claim with a detached RunLoop context after RunLoop returned")
		assert.Len(t, jobs, 1)
	})
}

// frozenLoops is a Work loop with one handler in flight (it returns when
// release closes) and a group member that consumed an event, on a store
// whose server the test freezes.
type frozenLoops struct {
	started, release, got chan struct{}
	worked, consumed      chan error
}

func startFrozenLoops(t *testing.T, s *store.Store, loops context.Context) *frozenLoops {
	t.Helper()
	c := ctx(t)
	l := &frozenLoops{started: make(chan struct{}), release: make(chan struct{}), got: make(chan struct{}, 1),
		worked: make(chan error, 1), consumed: make(chan error, 1)}
	q := s.Queue("frozen")
	_, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{})
	require.NoError(t, err)
	go func() {
		l.worked <- q.Work(loops, store.WorkOpts{Concurrency: 1, Grace: time.Second},
			func(ctx context.Context, j *store.Job) error {
				if j.Attempts == 1 {
					close(l.started)
					<-l.release
				}
				return nil
			})
	}()
	st := s.Stream("frozen")
	_, err = st.Publish(c, []byte("e"))
	require.NoError(t, err)
	go func() {
		l.consumed <- st.Group("g").Consume(loops, store.GroupOpts{Member: "m", Grace: time.Second},
			func(ctx context.Context, ev store.Event) error {
				select {
				case l.got <- struct{}{}:
				default:
				}
				return nil
			})
	}()
	<-l.started
	<-l.got
	return l
}

// freezeWithAckInFlight freezes e's database and lets the handler return,
// its ack meeting the frozen server.
func freezeWithAckInFlight(t *testing.T, e *engineEnv, l *frozenLoops) *frozenDatabase {
	f := freezeDatabase(t, e.dsn)
	close(l.release)
	time.Sleep(100 * time.Millisecond)
	f.mustHaveFrozen(t)
	return f
}

// mustReturn checks that Work and Consume returned within bound of begun.
func (l *frozenLoops) mustReturn(t *testing.T, begun time.Time, bound time.Duration, check func(t *testing.T, name string, err error)) {
	for _, loop := range []struct {
		name string
		ch   chan error
	}{{"Work", l.worked}, {"Consume", l.consumed}} {
		select {
		case err := <-loop.ch:
			check(t, loop.name, err)
		case <-time.After(time.Until(begun.Add(bound))):
			t.Errorf("%s not returned %v after the stop began, the server frozen", loop.name, time.Since(begun).Round(time.Second))
		}
	}
}

// frozenDatabase stops (SIGSTOP) every client backend of one database, and
// those that connect later while it runs, until t's cleanup continues
// them all (SIGCONT).
type frozenDatabase struct {
	mu     sync.Mutex
	pids   map[int]bool
	stop   chan struct{}
	done   chan struct{}
	thawed bool
}

func freezeDatabase(t *testing.T, dsn string) *frozenDatabase {
	t.Helper()
	c := ctx(t)
	mon, err := pgx.Connect(c, dsn) // the freezer's own session, left running
	require.NoError(t, err)
	f := &frozenDatabase{pids: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		close(f.stop)
		<-f.done
		f.thaw()
		_ = mon.Close(context.Background())
	})
	require.NoError(t, f.freezeNew(c, mon))
	go func() {
		defer close(f.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			if err := f.freezeNew(c, mon); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("freezer: %v", err)
				return
			}
		}
	}()
	return f
}

// freezeNew stops the database's client backends not stopped yet.
func (f *frozenDatabase) freezeNew(ctx context.Context, mon *pgx.Conn) error {
	rows, err := mon.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		return err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pid := range pids {
		if !f.pids[int(pid)] && !f.thawed {
			f.pids[int(pid)] = true
			_ = syscall.Kill(int(pid), syscall.SIGSTOP)
		}
	}
	return nil
}

func (f *frozenDatabase) mustHaveFrozen(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.pids, "no backend of the store's to freeze")
}

func (f *frozenDatabase) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.thawed = true
	for pid := range f.pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

func (f *frozenDatabase) continued() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thawed
}
