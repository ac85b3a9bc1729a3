// Package client runs everything an application's process does with one
// store: workers for any number of queues, outbox deliverers, the
// scheduler and the janitor, started together by Start and stopped
// together by Stop. It is the counterpart of River's river.Client.
//
//	c := client.New(s, client.Opts{})
//	c.Handle(s.Queue("thumbnails"), store.WorkOpts{Concurrency: 4}, thumbnail)
//	c.HandleJobs(emails, store.WorkOpts{}, sendEmail) // a *store.JobQueue[Email]
//	c.HandleTx(s.Queue("payments"), store.WorkOpts{}, charge) // its writes commit with the job's completion
//	c.HandleOutbox(s.Outbox("webhooks"), store.OutboxOpts{}, post)
//	if err := c.Start(ctx); err != nil { ... }
//	<-sigint
//	err := c.Stop(shutdownCtx) // finishes the jobs in flight
//
// It composes the store's loops (store.Worker for queues and outboxes,
// Scheduler.Run, janitor.Run): everything they promise holds, and so does the store's own
// shutdown: closing the store while a client runs stops the client cleanly.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
// Handle, HandleTx, HandleJobs and HandleOutbox, then Start; Stop ends it.
// A client runs once: it cannot be started again after it stopped.
type Client struct {
	s    *store.Store
	opts Opts

	subs sync.Map // *Subscription: Subscribe's subscribers

	mu      sync.Mutex
	loops   []loop
	names   map[string]bool // queues registered, to refuse a second handler
	started bool

	cancel context.CancelFunc // stops claiming: the graceful stop
	done   chan struct{}      // closed when every loop returned
	errs   []error            // loop failures, read after done

	hard      context.Context // cancelled by a hard Stop: group handlers' contexts end
	stopHard  context.CancelFunc
	groupsCut atomic.Bool // a hard Stop cancelled a group handler in flight
}

type loopKind string

const (
	queueLoop     loopKind = "queue"
	outboxLoop    loopKind = "outbox"
	groupLoop     loopKind = "group"
	schedulerLoop loopKind = "scheduler"
	janitorLoop   loopKind = "janitor"
)

type loop struct {
	kind   loopKind
	name   string
	worker *store.Worker // queues and outboxes: stopped hard on their own by Stop
	run    func(ctx context.Context) error
}

// New returns a client for s. It does nothing until Start.
func New(s *store.Store, opts Opts) *Client {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	hard, stopHard := context.WithCancel(context.Background())
	return &Client{s: s, opts: opts, names: map[string]bool{}, done: make(chan struct{}), hard: hard, stopHard: stopHard}
}

// groupCtx is a group handler's ctx, also cancelled by a hard Stop (a
// group's Grace outlasts a graceful stop only).
func (c *Client) groupCtx(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.hard, func() {
		c.groupsCut.Store(true)
		cancel()
	})
	return hctx, func() { stop(); cancel() }
}

// Handle registers handler for the queue q, run as Queue.Work runs it with
// opts, wrapped by the client's middleware and then by mw. Register before
// Start; a queue takes one handler (raise opts.Concurrency for more at
// once). Everything is checked here, not when the loop starts: Handle
// fails, with an error matching store.ErrInvalidArgument (or the name's
// error), for a queue with a bad name or of another store, a nil handler
// or middleware, and options Queue.NewWorker refuses.
func (c *Client) Handle(q *store.Queue, opts store.WorkOpts, handler store.Handler, mw ...Middleware) error {
	if q == nil || handler == nil {
		return c.refuse("handle", queueName(q), "a queue and a handler are required")
	}
	if err := c.checkMiddleware("handle", q.Name(), mw); err != nil {
		return err
	}
	w, err := q.NewWorker(c.workOpts(opts), c.wrap(handler, mw))
	return c.add("handle", queueLoop, q.Name(), w, err)
}

