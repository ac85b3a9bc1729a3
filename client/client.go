// Package client runs everything an application's process does with one
// store: workers for any number of queues, outbox deliverers, the
// scheduler and the janitor, started together by Start and stopped
// together by Stop. It is the counterpart of River's river.Client.
//
//	c := client.New(s, client.Opts{})
//	c.Handle(s.Queue("thumbnails"), store.WorkOpts{Concurrency: 4}, thumbnail)
//	c.HandleJobs(emails, store.WorkOpts{}, sendEmail) // a *store.JobQueue[Email]
//	c.HandleOutbox(s.Outbox("webhooks"), store.OutboxOpts{}, post)
//	if err := c.Start(ctx); err != nil { ... }
//	<-sigint
//	err := c.Stop(shutdownCtx) // finishes the jobs in flight
//
// It composes the store's loops (Queue.Work, Outbox.Run, Scheduler.Run,
// janitor.Run): everything they promise holds, and so does the store's own
// shutdown: closing the store while a client runs stops the client cleanly.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Middleware wraps a handler: it may act before and after the job runs
// (log, measure, trace, recover a panic), change the context the handler
// sees, or turn its result into another one. Middleware given to New wraps
// every handler of the client; middleware given with a queue wraps that
// queue's handler only, inside the client's.
type Middleware func(store.Handler) store.Handler

// Opts configure a Client. Zero values take the defaults.
type Opts struct {
	// Worker names this process in claims (Job.Worker) and as the
	// scheduler's owner (SchedulerLeader); default host-pid, as
	// WorkOpts.Worker. A queue's own WorkOpts.Worker wins over it.
	Worker string
	// Middleware wraps every handler and deliverer, the first outermost.
	Middleware []Middleware
	// Scheduler configures the scheduler the client runs; NoScheduler
	// runs none (another process fires the schedules; running one in
	// every process is fine too: one leads, the others stand by).
	Scheduler   store.SchedulerOpts
	NoScheduler bool
	// Janitor configures the janitor the client runs; NoJanitor runs none.
	Janitor   janitor.Opts
	NoJanitor bool
	// Logger reports loops that failed; default slog.Default().
	Logger *slog.Logger
}

// Client runs a store's loops together. Register queues and outboxes with
// Handle, HandleJobs and HandleOutbox, then Start; Stop ends it. A client
// runs once: it cannot be started again after it stopped.
type Client struct {
	s    *store.Store
	opts Opts

	subs sync.Map // *Subscription: Subscribe's subscribers

	mu      sync.Mutex
	loops   []loop
	names   map[string]bool // queues registered, to refuse a second handler
	started bool

	cancel   context.CancelFunc // stops claiming: the graceful stop
	hard     context.Context    // done when the stop turned hard: handlers are cancelled
	stopHard context.CancelCauseFunc
	done     chan struct{} // closed when every loop returned
	errs     []error       // loop failures, read after done
	cut      atomic.Bool   // the hard stop cancelled a handler that then failed
}

type loop struct {
	kind, name string
	run        func(ctx context.Context) error
}

// New returns a client for s. It does nothing until Start.
func New(s *store.Store, opts Opts) *Client {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	hard, stopHard := context.WithCancelCause(context.Background())
	return &Client{s: s, opts: opts, names: map[string]bool{}, hard: hard, stopHard: stopHard,
		done: make(chan struct{})}
}

// Handle registers handler for the queue q, run as Queue.Work runs it with
// opts, wrapped by the client's middleware and then by mw. q must be a
// queue of the client's store. Register before Start; a queue takes one
// handler (raise opts.Concurrency for more at once).
func (c *Client) Handle(q *store.Queue, opts store.WorkOpts, handler store.Handler, mw ...Middleware) error {
	if q == nil || handler == nil {
		return c.refuse("handle", "", "a queue and a handler are required")
	}
	if err := c.check("handle", q.Name(), q.Store(), mw); err != nil {
		return err
	}
	h := c.wrap(handler, mw)
	return c.add("handle", q.Name(), func(ctx context.Context) error {
		return q.Work(ctx, c.workOpts(opts), h)
	})
}

