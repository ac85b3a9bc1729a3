package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

type clientMail struct{ To string }

// TestClientRunsEverything: one client runs a raw queue, a typed queue, an
// outbox, the scheduler and the janitor. Every handler runs inside the
// client's middleware, then its queue's, in that order; a schedule fires
// into a queue the client works; the janitor sweeps an expired job; Stop
// ends every loop.
func TestClientRunsEverything(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		var mu sync.Mutex
		var trail []string
		note := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
		seen := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(trail) }
		tag := func(name string) client.Middleware {
			return func(next store.Handler) store.Handler {
				return func(ctx context.Context, j *store.Job) error {
					note(name + ":" + j.Queue)
					return next(ctx, j)
				}
			}
		}

		cl := client.New(s, client.Opts{Middleware: []client.Middleware{tag("client")},
			Janitor: janitor.Opts{Interval: 50 * time.Millisecond}})
		raw, mails, ticks := s.Queue("raw"), s.JobQueue[clientMail]("mails"), s.Queue("ticks")
		ob := s.Outbox("hooks")
		require.NoError(t, cl.Handle(raw, store.WorkOpts{}, func(ctx context.Context, j *store.Job) error {
			note("raw " + string(j.Payload))
			return nil
		}, tag("queue")))
		require.NoError(t, cl.HandleJobs(mails, store.WorkOpts{}, func(ctx context.Context, j *store.Job, m clientMail) error {
			note("mail " + m.To)
			return nil
		}))
		require.NoError(t, cl.Handle(ticks, store.WorkOpts{}, func(ctx context.Context, j *store.Job) error {
			note("tick")
			return nil
		}))
		require.NoError(t, cl.HandleOutbox(ob, store.OutboxOpts{}, func(ctx context.Context, j *store.Job) error {
			note("hook " + string(j.Payload))
			return nil
		}))
		require.ErrorIs(t, cl.Handle(raw, store.WorkOpts{}, func(context.Context, *store.Job) error { return nil }),
			store.ErrInvalidArgument, "a queue takes one handler")

		require.NoError(t, s.Schedule("tick").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: "ticks"}))
		expiring, err := s.Queue("unworked").Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: time.Now().Add(100 * time.Millisecond)})
		require.NoError(t, err)
		_, err = raw.Enqueue(c, []byte("r1"), store.EnqueueOpts{})
		require.NoError(t, err)
		_, err = mails.Enqueue(c, clientMail{To: "ann"}, store.EnqueueOpts{})
		require.NoError(t, err)
		_, err = ob.Enqueue(c, []byte("h1"), store.EnqueueOpts{})
		require.NoError(t, err)

		require.NoError(t, cl.Start(c))
		require.ErrorIs(t, cl.Start(c), store.ErrInvalidArgument, "a client starts once")
		require.ErrorIs(t, cl.Handle(s.Queue("late"), store.WorkOpts{}, func(context.Context, *store.Job) error { return nil }),
			store.ErrInvalidArgument, "register before Start")
		require.Eventually(t, func() bool {
			got := seen()
			j, err := s.Queue("unworked").Job(c, expiring)
			require.NoError(t, err)
			return slices.Contains(got, "raw r1") && slices.Contains(got, "mail ann") &&
				slices.Contains(got, "hook h1") && slices.Contains(got, "tick") && j.FinishedAt != nil // swept
		}, 30*time.Second, 5*time.Millisecond, "seen %v", seen())
		require.NoError(t, cl.Stop(c))
		select {
		case <-cl.Stopped():
		default:
			t.Fatal("Stop returned before every loop did")
		}

		got := seen()
		// The raw job's own entries, in order: the other handlers run
		// beside it and may note theirs between them (a mail handler's
		// entry between the two middlewares failed this under load).
		rawChain := slices.DeleteFunc(slices.Clone(got), func(s string) bool {
			return !strings.HasSuffix(s, ":raw") && !strings.HasPrefix(s, "raw ")
		})
		assert.Equal(t, []string{"client:raw", "queue:raw", "raw r1"}, rawChain, "client middleware outside the queue's")
		assert.Contains(t, got, "client:mails", "typed handlers run inside the client's middleware")
		assert.Contains(t, got, "client:"+ob.QueueName(), "so do deliverers")
		assert.NotContains(t, got, "queue:mails", "queue middleware is the queue's own")
		lease, err := s.SchedulerLeader(c)
		require.NoError(t, err)
		assert.Empty(t, lease.Owner, "the stopped client's scheduler gave its lease up")
	})
}