// HandleTx registers a transactional handler for the queue q, run as
// Queue.WorkTx runs it: each job's handler runs in a transaction, and the
// job completes in it before it commits. The middleware wraps it as it
// wraps any handler; the transaction reaches the handler through the
// middleware's context.
func (c *Client) HandleTx(q *store.Queue, opts store.WorkOpts, handler store.TxHandler, mw ...Middleware) error {
	if q == nil || handler == nil {
		return c.refuse("handle", queueName(q), "a queue and a handler are required")
	}
	if err := c.checkMiddleware("handle", q.Name(), mw); err != nil {
		return err
	}
	inner := c.wrap(func(ctx context.Context, job *store.Job) error {
		tx, ok := ctx.Value(txKey{}).(store.Tx)
		if !ok {
			return store.Permanent(errors.New("alkstore: a middleware handed the transactional handler a context not derived from its own: the transaction is lost"))
		}
		return handler(ctx, tx, job)
	}, mw)
	w, err := q.NewWorkerTx(c.workOpts(opts), func(ctx context.Context, tx store.Tx, job *store.Job) error {
		return inner(context.WithValue(ctx, txKey{}, tx), job)
	})
	return c.add("handle", queueLoop, q.Name(), w, err)
}

// txKey carries a transactional handler's Tx through the middleware.
type txKey struct{}

// HandleJobs registers handler for the typed queue q, as Handle does; its
// jobs' payloads are decoded as JobQueue.Work decodes them. Middleware runs
// around handler once the payload decoded: a payload that does not decode
// fails its job at once (ErrCodec), without reaching the middleware.
func (c *Client) HandleJobs[T any](q *store.JobQueue[T], opts store.WorkOpts, handler func(ctx context.Context, job *store.Job, v T) error, mw ...Middleware) error {
	if q == nil || handler == nil {
		name := ""
		if q != nil {
			name = q.Queue().Name()
		}
		return c.refuse("handle", name, "a queue and a handler are required")
	}
	if err := c.checkMiddleware("handle", q.Queue().Name(), mw); err != nil {
		return err
	}
	w, err := q.NewWorker(c.workOpts(opts), func(ctx context.Context, job *store.Job, v T) error {
		return c.wrap(func(ctx context.Context, job *store.Job) error { return handler(ctx, job, v) }, mw)(ctx, job)
	})
	return c.add("handle", queueLoop, q.Queue().Name(), w, err)
}

// HandleOutbox registers deliver for the outbox ob, run as Outbox.Run
// runs it with opts, wrapped by the client's middleware and then by mw. It
// is checked as Handle is (an outbox of another store is refused).
func (c *Client) HandleOutbox(ob *store.Outbox, opts store.OutboxOpts, deliver store.Handler, mw ...Middleware) error {
	if ob == nil || deliver == nil {
		name := ""
		if ob != nil {
			name = ob.Name()
		}
		return c.refuse("handle outbox", name, "an outbox and a deliver function are required")
	}
	if err := c.checkMiddleware("handle outbox", ob.Name(), mw); err != nil {
		return err
	}
	opts.WorkOpts = c.workOpts(opts.WorkOpts)
	w, err := ob.NewWorker(opts, c.wrap(deliver, mw))
	return c.add("handle outbox", outboxLoop, ob.Name(), w, err)
}

// HandleGroup registers handler as a member of the consumer group g: it
// runs as Group.Consume runs it with opts (joining at Start, leaving
// gracefully at Stop, which lets the event in flight finish and commit
// within opts.Grace; a hard Stop, as the store's hard shutdown, cancels
// the handler's context at once).
// A process may register several groups, and one group more than once
// (each is a member). The client's middleware wraps job handlers only.
// It fails, with an error matching store.ErrInvalidArgument (or the name's
// error), for a group with a bad name or of another store, a nil handler,
// and options Group.CheckOpts refuses.
func (c *Client) HandleGroup(g *store.Group, opts store.GroupOpts, handler store.GroupHandler) error {
	if g == nil || handler == nil {
		return c.refuse("handle group", "", "a group and a handler are required")
	}
	h := func(ctx context.Context, ev store.Event) error {
		ctx, done := c.groupCtx(ctx)
		defer done()
		return handler(ctx, ev)
	}
	return c.addGroup(g, opts, func(ctx context.Context, opts store.GroupOpts) error { return g.Consume(ctx, opts, h) })
}