// HandleJobs registers handler for the typed queue q, as Handle does; its
// jobs' payloads are decoded as JobQueue.Work decodes them. Middleware runs
// around handler once the payload decoded: a payload that does not decode
// fails its job at once (ErrCodec), without reaching the middleware.
func (c *Client) HandleJobs[T any](q *store.JobQueue[T], opts store.WorkOpts, handler func(ctx context.Context, job *store.Job, v T) error, mw ...Middleware) error {
	if q == nil || handler == nil {
		return c.refuse("handle", "", "a queue and a handler are required")
	}
	if err := c.check("handle", q.Queue().Name(), q.Queue().Store(), mw); err != nil {
		return err
	}
	return c.add("handle", q.Queue().Name(), func(ctx context.Context) error {
		return q.Work(ctx, c.workOpts(opts), func(ctx context.Context, job *store.Job, v T) error {
			return c.wrap(func(ctx context.Context, job *store.Job) error { return handler(ctx, job, v) }, mw)(ctx, job)
		})
	})
}

// HandleOutbox registers deliver for the outbox ob, run as Outbox.Run
// runs it with opts, wrapped by the client's middleware and then by mw.
func (c *Client) HandleOutbox(ob *store.Outbox, opts store.OutboxOpts, deliver store.Handler, mw ...Middleware) error {
	if ob == nil || deliver == nil {
		return c.refuse("handle outbox", "", "an outbox and a deliver function are required")
	}
	if opts.Worker == "" {
		opts.Worker = c.opts.Worker
	}
	if err := c.check("handle outbox", ob.Name(), c.s, mw); err != nil {
		return err
	}
	h := c.wrap(deliver, mw)
	return c.add("handle outbox", ob.QueueName(), func(ctx context.Context) error {
		return ob.Run(ctx, opts, h)
	})
}

func (c *Client) refuse(op, name, why string) error {
	return fmt.Errorf("alkstore: client %s %q: %w: %s", op, name, store.ErrInvalidArgument, why)
}

// check refuses, when registering, a queue of another store and a nil
// middleware (which would fail every job at run time instead).
func (c *Client) check(op, name string, s *store.Store, mw []Middleware) error {
	if s != c.s {
		return c.refuse(op, name, "the queue belongs to another store")
	}
	for _, m := range append(slices.Clone(c.opts.Middleware), mw...) {
		if m == nil {
			return c.refuse(op, name, "a middleware is nil")
		}
	}
	return nil
}

func (c *Client) add(op, name string, run func(ctx context.Context) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.started:
		return c.refuse(op, name, "register before Start")
	case c.names[name]:
		return c.refuse(op, name, "already has a handler")
	}
	c.names[name] = true
	kind := "queue"
	if op == "handle outbox" {
		kind = "outbox"
	}
	c.loops = append(c.loops, loop{kind: kind, name: name, run: run})
	return nil
}

func (c *Client) workOpts(o store.WorkOpts) store.WorkOpts {
	if o.Worker == "" {
		o.Worker = c.opts.Worker
	}
	return o
}

// wrap composes the client's middleware, then mw, around h, inside the
// hard-stop guard.
func (c *Client) wrap(h store.Handler, mw []Middleware) store.Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	for i := len(c.opts.Middleware) - 1; i >= 0; i-- {
		h = c.opts.Middleware[i](h)
	}
	return c.guard(c.publish(h))
}

// errHardStop is the cause of a handler context the hard stop cancelled.
var errHardStop = errors.New("alkstore: client stopped hard")

// guard gives the handler a context the hard stop cancels. When it then
// fails, its job did not fail: it goes back to its queue with its attempt
// restored (Job.Release), as a store's hard Shutdown does.
func (c *Client) guard(h store.Handler) store.Handler {
	return func(ctx context.Context, job *store.Job) error {
		hctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(c.hard, func() { cancel(errHardStop) })
		defer stop()
		err := h(hctx, job)
		if err == nil || !errors.Is(context.Cause(hctx), errHardStop) {
			return err
		}
		c.cut.Store(true)
		if rerr := job.Release(context.WithoutCancel(ctx)); rerr != nil {
			c.opts.Logger.Warn("alkstore: could not release a job the stop cancelled", "queue", job.Queue, "job", job.ID, "error", rerr)
			return err
		}
		return nil
	}
}