// TestClientStopLetsHandlersFinish: Stop stops claiming but waits for the
// handler in flight, whose context stays alive, and acks its job; a job
// enqueued meanwhile is not claimed.
func TestClientStopLetsHandlersFinish(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("graceful")
		started, finish := make(chan struct{}), make(chan struct{})
		var cancelled atomic.Bool
		var runs atomic.Int64
		cl := client.New(s, client.Opts{Worker: "graceful", NoJanitor: true})
		require.NoError(t, cl.Handle(q, store.WorkOpts{Concurrency: 1}, func(ctx context.Context, j *store.Job) error {
			runs.Add(1)
			close(started)
			<-finish
			cancelled.Store(ctx.Err() != nil)
			return nil
		}))
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		require.NoError(t, cl.Start(c))
		<-started
		leader := func() string {
			lease, err := s.SchedulerLeader(c)
			require.NoError(t, err)
			return lease.Owner
		}
		require.Eventually(t, func() bool { return leader() == "graceful" }, 30*time.Second, time.Millisecond)

		stopped := make(chan error, 1)
		go func() { stopped <- cl.Stop(c) }()
		// The stop began once the client's scheduler gave its lease up: every
		// loop's context is cancelled by then, Work's included.
		require.Eventually(t, func() bool { return leader() == "" }, 30*time.Second, time.Millisecond)
		_, err = q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while a handler ran", err)
		default:
		}
		close(finish)
		require.NoError(t, <-stopped)
		assert.False(t, cancelled.Load(), "a graceful stop leaves the handler's context alive")
		assert.EqualValues(t, 1, runs.Load(), "no claim after the stop")
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Running+st.Dead)
		assert.EqualValues(t, 1, st.Ready, "the job enqueued during the stop waits for the next client")
	})
}

// TestClientHardStopReleasesJobs: when Stop's context ends while a handler
// still runs, the handler's context is cancelled and its job goes back to
// its queue with its attempt restored (MaxAttempts 1 would otherwise make
// it dead); Stop says it cut a handler short. StopAndCancel does the same at
// once.
func TestClientHardStopReleasesJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		for _, how := range []string{"Stop", "StopAndCancel"} {
			q := s.Queue("hard-" + how)
			id, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			started := make(chan struct{})
			var cause atomic.Value
			cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
			require.NoError(t, cl.Handle(q, store.WorkOpts{Grace: time.Minute}, func(ctx context.Context, j *store.Job) error {
				close(started)
				<-ctx.Done()
				cause.Store(context.Cause(ctx))
				return ctx.Err()
			}))
			require.NoError(t, cl.Start(c))
			<-started
			if how == "Stop" {
				sc, cancel := context.WithTimeout(c, 100*time.Millisecond)
				err = cl.Stop(sc)
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded, "Stop says it cut a handler short")
			} else {
				require.ErrorIs(t, cl.StopAndCancel(c), context.Canceled, "StopAndCancel is Stop with a cancelled context")
			}
			require.NotNil(t, cause.Load(), "the handler's context was cancelled")

			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobPending, j.State, how)
			assert.Zero(t, j.Attempts, "%s: the attempt was restored", how)
			require.NoError(t, cl.Stop(c), "Stop after the client stopped is fine")
		}
	})
}

// TestClosingTheStoreStopsTheClient: Close while a client runs waits for
// the handler in flight and settles it; the client's loops end without an
// error (the store closing is a clean stop) and Stop afterwards returns nil.
func TestClosingTheStoreStopsTheClient(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		q := s.Queue("closing")
		_, err = q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		started, finish := make(chan struct{}), make(chan struct{})
		cl := client.New(s, client.Opts{})
		require.NoError(t, cl.Handle(q, store.WorkOpts{}, func(ctx context.Context, j *store.Job) error {
			close(started)
			<-finish
			return nil
		}))
		require.NoError(t, cl.Start(c))
		<-started
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		shuttingDown(t, c, s)
		close(finish)
		require.NoError(t, <-closed)
		select {
		case <-cl.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("the client still runs on a closed store")
		}
		require.NoError(t, cl.Stop(c))
		require.ErrorIs(t, client.New(s, client.Opts{}).Start(c), store.ErrClosed, "no client starts on a closed store")

		check := e.open(t)
		st, err := check.Queue("closing").Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Running+st.Ready+st.Dead, "the job was settled before the store closed")
	})
}