// HandleGroupTx is HandleGroup for a transactional handler, run as
// Group.ConsumeTx runs it: each event's effects commit with the group's
// offset, exactly once.
func (c *Client) HandleGroupTx(g *store.Group, opts store.GroupOpts, handler store.GroupTxHandler) error {
	if g == nil || handler == nil {
		return c.refuse("handle group", "", "a group and a handler are required")
	}
	h := func(ctx context.Context, tx store.Tx, ev store.Event) error {
		ctx, done := c.groupCtx(ctx)
		defer done()
		return handler(ctx, tx, ev)
	}
	if err := g.CheckTxOpts(opts); err != nil {
		return err
	}
	return c.addGroup(g, opts, func(ctx context.Context, opts store.GroupOpts) error { return g.ConsumeTx(ctx, opts, h) })
}

func (c *Client) addGroup(g *store.Group, opts store.GroupOpts, run func(ctx context.Context, opts store.GroupOpts) error) error {
	name := g.Stream().Name() + "/" + g.Name()
	if err := g.CheckOpts(opts); err != nil {
		return err
	}
	if g.Stream().Store() != c.s {
		return c.refuse("handle group", name, "the group belongs to another store")
	}
	if opts.Member == "" {
		opts.Member = c.opts.Worker
	}
	if opts.HardStop == nil { // a hard Stop ends the group's Grace too
		opts.HardStop = c.hard.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return c.refuse("handle group", name, "register before Start")
	}
	c.loops = append(c.loops, loop{kind: groupLoop, name: name, run: func(ctx context.Context) error { return run(ctx, opts) }})
	return nil
}

func queueName(q *store.Queue) string {
	if q == nil {
		return ""
	}
	return q.Name()
}

// refuse is a registration or start the client refuses.
func (c *Client) refuse(op, name, why string) error {
	return &store.OpError{Op: "client " + op, Name: name, Err: fmt.Errorf("%w: %s", store.ErrInvalidArgument, why)}
}

// checkMiddleware refuses a nil middleware, which would fail every job at
// run time instead.
func (c *Client) checkMiddleware(op, name string, mw []Middleware) error {
	for _, m := range append(slices.Clone(c.opts.Middleware), mw...) {
		if m == nil {
			return c.refuse(op, name, "a middleware is nil")
		}
	}
	return nil
}

// add registers a worker the store built (or refused with err) for the
// queue or outbox called name.
func (c *Client) add(op string, kind loopKind, name string, w *store.Worker, err error) error {
	if err != nil {
		return err // the store's own *store.OpError: the queue or outbox, and why
	}
	if w.Queue().Store() != c.s {
		return c.refuse(op, name, fmt.Sprintf("the %s belongs to another store", kind))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := w.Queue().Name()
	switch {
	case c.started:
		return c.refuse(op, name, "register before Start")
	case c.names[key]:
		return c.refuse(op, name, "already has a handler")
	}
	c.names[key] = true
	c.loops = append(c.loops, loop{kind: kind, name: name, worker: w, run: w.Run})
	return nil
}

func (c *Client) workOpts(o store.WorkOpts) store.WorkOpts {
	if o.Worker == "" {
		o.Worker = c.opts.Worker
	}
	return o
}

// wrap composes the client's middleware, then mw, around h.
func (c *Client) wrap(h store.Handler, mw []Middleware) store.Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	for i := len(c.opts.Middleware) - 1; i >= 0; i-- {
		h = c.opts.Middleware[i](h)
	}
	return c.publish(h)
}