// Start runs every registered queue and outbox, the scheduler and the
// janitor, each in its own goroutine, and returns at once. They run until
// Stop, until ctx is cancelled (which stops them as Stop does, each queue
// within its WorkOpts.Grace), until the store shuts down, or until one of
// them fails: a loop that fails stops the others gracefully, and Stop
// returns its error (Stopped tells when). Handlers' contexts carry ctx's
// values. Start fails with an error matching store.ErrClosed when the store
// has begun to shut down.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.s == nil:
		return c.refuse("start", "", "no store")
	case c.started:
		return c.refuse("start", "", "a client starts once")
	}
	// A store that began to shut down refuses new loops; say so here rather
	// than start loops that end at once.
	if err := c.s.RunLoop(ctx, "client", func(context.Context) error { return nil }); errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("alkstore: client start: %w", store.ErrClosed)
	}
	loops := c.loops
	if !c.opts.NoScheduler {
		owner := c.opts.Worker
		if owner == "" {
			host, _ := os.Hostname()
			owner = fmt.Sprintf("%s-%d", host, os.Getpid())
		}
		sch := c.s.Scheduler(owner, c.opts.Scheduler)
		loops = append(loops, loop{kind: "scheduler", run: sch.Run})
	}
	if !c.opts.NoJanitor {
		jopts := c.opts.Janitor
		if jopts.Logger == nil {
			jopts.Logger = c.opts.Logger
		}
		loops = append(loops, loop{kind: "janitor", run: janitor.New(c.s, jopts).Run})
	}
	if len(loops) == 0 {
		return c.refuse("start", "", "nothing to run")
	}
	c.started = true
	ctx, c.cancel = context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, l := range loops {
		wg.Go(func() {
			err := l.run(ctx)
			if err == nil || errors.Is(err, store.ErrClosed) {
				return // stopped, or the store shut down
			}
			c.opts.Logger.Error("alkstore: client loop failed; stopping the client", "loop", l.kind, "name", l.name, "error", err)
			mu.Lock()
			c.errs = append(c.errs, err)
			mu.Unlock()
			c.cancel()
		})
	}
	go func() { wg.Wait(); close(c.done) }()
	return nil
}

// Stopped is closed once every loop of the client returned: after Stop,
// after the store shut down, or after a loop failed (Stop then returns its
// error). Before Start it is never closed.
func (c *Client) Stopped() <-chan struct{} { return c.done }

// hardStopWait is how long a hard stop waits for the handlers it cancelled
// to return and be settled (as the store's Shutdown does).
const hardStopWait = 5 * time.Second

// Stop stops the client gracefully, bounded by ctx: every queue and outbox
// stops claiming, handlers in flight finish (each queue within its
// WorkOpts.Grace) and are settled, the scheduler gives its lease up, and
// Stop returns once every loop did.
//
// When ctx ends first, Stop stops hard: handlers still running have their
// context cancelled; a job whose handler then returns an error goes back to
// its queue without losing an attempt; a handler that returns nil
// completes its job. Stop waits up to 5 seconds more for them and returns
// an error matching ctx's if it cut a handler short (a handler that ignores
// its context is left running; Work stops heartbeating its claim when
// its queue's Grace ends, so its job comes back a Visibility later).
//
// Stop also returns the error of a loop that failed. It may be called more
// than once and concurrently, before Start (it returns nil), and after the
// store was closed (the loops already returned). Do not call it from a
// handler: it waits for handlers to return.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return nil
	}
	c.cancel()
	var err error
	select {
	case <-c.done:
	case <-ctx.Done():
		cause := context.Cause(ctx)
		c.stopHard(errHardStop)
		t := time.NewTimer(hardStopWait)
		select {
		case <-c.done:
			if c.cut.Load() {
				err = fmt.Errorf("alkstore: client stop: handlers cancelled: %w", cause)
			}
		case <-t.C:
			err = fmt.Errorf("alkstore: client stop: handlers ignored the hard stop: %w", cause)
		}
		t.Stop()
		if err != nil {
			return errors.Join(append(c.loopErrs(), err)...)
		}
	}
	return errors.Join(c.loopErrs()...)
}

// StopAndCancel stops the client hard at once: Stop with a context that is
// already done (River's name for it).
func (c *Client) StopAndCancel(ctx context.Context) error {
	done, cancel := context.WithCancelCause(ctx)
	cancel(nil) // the cause is context.Canceled: Stop's error matches it
	return c.Stop(done)
}

// loopErrs returns the loops' failures once they all returned.
func (c *Client) loopErrs() []error {
	select {
	case <-c.done:
		return c.errs
	default:
		return nil
	}
}