// TestClientLoopFailureSurfaces: a loop that fails once started (here the
// scheduler, whose lease Scheduler.Run refuses) ends at once; the client
// does not go on without it: it stops the other loops and Stop returns the
// error.
func TestClientLoopFailureSurfaces(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		cl := client.New(s, client.Opts{Scheduler: store.SchedulerOpts{LeaseTTL: time.Millisecond}, NoJanitor: true})
		ok := func(context.Context, *store.Job) error { return nil }
		require.NoError(t, cl.Handle(s.Queue("fine"), store.WorkOpts{}, ok))
		require.NoError(t, cl.Start(c))
		select {
		case <-cl.Stopped():
		case <-time.After(30 * time.Second):
			t.Fatal("a failed loop left the client running")
		}
		err := cl.Stop(c)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "LeaseTTL")
	})
}

// TestClientMiddlewareSeesResults: middleware may recover a panic and
// change a handler's result: here it turns an error into Permanent, so the
// job goes dead at its first failure.
func TestClientMiddlewareSeesResults(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("mw")
		var recovered atomic.Int64
		recoverPanics := func(next store.Handler) store.Handler {
			return func(ctx context.Context, j *store.Job) (err error) {
				defer func() {
					if p := recover(); p != nil {
						recovered.Add(1)
						err = store.Permanent(fmt.Errorf("panic: %v", p))
					}
				}()
				return next(ctx, j)
			}
		}
		noRetry := func(next store.Handler) store.Handler {
			return func(ctx context.Context, j *store.Job) error {
				if err := next(ctx, j); err != nil {
					return store.Permanent(err)
				}
				return nil
			}
		}
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true, Middleware: []client.Middleware{recoverPanics}})
		require.NoError(t, cl.Handle(q, store.WorkOpts{}, func(ctx context.Context, j *store.Job) error {
			if string(j.Payload) == "panic" {
				panic("boom")
			}
			return errors.New("flaky")
		}, noRetry))
		for _, p := range []string{"panic", "error"} {
			_, err := q.Enqueue(c, []byte(p), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		require.NoError(t, cl.Start(c))
		require.Eventually(t, func() bool {
			st, err := q.Stats(c)
			require.NoError(t, err)
			return st.Dead == 2
		}, 30*time.Second, 5*time.Millisecond)
		require.NoError(t, cl.Stop(c))
		assert.EqualValues(t, 1, recovered.Load())
	})
}

// TestClientRefusesBadRegistrations: everything a loop would fail on
// later is refused when registered, as a *store.OpError naming the queue
// (never an empty quoted name): a queue or outbox of another store, a bad
// queue name, a nil handler or middleware, bad options.
func TestClientRefusesBadRegistrations(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s, other := e.open(t), e.open(t)
		cl := client.New(s, client.Opts{})
		ok := func(context.Context, *store.Job) error { return nil }
		okTx := func(context.Context, store.Tx, *store.Job) error { return nil }
		okMail := func(context.Context, *store.Job, clientMail) error { return nil }
		refusals := []struct {
			name string
			err  error
			is   error
			says string
		}{
			{"other store's queue", cl.Handle(other.Queue("x"), store.WorkOpts{}, ok), store.ErrInvalidArgument, "another store"},
			{"other store's queue, tx", cl.HandleTx(other.Queue("x"), store.WorkOpts{}, okTx), store.ErrInvalidArgument, "another store"},
			{"other store's typed queue", cl.HandleJobs(other.JobQueue[clientMail]("x"), store.WorkOpts{}, okMail), store.ErrInvalidArgument, "another store"},
			{"other store's outbox", cl.HandleOutbox(other.Outbox("x"), store.OutboxOpts{}, ok), store.ErrInvalidArgument, "another store"},
			{"nil middleware", cl.Handle(s.Queue("x"), store.WorkOpts{}, ok, nil), store.ErrInvalidArgument, "middleware is nil"},
			{"nil handler", cl.Handle(s.Queue("x"), store.WorkOpts{}, nil), store.ErrInvalidArgument, "handler"},
			{"nil tx handler", cl.HandleTx(s.Queue("x"), store.WorkOpts{}, nil), store.ErrInvalidArgument, "handler"},
			{"nil deliver", cl.HandleOutbox(s.Outbox("x"), store.OutboxOpts{}, nil), store.ErrInvalidArgument, "deliver"},
			{"bad queue name", cl.Handle(s.Queue(""), store.WorkOpts{}, ok), store.ErrInvalidName, ""},
			{"reserved queue name", cl.HandleTx(s.Queue(store.ReservedPrefix+"x"), store.WorkOpts{}, okTx), store.ErrReservedName, ""},
			{"negative concurrency", cl.Handle(s.Queue("x"), store.WorkOpts{Concurrency: -1}, ok), store.ErrInvalidArgument, "Concurrency"},
			{"negative timeout", cl.HandleJobs(s.JobQueue[clientMail]("x"), store.WorkOpts{Timeout: -time.Second}, okMail), store.ErrInvalidArgument, "Timeout"},
			{"negative grace", cl.HandleOutbox(s.Outbox("x"), store.OutboxOpts{WorkOpts: store.WorkOpts{Grace: -1}}, ok), store.ErrInvalidArgument, "Grace"},
			{"negative max attempts", cl.HandleOutbox(s.Outbox("x"), store.OutboxOpts{MaxAttempts: -1}, ok), store.ErrInvalidArgument, "MaxAttempts"},
			{"bad worker name", cl.Handle(s.Queue("x"), store.WorkOpts{Worker: "bad\nworker"}, ok), store.ErrInvalidName, "worker"},
		}
		for _, r := range refusals {
			require.ErrorIs(t, r.err, r.is, r.name)
			var op *store.OpError
			require.ErrorAs(t, r.err, &op, r.name)
			assert.NotContains(t, r.err.Error(), `""`, r.name)
			assert.Contains(t, r.err.Error(), r.says, r.name)
		}
		require.NoError(t, cl.Handle(s.Queue("x"), store.WorkOpts{}, ok), "refusals registered nothing")
		require.NoError(t, cl.HandleOutbox(s.Outbox("x"), store.OutboxOpts{}, ok), "an outbox and a queue may share a name")
		err := cl.HandleTx(s.Queue("x"), store.WorkOpts{}, okTx)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), `client handle "x"`)
	})
}