// Start runs every registered queue and outbox, the scheduler and the
// janitor, each in its own goroutine, and returns at once. They run until
// Stop, until ctx is cancelled (which stops them as Stop does, each queue
// within its WorkOpts.Grace), until the store shuts down, or until one of
// them fails: a loop that fails stops the others gracefully, and Stop
// returns its error (Stopped tells when). Handlers' contexts carry ctx's
// values. Start fails with an error matching store.ErrClosed when the store
// has begun to shut down, and with one matching store.ErrInvalidArgument,
// starting nothing, when janitor.Opts.Check refuses Opts.Janitor (unless
// NoJanitor).
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
		return &store.OpError{Op: "client start", Err: store.ErrClosed}
	}
	if !c.opts.NoJanitor {
		if err := c.opts.Janitor.Check(); err != nil {
			return &store.OpError{Op: "client start", Err: err}
		}
	}
	loops := c.loops
	if !c.opts.NoScheduler {
		owner := c.opts.Worker
		if owner == "" {
			owner = store.DefaultWorkerName()
		}
		sch := c.s.Scheduler(owner, c.opts.Scheduler)
		served := maps.Clone(c.names)
		loops = append(loops, loop{kind: schedulerLoop, run: func(ctx context.Context) error {
			c.warnUnservedSchedules(ctx, served)
			return sch.Run(ctx)
		}})
	}
	if !c.opts.NoJanitor {
		jopts := c.opts.Janitor
		if jopts.Logger == nil {
			jopts.Logger = c.opts.Logger
		}
		loops = append(loops, loop{kind: janitorLoop, run: janitor.New(c.s, jopts).Run})
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

// Stop stops the client gracefully, bounded by ctx: every queue and outbox
// stops claiming, handlers in flight finish (each queue within its
// WorkOpts.Grace) and are settled, the scheduler gives its lease up, and
// Stop returns once every loop did.
//
// When ctx ends first, Stop stops hard, each queue as Worker.Stop does:
// handlers still running have their context cancelled; a job whose handler
// then returns an error goes back to its queue without losing an attempt;
// a handler that returns nil completes its job. Stop waits up to 5 seconds
// more for them and returns an error matching ctx's if it cut a handler
// short (a handler that ignores its context is left running; its claim is
// no longer extended, so its job comes back a Visibility later). Group
// handlers (HandleGroup, HandleGroupTx) have their context cancelled too,
// whatever their Grace: their events stay uncommitted and come again.
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
	// Group handlers (whose Grace outlasts the graceful stop) are
	// cancelled as soon as ctx ends; the workers see it on their own.
	defer context.AfterFunc(ctx, c.stopHard)()
	var wg sync.WaitGroup
	stopErrs := make([]error, len(c.loops))
	for i, l := range c.loops {
		if l.worker != nil {
			wg.Go(func() { stopErrs[i] = l.worker.Stop(ctx) })
		}
	}
	wg.Wait()
	// The scheduler and the janitor end at the cancel; wait for them (and
	// for every worker) within the same bounds as a hard stop.
	select {
	case <-c.done:
	case <-ctx.Done():
		t := time.NewTimer(hardStopWait)
		select {
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
	}
	if c.groupsCut.Load() {
		stopErrs = append(stopErrs, &store.OpError{Op: "client stop", Err: fmt.Errorf("group handlers cancelled: %w", context.Cause(ctx))})
	}
	return errors.Join(append(c.loopErrs(), stopErrs...)...)
}

// hardStopWait bounds the wait, after a hard stop, for loops other than
// the workers (which bound their own, as store.Worker.Stop says).
const hardStopWait = 5 * time.Second

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

// warnUnservedSchedules warns once for each stored schedule whose target
// queue no handler of this client serves: a schedule removed from the code
// keeps firing from the database, and its jobs pile up unworked unless
// another process works that queue.
func (c *Client) warnUnservedSchedules(ctx context.Context, served map[string]bool) {
	schedules, err := c.s.Schedules(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.opts.Logger.Warn("alkstore: could not list the schedules to check their queues", "error", err)
		}
		return
	}
	for _, sc := range schedules {
		if !served[sc.Queue] {
			c.opts.Logger.Warn("alkstore: a stored schedule fires into a queue no handler of this client serves; unless another process works it, its jobs pile up (delete a schedule you no longer use with Store.Schedule(name).Delete)",
				"schedule", sc.Name, "queue", sc.Queue)
		}
	}
}