// TestClientHandleTx: a transactional handler registered with the client
// runs inside the client's middleware, and its business row commits with
// the job's completion; a failing one's row rolls back.
func TestClientHandleTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		createEffects(t, s)
		q := s.Queue("client-tx")
		var seen atomic.Int64
		count := func(next store.Handler) store.Handler {
			return func(ctx context.Context, j *store.Job) error { seen.Add(1); return next(ctx, j) }
		}
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true, Middleware: []client.Middleware{count}})
		require.NoError(t, cl.HandleTx(q, store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if err := writeEffect(ctx, tx, j.ID); err != nil {
					return err
				}
				if string(j.Payload) == "fail" {
					return errors.New("declined")
				}
				return nil
			}))
		good, err := q.Enqueue(c, []byte("ok"), store.EnqueueOpts{})
		require.NoError(t, err)
		bad, err := q.Enqueue(c, []byte("fail"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, cl.Start(c))
		require.Eventually(t, func() bool { return jobLastError(t, q, bad) != "" }, time.Minute, 5*time.Millisecond)
		require.Eventually(t, jobGone(t, q, good), time.Minute, 5*time.Millisecond)
		require.NoError(t, cl.Stop(c))
		rows := effects(t, s)
		assert.Equal(t, 1, rows[good])
		assert.Zero(t, rows[bad])
		assert.EqualValues(t, 2, seen.Load(), "the middleware saw both jobs")
	})
}

// TestClientWarnsOfUnservedSchedules: a client running the scheduler warns
// once for each stored schedule whose queue none of its handlers serves
// (a schedule dropped from the code keeps firing from the database).
func TestClientWarnsOfUnservedSchedules(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		for name, queue := range map[string]string{"served": "reports", "orphan": "gone", "orphan2": "gone2"} {
			require.NoError(t, s.Schedule(name).Set(c, store.ScheduleSpec{Spec: "@daily", Queue: queue}))
		}
		logs := &capturedLogs{}
		cl := client.New(s, client.Opts{NoJanitor: true, Logger: slog.New(logs)})
		require.NoError(t, cl.Handle(s.Queue("reports"), store.WorkOpts{}, func(context.Context, *store.Job) error { return nil }))
		require.NoError(t, cl.Start(c))
		require.Eventually(t, func() bool { return len(logs.matching("no handler of this client serves")) == 2 },
			30*time.Second, 5*time.Millisecond)
		require.NoError(t, cl.Stop(c))
		var named []string
		for _, r := range logs.matching("no handler of this client serves") {
			named = append(named, r["schedule"]+"->"+r["queue"])
		}
		assert.ElementsMatch(t, []string{"orphan->gone", "orphan2->gone2"}, named)
	})
}

// capturedLogs is a slog handler that keeps every record's message and
// attributes.
type capturedLogs struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (h *capturedLogs) Enabled(context.Context, slog.Level) bool { return true }
func (h *capturedLogs) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *capturedLogs) WithGroup(string) slog.Handler            { return h }
func (h *capturedLogs) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h *capturedLogs) matching(part string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.recs {
		if strings.Contains(r["msg"], part) {
			out = append(out, r)
		}
	}
	return out
}
