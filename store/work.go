package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ncruces/go-sqlite3"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// WorkOpts configure Queue.Work. Zero values take the defaults, and each
// option makes sense set alone; negative ones are refused, and so are
// durations longer than 100 years, and positive ones shorter than a
// millisecond (a Visibility shorter than 500 ms): a
// duration is nanoseconds, and Visibility: 5 meant as 5 s was a 5 ns
// lease.
type WorkOpts struct {
	Worker      string // claim owner; default DefaultWorkerName()
	Concurrency int    // handlers at once; default 10
	Batch       int    // most jobs per claim; default Concurrency
	// Visibility is the claim's lease: a job whose worker died is claimed
	// again once it runs out. Work extends the claim of a handler still
	// running by Visibility once a third of its lease is gone (it looks
	// every Visibility/6, and extends every claim then due with one
	// statement on one connection), so a handler may run longer than its
	// Visibility (up to Timeout) without running twice, as long as that
	// statement gets a connection (on SQLite, the writer) before the
	// lease's other two thirds are gone. Default Timeout + 30s.
	Visibility time.Duration
	// Timeout is per handler run; default 30s, or 2/3 of a Visibility set
	// alone. Handlers starting together share one timer, so a handler's
	// deadline (its context's Deadline) may come up to a thousandth of the
	// Timeout (at most a millisecond) before its start plus Timeout. A
	// transactional handler's (WorkTx, RunJobTx) starts once its
	// transaction began: waiting for a transaction slot, a connection or
	// SQLite's writer slot does not spend it.
	Timeout      time.Duration
	Backoff      func(attempt int) time.Duration // delay before retry n; default DefaultBackoff
	Grace        time.Duration                   // on cancel, how long in-flight handlers may finish; default 30s
	PollInterval time.Duration                   // safety poll when no wake comes; default DefaultPollInterval
}

// maxWorkDuration bounds WorkOpts' durations (see withDefaults).
const maxWorkDuration = 100 * 365 * 24 * time.Hour

// minWorkDuration is the shortest Timeout, Grace and PollInterval
// WorkOpts accept, and minVisibility the shortest Visibility (a claim's
// lease must outlast a claim's round trip and the heartbeat it takes,
// once a third of it is gone); shorter positive values are refused (see
// withDefaults).
const minWorkDuration = time.Millisecond

// minVisibility is the shortest WorkOpts.Visibility Work accepts. It was
// 100 ms; with one heartbeat statement a tick (see worker.beat), a pool of
// 2 connections one of which the application's transaction held, 4
// handlers of 2 s and a second store taking what lapsed, on the shared
// 2-core machine at load 17-28 (session 54), PostgreSQL lost every claim
// of the worker in 4 of 16 rounds at 100 ms, 1 of 8 at 200 ms, 1 of 16 at
// 300 ms (a fresh pool's first round, twice: its first claim, planned
// by a fresh server backend, took most of the lease), none of 16 at 500 ms;
// SQLite none at 100 ms (8 rounds) or 300 ms (16). A lease must outlast a
// claim's round trip and a heartbeat's wait for its connection under
// load, not only the statements themselves.
const minVisibility = 500 * time.Millisecond

// DefaultPollInterval is how often an idle worker claims when no wake
// comes. Wakes (an enqueue, a retry coming due, a resume) start claims at
// once; the poll only bounds how long a lost wake can delay a job.
const DefaultPollInterval = time.Second

// DefaultWorkerName is the worker name every loop of this process claims
// with (WorkOpts.Worker, OutboxOpts, the client's scheduler owner) unless
// given one: host-pid.
func DefaultWorkerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func (o WorkOpts) withDefaults() (WorkOpts, error) {
	if o.Worker == "" {
		o.Worker = DefaultWorkerName()
	}
	if err := validateLocalName("worker", o.Worker); err != nil {
		return o, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Concurrency", int64(o.Concurrency)}, {"Batch", int64(o.Batch)}, {"Timeout", int64(o.Timeout)},
		{"Visibility", int64(o.Visibility)}, {"Grace", int64(o.Grace)}, {"PollInterval", int64(o.PollInterval)}} {
		if f.v < 0 {
			return o, fmt.Errorf("%w: negative %s", ErrInvalidArgument, f.name)
		}
	}
	// The defaults add to and scale these (Timeout + 30s, 2/3 of a
	// Visibility) and a claim adds them to the clock: near time.Duration's
	// 292 years they overflowed into a lease already run out.
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", o.Timeout}, {"Visibility", o.Visibility}, {"Grace", o.Grace}, {"PollInterval", o.PollInterval}} {
		if f.v > maxWorkDuration {
			return o, fmt.Errorf("%w: %s %v is longer than 100 years", ErrInvalidArgument, f.name, f.v)
		}
	}
	// A duration is nanoseconds: Visibility 5 meant as 5 s is a 5 ns lease
	// (every handler started with its context done and its job died in
	// milliseconds), and PollInterval 1 made an idle worker busy-poll.
	for _, f := range []struct {
		name     string
		v, least time.Duration
	}{{"Timeout", o.Timeout, minWorkDuration}, {"Visibility", o.Visibility, minVisibility}, {"Grace", o.Grace, minWorkDuration},
		{"PollInterval", o.PollInterval, minWorkDuration}} {
		if f.v > 0 && f.v < f.least {
			return o, fmt.Errorf("%w: %s %v is shorter than %v (durations are time.Duration: write 5*time.Second, not 5)",
				ErrInvalidArgument, f.name, f.v, f.least)
		}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 10
	}
	if o.Batch <= 0 || o.Batch > o.Concurrency {
		o.Batch = o.Concurrency
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
		if o.Visibility > 0 {
			// A Visibility set alone must work: leave the handler a third of
			// the lease to be settled in.
			o.Timeout = min(o.Timeout, o.Visibility*2/3)
		}
	}
	if o.Visibility <= 0 {
		o.Visibility = o.Timeout + 30*time.Second
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	return o, nil
}

// Work runs handler on the queue's jobs until ctx is cancelled or the store
// shuts down. It claims in batches while it has free slots (a claim holds
// the slots it may fill from before it is sent; on SQLite, where one claim
// is in flight, it also takes the slots freed while it waited for the
// writer, and on PostgreSQL a second claim may be in flight beside it), and
// otherwise
// sleeps until a job is enqueued (a wake), the next delayed job or claim
// deadline comes due, or the safety poll fires; it never busy-polls.
//
// When ctx is cancelled or the store begins to shut down, Work stops
// claiming (a claim in flight either hands its jobs to handlers or claims
// nothing), lets in-flight handlers finish within Grace, then cancels their
// context, settles every job and returns. A handler that ignores its
// cancelled context is waited for 5 seconds more (as a hard stop waits),
// then left behind: Work returns without settling its job (it logs a
// warning naming it), the job's claim is no longer extended and the job
// runs again once its claim lapsed, and what the handler returns later
// settles nothing (a settle the handler makes itself, Job.Ack while its
// claim still holds, still counts, as any holder's would). A WorkTx
// handler's transaction is rolled back as the handler is left behind,
// which gives back its pooled connection (on SQLite the writer slot) and
// its slot (see WorkTx): a statement the handler still runs in it fails,
// later ones fail with ErrTxDone. A job whose handler failed only
// because the stop cancelled it goes back to the queue with its attempt
// restored. A settle waits for the database however long it takes
// (a pool connection, a row lock); on PostgreSQL only the store's hard
// stop gives up one the server has not answered (Store.Shutdown): a loop
// stopped by its ctx on a server that stopped answering returns when the
// server answers or the store stops hard. Work returns nil after ctx was cancelled and an error matching
// ErrClosed when the store's shutdown stopped it (or had begun before Work
// started); other errors are bad options. Work is NewWorker and Run; a
// Worker can also be stopped hard on its own (Worker.Stop).
//
// A handler may settle its own job (Ack, Retry with a delay of its choice,
// Fail, Snooze) and return; Work then leaves the job as the handler settled
// it.
//
// While the queue is paused (Queue.Pause) Work claims nothing; it starts
// again at the resume's wake. Handlers that run longer than Visibility/3
// get their claim extended by Visibility whenever a third of its lease is
// gone (a heartbeat, fenced like every settle; one statement a tick for
// every claim then due); when a heartbeat or a cancel wake finds the
// claim gone, the handler's context is cancelled. A heartbeat that could
// not get a connection in time, or failed, cancels nothing: only a
// statement that found the claim gone does.
func (q *Queue) Work(ctx context.Context, opts WorkOpts, handler Handler) error {
	w, err := q.NewWorker(opts, handler)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// WorkTx is Work for a transactional handler: each job's handler runs in a
// transaction that Work begins, and the job completes in that transaction
// before it commits, so the handler's writes and the job's completion
// commit together or not at all (see TxHandler). A failed handler's
// transaction rolls back, and the job is retried, failed or snoozed on its
// own. Heartbeats, Timeout, Grace and the hard stop work as for Work.
//
// On SQLite every transaction holds the writer slot: transactional
// handlers run one at a time, whatever Concurrency says, and every other
// write of the database waits while one runs. Keep them short.
//
// On PostgreSQL each handler's transaction holds a pooled connection. The
// store holds at most one fewer such transactions than its pool has
// connections, for all its workers and its group members' ConsumeTx
// together, so that the workers' heartbeats, claims and settles always
// find one; a worker runs at most that many handlers at once (Concurrency
// is lowered to it), and a handler waiting for one keeps its claim (it is
// heartbeat meanwhile). A pool of one connection is refused with
// ErrInvalidArgument.
func (q *Queue) WorkTx(ctx context.Context, opts WorkOpts, handler TxHandler) error {
	w, err := q.NewWorkerTx(opts, handler)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// Worker is one worker loop of a queue, as a value: NewWorker (or
// NewWorkerTx, JobQueue.NewWorker, Outbox.NewWorker) checks the queue, the
// handler and the options at once, Run works the queue as Queue.Work does,
// and Stop stops that loop alone, gracefully and then hard, as a client's
// Stop or a store's Shutdown stops every loop. A Worker runs once.
type Worker struct {
	q    *Queue
	opts WorkOpts
	h    jobHandler

	mu       sync.Mutex
	started  bool
	stopping chan struct{} // closed by Stop: stop claiming
	hard     chan struct{} // closed when Stop's ctx ended: cancel handlers now
	hardOnce sync.Once
	done     chan struct{}          // closed when Run returned
	cut      atomic.Bool            // a hard stop cancelled a handler still running
	left     atomic.Int64           // handlers Run left behind, ignoring their cancelled context (worker.abandon)
	loop     atomic.Pointer[worker] // the loop while Run runs: what a hard stop still waits for
	// locks hears of the loop's statements waiting for a lock another
	// connection holds (SQLite's busy handler), which a hard Stop does not
	// wait for (see Stop).
	locks *litedriver.LockWaitWatch
}

// NewWorker returns a worker of the queue running handler with opts. It
// fails, with an error matching ErrInvalidArgument (or the name's error),
// for a queue with a bad name or no store, a nil handler and bad options
// (a negative Concurrency, Batch, Timeout, Visibility, Grace or
// PollInterval, one too long or too short (see WorkOpts), or a bad Worker
// name; for NewWorkerTx, a PostgreSQL pool of one connection).
func (q *Queue) NewWorker(opts WorkOpts, handler Handler) (*Worker, error) {
	return q.newWorker(opts, handlerFor(handler, nil))
}

// NewWorkerTx is NewWorker for a transactional handler (see WorkTx).
func (q *Queue) NewWorkerTx(opts WorkOpts, handler TxHandler) (*Worker, error) {
	return q.newWorker(opts, handlerFor(nil, handler))
}

func (q *Queue) newWorker(opts WorkOpts, h jobHandler) (*Worker, error) {
	switch {
	case q == nil || q.s == nil:
		name := ""
		if q != nil {
			name = q.name
		}
		return nil, opErr("work", name, errNoStore)
	case q.err != nil:
		return nil, opErr("work", q.name, q.err)
	case h.missing():
		return nil, opErr("work", q.name, fmt.Errorf("%w: nil handler", ErrInvalidArgument))
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, opErr("work", q.name, err)
	}
	if h.tx != nil {
		if err := q.s.checkTxPool(); err != nil {
			return nil, opErr("work", q.name, err)
		}
		if n := q.s.handlerTxSlots(); n > 0 && opts.Concurrency > n {
			// Handlers beyond the transactions the pool can hold would
			// hold claims they cannot start on (see handlerTxSlots).
			opts.Concurrency, opts.Batch = n, min(opts.Batch, n)
		}
	}
	return &Worker{q: q, opts: opts, h: h, stopping: make(chan struct{}), hard: make(chan struct{}),
		done: make(chan struct{}), locks: litedriver.NewLockWaitWatch()}, nil
}

// Queue returns the queue the worker works (an outbox's backing queue for
// Outbox.NewWorker).
func (w *Worker) Queue() *Queue { return w.q }

// Run works the queue until ctx is cancelled, Stop is called or the store
// shuts down, as Queue.Work does, and returns as Work returns (nil when
// ctx or Stop stopped it). A second Run fails with ErrInvalidArgument.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return opErr("work", w.q.name, fmt.Errorf("%w: a worker runs once", ErrInvalidArgument))
	}
	w.started = true
	w.mu.Unlock()
	defer close(w.done)
	leave, err := w.q.s.life.enterLoop()
	if err != nil {
		return opErr("work", w.q.name, err)
	}
	defer leave()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w.q.s.singleWriter() {
		lctx = litedriver.WithLockWaitWatch(lctx, w.locks)
	}
	go func() { // Stop stops claiming as cancelling ctx does
		select {
		case <-w.stopping:
			cancel()
		case <-lctx.Done():
		}
	}()
	if w.stopRequested() { // Stop came before Run
		return nil
	}
	l := &worker{q: w.q, opts: w.opts, handle: w, slots: make(chan struct{}, w.opts.Concurrency), freed: make(chan struct{}, 1),
		todo: make(chan struct{}), claimHeld: make(chan struct{}, 1), lentDone: make(chan struct{}, 1)}
	w.loop.Store(l)
	l.run(lctx)
	if w.q.s.life.stoppedByClose() && ctx.Err() == nil && !w.stopRequested() {
		return opErr("work", w.q.name, ErrClosed)
	}
	return nil
}

func (w *Worker) stopRequested() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// Stop stops the worker gracefully, bounded by ctx: it stops claiming, and
// handlers in flight finish within Grace and are settled; Stop returns once
// Run did. When ctx ends first, Stop stops hard: handlers still running
// have their context cancelled (a job whose handler then fails goes back
// to its queue with its attempt given back; one whose handler returns nil
// completes) and Stop waits up to 5 seconds more for Run to return. It
// then returns an error matching ctx's if it cut a handler short, or if Run
// had still not returned: the error says what it waits for, handlers that
// ignored their context (those are left running, and Run returns without
// them about then: their claim is no longer extended, so their job comes
// back a Visibility later, and they settle nothing) or, with none
// running, a claim, a settle or the ack of finished jobs waiting for the
// database (on SQLite for the writer, which a transaction of the
// application may hold: Run returns once it ends). On PostgreSQL the ack
// of a finished job whose row another transaction holds (acked apart, so
// that it holds up no other ack) is waited for at most a second once the
// stop is hard: Run then returns without it, and it ends on its own,
// acked once that transaction ends (or found cancelled, or lost if the
// job's lease runs out first). On SQLite, a write of the loop that waits
// for a lock another connection holds (another process's transaction, a
// handle not the store's; SQLite's busy handler) is not waited for
// either: with no handler running, Stop returns as it sees one that has
// waited 50 ms, with an error saying so; Run goes on and returns once the
// write got the lock, or the busy timeout failed it (a job whose ack or
// release was lost so runs again after its lease). Whenever Run left
// handlers behind (its Grace cancelled them first), Stop says so too,
// rather than nil. Stop before
// Run makes Run return at once; Stop may be called more than once and
// concurrently. Do not call it from a handler: it waits for handlers.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	select {
	case <-w.stopping:
	default:
		close(w.stopping)
	}
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.done:
		if n := w.left.Load(); n > 0 {
			return opErr("stop worker", w.q.name, fmt.Errorf("%d handlers ignored their cancelled context and were left behind", n))
		}
		return nil
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	w.hardOnce.Do(func() { close(w.hard) })
	t := time.NewTimer(hardStopWait)
	defer t.Stop()
	w.locks.Drain() // a wait heard of before may be over
	for {
		select {
		case <-w.done:
			return w.stopped(cause)
		case <-t.C:
			what := "handlers ignored the hard stop"
			if l := w.loop.Load(); l != nil {
				what = l.stuck()
			}
			return opErr("stop worker", w.q.name, fmt.Errorf("%s: %w", what, cause))
		case <-w.locks.C():
			// A write of the loop waits for a lock another connection
			// holds (SQLite: another process's transaction), which this
			// stop cannot end: with no handler left to wait for, it
			// waited out its 5 s, then the busy timeout held Run.
			if l := w.loop.Load(); l != nil && l.running() == 0 {
				select {
				case <-w.done:
					return w.stopped(cause)
				default:
				}
				return opErr("stop worker", w.q.name, fmt.Errorf("%s: %w", l.lockWaitMsg(), cause))
			}
		}
	}
}

// stopped is what a hard Stop returns once Run returned.
func (w *Worker) stopped(cause error) error {
	if n := w.left.Load(); n > 0 {
		// Run gave up on them first (5 s after cancelling them, which
		// its Grace may do before this ctx ends): reported, not nil.
		return opErr("stop worker", w.q.name, fmt.Errorf("%d handlers ignored their cancelled context and were left behind: %w", n, cause))
	}
	if w.cut.Load() {
		return opErr("stop worker", w.q.name, fmt.Errorf("handlers cancelled: %w", cause))
	}
	return nil
}

// The steps of a worker loop's stop, in order (worker.step).
const (
	stepClaiming int32 = iota // the claim loop runs, or a claim is in flight
	stepHandlers              // handlers run, or the jobs they finished wait for their settle
	stepAcks                  // the ack loop acks the last finished jobs
)

// stuck says what a hard stop is still waiting for once its wait ran out:
// handlers that ignored their cancelled context, or (no handler running)
// a claim, a settle or the acks waiting for the database, which on SQLite
// is the writer that a transaction holds (an InTx, a Begin, a WorkTx
// handler, another process).
func (w *worker) stuck() string {
	w.mu.Lock()
	n := w.n
	w.mu.Unlock()
	if n > 0 {
		return fmt.Sprintf("%d handlers ignored the hard stop", n)
	}
	wait := "the database (a lock another transaction holds?)"
	if w.q.s.singleWriter() {
		wait = "SQLite's writer, which a transaction holds (an InTx, a Begin, a WorkTx or ConsumeTx handler, or another process)"
	}
	switch w.step.Load() {
	case stepClaiming:
		return "no handler was running: a claim still waits for " + wait
	case stepHandlers:
		return "no handler was running: the settle of a finished job still waits for " + wait
	default:
		return "no handler was running: the ack of finished jobs still waits for " + wait
	}
}

// running is how many handlers are running.
func (w *worker) running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// lockWaitMsg is what a hard Stop says when it returns while a write of
// the loop (no handler running) waits for a lock another connection holds.
func (w *worker) lockWaitMsg() string {
	what := "a claim"
	switch w.step.Load() {
	case stepHandlers:
		what = "the settle of a finished job"
	case stepAcks:
		what = "the ack of finished jobs"
	}
	return "no handler was running: " + what + " waits for a lock another connection holds (another process's transaction, or a handle not the store's), which the stop cannot end; Run goes on and returns once it got the lock, or once the busy timeout failed the write (a finished job whose ack or release was lost so runs again after its lease)"
}

// worker is a Worker's loop while it runs.
type worker struct {
	q      *Queue
	opts   WorkOpts
	handle *Worker
	runner runner
	slots  chan struct{} // one token per running handler
	freed  chan struct{} // a signal after a handler gave its slot back, once wantFree are free
	// wantFree: how many free slots the claim loop waits for (it is woken
	// only then: a wake for each of a batch's handlers cost it a hundred
	// wakes a claim in a burn-down).
	wantFree atomic.Int32
	acks     chan *Job
	// held: on PostgreSQL, the finished jobs whose rows another
	// transaction held when their batch's ack ran, acked apart (nil on
	// SQLite).
	held    *heldAcks
	skipped []claimRef // the ack loop's claims its last batch's ack skipped (held)
	// claimHeld: a claim took the writer (SQLite: once one is sent, the
	// ack loop sends the finished jobs' ack behind it; see ackLoop);
	// resting: the claim loop rests after a short or failed claim, so
	// that no claim is on its way.
	claimHeld chan struct{}
	resting   atomic.Bool
	// lendMu guards claimOpen (a claim holds the writer and has not yet
	// looked for a lent batch) and lent (the batch the ack loop lent it,
	// acked in the claim's transaction, or after it, and reported by the
	// claim's goroutine, which then sends on lentDone); see lend. ackCtx
	// and ackMore: the ack loop's.
	lendMu    sync.Mutex
	claimOpen bool
	lent      *[]*Job
	lentDone  chan struct{}
	// recent: on SQLite, the worker's latest claims, for a transactional
	// handler holding the writer to extend (see recentClaims).
	recent  recentClaims
	ackCtx  context.Context
	ackMore func() []*Job
	wg      sync.WaitGroup // jobs handed to handlers and not yet settled
	// inHand counts them too, for a hard stop to read: done (the wait on
	// wg) may not have been told yet when the stop looks (see run).
	inHand   atomic.Int64
	claiming sync.WaitGroup // the claimers (see claimers)
	// The handler goroutines (runJobs) take claimed jobs from queue, oldest
	// first. A goroutine that finished a job takes the next one there
	// without waiting, and one that finds queue empty waits on todo
	// instead of exiting, so its stack, grown once by a deep handler
	// (middleware, tracing), is not grown again for every job. A claim's
	// jobs are not each handed to a goroutine of their own (a wake and a
	// park a job: a fifth of a burn-down's client CPU went to the
	// scheduler): the claim calls one goroutine (calling: a called one
	// has not looked yet), and each goroutine that takes a job while
	// more wait calls the next before it runs its own, so no job waits
	// behind a handler that blocks. A goroutine is called by a send on
	// todo, or started when none waits there, so there are at most
	// Concurrency of them running handlers, one called and those between
	// a job and the wait. runners counts them; todo closes once every job
	// is settled, and they end.
	runMu   sync.Mutex
	queue   []*Job
	calling bool
	todo    chan struct{}
	runners sync.WaitGroup
	wake    <-chan struct{} // a job was enqueued
	stalled time.Duration   // the claim loop's last sleep beside a due job it could not claim (untilNextDue)
	// handlerValues: the loop's context's values, the root of the handler
	// contexts (see timeouts.go); tick: how far their deadlines are
	// rounded down so that handlers share a bucket (timeoutTick).
	handlerValues *handlerValues
	tick          time.Duration
	stopped       atomic.Bool  // handlers were cancelled by the stop, not by their Timeout
	step          atomic.Int32 // how far the loop's stop got (stepClaiming, ...)

	// The running handlers, oldest first (startJob, stopJob), their count,
	// and the newest timeout bucket (see timeouts.go). cancelled: the stop
	// cancelled the handlers (cancelHandlers).
	mu          sync.Mutex
	first, last *runningJob
	n           int
	bucket      *timeoutBucket
	cancelled   bool
	abandoned   bool // the stop gave up waiting for the handlers (abandon)
	// settling: on SQLite, the handlers that returned and whose jobs the
	// runner settles itself (runningJob.ownSettle: a failed handler's
	// release, retry..., a WorkTx handler's), from stopJob until that
	// settle returned: such a settle may wait for the writer with its
	// job's lock held, its job no longer among the running ones, so a
	// transactional handler holding the writer finds it here
	// (claimsToHold). nil elsewhere.
	settling map[*runningJob]struct{}
}

func (w *worker) run(ctx context.Context) {
	sub := w.q.s.subscribe(queueTopic(w.q.name))
	defer sub.Close()
	w.wake = sub.C()
	if w.q.s.singleWriter() {
		// A transactional handler of the store, this worker's or any
		// other's, holds the writer for its whole run: it extends the
		// claims of this worker's jobs waiting for it (holdOthers).
		w.settling = map[*runningJob]struct{}{}
		w.q.s.holds.add(w)
		defer w.q.s.holds.remove(w)
	}
	// Claiming stops when ctx is cancelled or the store begins to shut down.
	ctx, stopClaiming := w.q.s.life.loopContext(ctx)
	defer stopClaiming()

	// Handlers outlive the stop by up to Grace so stopping does not abort
	// work in flight (their contexts hold the values of ctx, not its
	// cancellation; see startJob); settling uses a context that survives
	// the stop.
	settleCtx := w.q.s.life.settleCtx(ctx)
	w.handlerValues, w.tick = &handlerValues{values: ctx}, timeoutTick(w.opts.Timeout)
	if w.handle.h.tx != nil {
		w.handlerValues.site = &txSite{queue: w.q.name}
	}
	defer w.endBuckets()

	// A handler that returned hands its job to the ack loop and frees its
	// slot at once; the channel holds ten rounds of handlers' jobs so that
	// handlers do not wait, holding their slots, while one AckMany is in
	// flight, and the next batch takes all of them. No more: a finished
	// job's claim is no longer extended, so an AckMany that cannot commit
	// (a crash, a slow server) leaves at most this many plus one batch to
	// run again after their leases lapse, a multiple of Concurrency rather
	// than a fixed thousand. A row another transaction holds does not
	// stall it: on PostgreSQL the batch skips it, and its job is acked
	// apart (heldAcks), where the ack loop counts it with its batch.
	w.acks = make(chan *Job, max(w.opts.Concurrency, min(maxAckBatch, ackRounds*w.opts.Concurrency)))
	if s, ok := w.q.s.eng.writeOps().(lockSkipper); ok {
		w.held = newHeldAcks(w, s, cap(w.acks))
	}
	ackerDone := make(chan struct{})
	go func() { w.ackLoop(settleCtx); close(ackerDone) }()

	// Cancels reach running handlers through the queue's claim topic, until
	// the last handler returned.
	claims := w.q.s.subscribe(claimTopic(w.q.name))
	defer claims.Close()
	// Heartbeats run beside the handlers, until the last one returned.
	watchCtx, stopWatching := context.WithCancel(settleCtx)
	var watchers sync.WaitGroup
	watchers.Add(2)
	go func() { defer watchers.Done(); w.watchClaims(watchCtx, claims.C()) }()
	go func() { defer watchers.Done(); w.heartbeats(watchCtx) }()

	w.runner = runner{q: w.q, opts: w.opts, h: w.handle.h, settleCtx: settleCtx,
		stopped: w.stopped.Load, start: w.startJob, stop: w.stopJob,
		ack: func(j *Job) error { w.acks <- j; return nil }, ackLater: true}
	if w.settling != nil {
		w.runner.settled = w.settledJob
	}

	w.claimLoop(ctx)
	w.step.Store(stepHandlers)

	// Stop claiming; let in-flight handlers finish within the grace period,
	// or until a hard stop of the store.
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	grace := time.NewTimer(w.opts.Grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	case <-w.q.s.life.hard:
		if w.inHand.Load() > 0 {
			w.q.s.life.cut.Store(true) // handlers were still running
		}
	case <-w.handle.hard:
		if w.inHand.Load() > 0 {
			w.handle.cut.Store(true) // handlers were still running
		}
	}
	w.stopped.Store(true)
	w.cancelHandlers()
	w.awaitCancelled(done)
	close(w.todo) // idle handler goroutines end
	w.runners.Wait()
	stopWatching()
	watchers.Wait()
	w.step.Store(stepAcks)
	close(w.acks)
	<-ackerDone
	w.claiming.Wait()
}

// awaitCancelled waits, once the stop cancelled the handlers, for them to
// return and their jobs to be settled (done), up to hardStopWait. Handlers
// that ignore their context still running then are left behind (abandon),
// so that Work returns: their jobs are not settled, their claims are no
// longer extended, and they run again once their claims lapse.
func (w *worker) awaitCancelled(done <-chan struct{}) {
	t := time.NewTimer(hardStopWait)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	w.abandon()
	<-done // the settles of handlers that returned before it
}

// abandon leaves behind the handlers still running: whatever they return
// later settles nothing (runAndSettle), and a handler that starts from
// now on does not run. They are counted off the jobs (wg) and the handler
// goroutines (runners) the loop waits for, on their behalf.
func (w *worker) abandon() {
	w.mu.Lock()
	w.abandoned = true
	var ids []int64
	var left []*runningJob
	for rj := w.first; rj != nil; rj = rj.next {
		rj.abandoned.Store(true)
		left = append(left, rj)
		ids = append(ids, rj.job.ID)
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	// Their transactions roll back now, and their slots go back: kept
	// until the hung handler returned, a slot stalled every transactional
	// handler of the store on a pool of 2 (one slot), its own job's next
	// run too (review53c); given back with the transaction still open, the
	// connection it held was one the slots no longer counted (attack54).
	var rollbacks sync.WaitGroup
	for _, rj := range left {
		rollbacks.Go(func() { rj.endAbandonedTx(w.q.s) })
	}
	rollbacks.Wait()
	if w.handle != nil {
		w.handle.left.Add(int64(len(ids))) // for Worker.Stop to report
	}
	w.inHand.Add(-int64(len(ids)))
	w.wg.Add(-len(ids))
	w.runners.Add(-len(ids))
	w.q.s.log.Warn("alkstore: handlers ignored their cancelled context; Work returns without them, and their jobs run again once their claims lapse",
		"queue", w.q.name, "jobs", ids, "waited", hardStopWait)
}

// hand queues a claim's jobs for the handler goroutines and calls one,
// unless one is called already.
func (w *worker) hand(jobs []*Job) {
	w.runMu.Lock()
	w.queue = append(w.queue, jobs...)
	call := !w.calling
	w.calling = true
	w.runMu.Unlock()
	if call {
		w.call()
	}
}

// call wakes a handler goroutine waiting on todo, or starts one, to take
// the queue's next job.
func (w *worker) call() {
	select {
	case w.todo <- struct{}{}:
	default:
		w.runners.Add(1)
		go w.runJobs(true)
	}
}

// take takes the queue's next job (nil when it is empty) for a handler
// goroutine, called says the goroutine was called, and reports whether
// the goroutine must call the next one (more jobs wait, and none is
// called).
func (w *worker) take(called bool) (*Job, bool) {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	if called {
		w.calling = false
	}
	if len(w.queue) == 0 {
		return nil, false
	}
	j := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	if len(w.queue) == 0 {
		w.queue = w.queue[:0:0] // start again at the front (append reuses nothing of a drained backing array)
	}
	next := len(w.queue) > 0 && !w.calling
	w.calling = w.calling || next
	return j, next
}

// runJobs runs the queue's jobs, and waits on todo while it is empty,
// until todo closes. called says the goroutine was called (see take).
func (w *worker) runJobs(called bool) {
	for {
		j, next := w.take(called)
		if j == nil {
			if _, ok := <-w.todo; !ok {
				w.runners.Done()
				return
			}
			called = true
			continue
		}
		called = false
		if next {
			w.call()
		}
		if w.runJob(j) {
			return // the loop counted this goroutine off (abandon)
		}
	}
}

// runJob runs one claimed job through the handler lifecycle in a slot of
// the loop. It reports whether the loop abandoned the handler (see
// abandon), which then counted the job and the goroutine off for it.
func (w *worker) runJob(j *Job) (abandoned bool) {
	rj := w.runner.begin(j)
	returned := false
	defer func() {
		if !returned {
			w.runExited(rj)
		}
	}()
	_, abandoned = w.runner.run(j, rj)
	returned = true
	if !abandoned {
		w.jobDone()
	}
	return abandoned
}

// jobDone counts a job whose handler returned off, and frees its slot.
func (w *worker) jobDone() {
	w.inHand.Add(-1)
	w.wg.Done()
	<-w.slots
	if cap(w.slots)-len(w.slots) >= int(w.wantFree.Load()) {
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}
}

// runExited: the goroutine running rj's handler exits, its run never
// returned. A handler that exited it (runtime.Goexit, t.FailNow) had its
// job settled as a failed handler's (see handlerCall); a Goexit in code
// of the user's that the settle ran (a WorkOpts.Backoff) left the job as
// far as the settle got (its claim lapses, and it runs again). Either way
// the run is counted off, its transaction (if still open) rolled back,
// its slot freed, and another goroutine takes this one's place, unless
// the stop left the handler behind (abandon) and counted both off. This
// is the only place that does it, once per exit. Until session 60 a Goexit
// that handlerCall had not recorded (one followed by a panic in a
// deferred call of the handler's, or in a result function) lost the slot
// for good: with Concurrency 1 the next job never ran (review60a).
func (w *worker) runExited(rj *runningJob) {
	if !rj.stopped { // it exited before its settle began
		rj.ownSettle = false
		w.stopJob(rj)
		rj.cancel(nil)
	}
	rj.endAbandonedTx(w.q.s)
	if rj.abandoned.Load() {
		return
	}
	w.jobDone()
	go w.runJobs(false)
}

// claimCheckGap spaces a worker's claim checks: on SQLite every commit by
// any connection wakes every topic (the change watcher cannot tell what
// changed), and a busy queue commits all the time.
const claimCheckGap = 100 * time.Millisecond

// watchClaims checks the claims of the running handlers after each wake of
// the queue's claim topic (a Cancel here or elsewhere) and cancels the
// handlers whose claim is gone.
func (w *worker) watchClaims(ctx context.Context, wakes <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-wakes:
		}
		w.checkClaims(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(claimCheckGap):
		}
	}
}

func (w *worker) checkClaims(ctx context.Context) {
	w.mu.Lock()
	held := make(map[int64]*runningJob, w.n)
	for rj := w.first; rj != nil; rj = rj.next {
		held[rj.job.ID] = rj
	}
	w.mu.Unlock()
	if len(held) == 0 {
		return
	}
	ids := make([]int64, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	rows, err := run(w.q.handle, "check claims", autoRead, func(o target) ([]jobClaim, error) {
		return o.jobClaims(ctx, ids)
	})
	if err != nil {
		if ctx.Err() == nil {
			w.q.s.log.Warn("alkstore: could not check running jobs' claims", "queue", w.q.name, "error", err)
		}
		return
	}
	found := make(map[int64]jobClaim, len(rows))
	for _, r := range rows {
		found[r.id] = r
	}
	for id, rj := range held {
		j := rj.job
		r, ok := found[id]
		// The token is read after the rows: a handler's own settle that
		// committed before them has spent it (claimToken waits for one in
		// flight), so only claims taken away are cancelled.
		token := j.claimToken()
		if token == 0 || (ok && r.state == JobRunning && r.token == token) {
			continue
		}
		cause := fmt.Errorf("job %d: its claim was taken by another worker or it finished: %w", id, ErrClaimLost)
		if ok && r.state == JobCancelled {
			cause = fmt.Errorf("job %d was cancelled: %w", id, ErrClaimLost)
		}
		rj.loseClaim(cause) // nothing, once its handler returned and its run ended
	}
}

// heartbeats extends the claims of the running handlers once a third of
// their lease has passed (a lease begins at the claim, or at the last
// beat that extended it), by Visibility, and only for a handler whose
// context is live (not past Timeout, not stopped hard): one that ignores
// its ended context keeps no claim, so its job comes back after
// Visibility instead of never. It looks every Visibility/6, so a claim is
// extended with at least half its lease left, and a beat that could not
// run has a second chance before the lease runs out; handlers shorter
// than a third of it cost nothing. Every claim due at a tick is extended
// by one statement (see beat); a claim whose row another transaction
// holds is extended by a statement of its own that waits for the lock
// (see awaitLock).
func (w *worker) heartbeats(ctx context.Context) {
	every := max(w.opts.Visibility/6, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	b := beats{every: every, locked: make(chan lockedBeat)}
	defer b.waits.Wait() // each ends with ctx
	var due []*runningJob
	var claims []claimRef
	for {
		select {
		case <-ctx.Done():
			return
		case lb := <-b.locked:
			w.lockedBeat(ctx, lb)
			continue
		case <-t.C:
		}
		due, claims = w.dueBeats(due[:0], claims[:0])
		if len(due) > 0 {
			w.beat(ctx, due, claims, &b)
			clear(due) // the runs are not kept until the next tick
		}
	}
}

// beats is the state of a worker's heartbeats loop: its tick, the lock
// waits it started (awaitLock) and the channel they report on, and the
// rate limit of its warning that no connection came (see noConnWarn).
type beats struct {
	every  time.Duration
	locked chan lockedBeat
	waits  sync.WaitGroup
	// noConn: the first tick of the run of ticks whose beat found no
	// connection (zero: the last beat had one), the last warning of that
	// run, and the ticks since it that found none either.
	noConnSince, noConnWarned time.Time
	noConnQuiet               int
}

// heartbeatNoConnRepeat: while a worker's beats keep finding no
// connection (the application holds SQLite's writer, or every pooled
// connection), the warning that says so comes at the first such tick,
// then at most once a heartbeatNoConnRepeat, with how many ticks it kept
// quiet (it came every tick, Visibility/6, while the writer was held).
const heartbeatNoConnRepeat = time.Minute

// dueBeats appends to due the running handlers whose claim is due for a
// heartbeat (a third of its lease gone), and their claims to claims.
func (w *worker) dueBeats(due []*runningJob, claims []claimRef) ([]*runningJob, []claimRef) {
	// A beat is due when the lease has less than two thirds of Visibility
	// left, on the store's clock, which the leases are stamped with.
	by := w.q.s.now().Add(w.opts.Visibility - w.opts.Visibility/3)
	w.mu.Lock()
	for r := w.first; r != nil; r = r.next {
		if r.ctx.Err() == nil && !r.held.Load() && !r.awaiting && !r.lease.After(by) {
			due = append(due, r)
		}
	}
	w.mu.Unlock()
	// The tokens are read outside w.mu: claimToken waits for a settle in
	// flight. A settled claim (token 0) is not extended.
	kept := due[:0]
	for _, r := range due {
		if token := r.job.claimToken(); token != 0 {
			kept = append(kept, r)
			claims = append(claims, claimRef{r.job.ID, token})
		}
	}
	clear(due[len(kept):])
	return kept, claims
}

// beat extends the claims of due in one statement (HeartbeatJobs) and
// cancels the handlers whose claim it found gone.
//
// It waits for one connection (on SQLite, the writer slot) where each
// claim once waited for its own: on a pool that the application's
// transactions, handlers' own statements or WorkTx's transactions held,
// a tick's beats queued one behind the other, and claims lapsed while
// their handlers ran (review53c: a pool of 2 and two WorkTx workers lost
// a claim in about 1 of 6-8 runs). The wait ends when the last of their
// leases runs out (at least a tick): past it no claim of the tick can be
// extended, and the next tick asks again. A beat that could not run, or
// failed, tells no handler anything: a claim is lost only when a
// statement found it gone (its token spent by another claim or settle,
// its lease run out at the time the statement ran, read once it had its
// connection), never because a connection did not come.
func (w *worker) beat(ctx context.Context, due []*runningJob, claims []claimRef, b *beats) {
	every := b.every
	last := due[0].lease
	for _, r := range due[1:] {
		if r.lease.After(last) {
			last = r.lease
		}
	}
	wait := max(last.Sub(w.q.s.now()), every)
	bctx, cancel := context.WithTimeout(ctx, wait)
	res, err := run(w.q.handle, "heartbeat", autoWrite(bctx), func(o target) (beatRes, error) {
		return o.heartbeatMany(bctx, beatReq{claims: claims, clock: w.q.s.now, extend: w.opts.Visibility})
	})
	waited := bctx.Err() != nil
	cancel()
	if err != nil {
		switch {
		case ctx.Err() != nil: // the loop ends
		case waited:
			w.noConnWarn(b, len(claims), wait, err)
		default:
			w.q.s.log.Warn("alkstore: heartbeat failed", "queue", w.q.name, "jobs", len(claims), "error", err)
		}
		return
	}
	if !b.noConnSince.IsZero() {
		if !b.noConnWarned.IsZero() && b.noConnQuiet > 0 {
			w.q.s.log.Info("alkstore: heartbeat has a connection again", "queue", w.q.name,
				"without_for", time.Since(b.noConnSince).Round(time.Millisecond), "ticks_not_warned", b.noConnQuiet)
		}
		b.noConnSince, b.noConnWarned, b.noConnQuiet = time.Time{}, time.Time{}, 0
	}
	beat := make(map[int64]bool, len(res.live))
	for _, id := range res.live {
		beat[id] = false
	}
	for _, id := range res.beat {
		beat[id] = true
	}
	for i, r := range due {
		extended, live := beat[claims[i].id]
		switch {
		case extended:
			r.lease = res.deadline
		case live: // locked by another transaction: wait for its end
			w.awaitLock(ctx, r, claims[i], b)
		case r.job.claimToken() == claims[i].token: // not spent by a settle of ours meanwhile
			r.loseClaim(fmt.Errorf("job %d: heartbeat: %w", claims[i].id, ErrClaimLost))
		}
	}
}

// noConnWarn logs that a beat found no connection before its claims'
// leases ran out: at the first tick of a run of such ticks, then at most
// once a heartbeatNoConnRepeat while it lasts (review54b F5: it came
// every tick while the application held SQLite's writer).
func (w *worker) noConnWarn(b *beats, jobs int, wait time.Duration, err error) {
	now := time.Now()
	if b.noConnSince.IsZero() {
		b.noConnSince = now
	}
	if !b.noConnWarned.IsZero() && now.Sub(b.noConnWarned) < heartbeatNoConnRepeat {
		b.noConnQuiet++
		return
	}
	w.q.s.log.Warn("alkstore: heartbeat found no connection before its claims' leases ran out (are the pool's connections all held, or SQLite's writer?); it asks again at the next tick",
		"queue", w.q.name, "jobs", jobs, "waited", wait, "without_for", now.Sub(b.noConnSince).Round(time.Millisecond),
		"ticks_not_warned", b.noConnQuiet, "error", err)
	b.noConnWarned, b.noConnQuiet = now, 0
}

// lockedBeat is what a lock wait (awaitLock) reports: the claim of r's
// run, and the new lease (ok), or ok false and err nil when the claim
// was gone once the lock came.
type lockedBeat struct {
	r     *runningJob
	claim claimRef
	lease time.Time
	ok    bool
	err   error
	ended bool // the wait ended with r's run, or the worker
}

// awaitLock extends the claim of r, which the tick's beat found live but
// could not extend because another transaction held its row (on
// PostgreSQL: a settle in flight, the application's Cancel, or any
// statement on the job in a transaction still open), by a statement of
// its own that waits for the row's lock (HeartbeatLockedJob), on its own
// goroutine and connection, so that the tick's other claims are not held
// up. The claim is fenced at the time the statement began, while its
// lease held (a connection is waited for only until the lease runs
// out); the lock is waited for until r's run ends (its handler returned,
// its Timeout passed, it was stopped, or its claim was found lost) or the
// worker stops, however long the other transaction lasts, so that a
// transaction that locked the row across several leases and rolled back
// leaves the claim with its handler: while the statement waits,
// PostgreSQL has it hold the row's tuple lock, so no claim (SKIP LOCKED)
// takes the row meanwhile, and when the holder rolls back the claim is
// extended from then (review54b F3: SKIP LOCKED alone left the lease to
// run out, the next beat told the handler its claim was lost, and
// another worker ran the job again). A holder that committed a Cancel or
// a settle took the claim: the claim is lost. Meanwhile the worker's other
// beats leave the claim alone (r.awaiting); the result comes back to the
// heartbeats loop (lockedBeat), which alone writes r's lease. A wait
// holds a pooled connection; a store lets a quarter of its pool wait so
// (errNoLockWait past it: the claim is tried again at the next tick).
func (w *worker) awaitLock(ctx context.Context, r *runningJob, c claimRef, b *beats) {
	left := r.lease.Sub(w.q.s.now())
	if r.awaiting || left <= 0 {
		return
	}
	r.awaiting = true
	until, stop := context.WithCancel(ctx)
	unhook := context.AfterFunc(r.ctx, stop)
	b.waits.Add(1)
	go func() {
		defer b.waits.Done()
		defer stop()
		defer unhook()
		actx, cancel := context.WithTimeout(until, left)
		res, err := run(w.q.handle, "heartbeat", autoWrite(actx), func(o target) (lockedBeat, error) {
			lease, ok, err := o.heartbeatLocked(actx, lockedBeatReq{claimRef: c, clock: w.q.s.now,
				extend: w.opts.Visibility, until: until})
			return lockedBeat{lease: lease, ok: ok}, err
		})
		cancel()
		res.r, res.claim, res.err = r, c, err
		res.ended = err != nil && until.Err() != nil // the run or the worker ended: nothing to report
		select {
		case b.locked <- res:
		case <-ctx.Done():
		}
	}()
}

// lockedBeat applies what a lock wait (awaitLock) found.
func (w *worker) lockedBeat(ctx context.Context, lb lockedBeat) {
	r := lb.r
	r.awaiting = false
	switch {
	case lb.ended:
	case errors.Is(lb.err, errNoLockWait):
		// The next tick tries again while the lease holds.
	case lb.err != nil:
		if ctx.Err() == nil {
			w.q.s.log.Warn("alkstore: heartbeat waiting for a job row another transaction holds failed; it asks again at the next tick",
				"queue", w.q.name, "job", lb.claim.id, "error", lb.err)
		}
	case lb.ok:
		r.lease = lb.lease
	case r.job.claimToken() == lb.claim.token: // not spent by a settle of ours meanwhile
		r.loseClaim(fmt.Errorf("job %d: heartbeat: %w", lb.claim.id, ErrClaimLost))
	}
}

// untilNextDue is how long to sleep when the queue has nothing claimable:
// until the earliest run_at or claim deadline, at most the safety poll.
// claimedNone says the claim before it returned no job. A job due then is
// one the claim cannot take: past its ExpiresAt (a claim does not end a
// pending job that expired), or, on PostgreSQL, locked by another
// transaction. Claiming again every millisecond would spin while it
// stays (an idle worker burnt a fifth of a core beside one expired
// job), so the queue's expired jobs are ended once, and while a due job
// still cannot be claimed the sleeps double up to the safety poll (a
// wake still ends them at once).
func (w *worker) untilNextDue(ctx context.Context, claimedNone bool) time.Duration {
	due, err := w.q.nextDue(ctx)
	if err != nil || due == nil {
		w.stalled = 0
		return w.opts.PollInterval
	}
	wait := due.Sub(w.q.s.now())
	if wait > 0 || !claimedNone {
		w.stalled = 0
		return min(max(wait, time.Millisecond), w.opts.PollInterval)
	}
	if w.stalled == 0 {
		if n, err := w.q.SweepExpired(ctx); err == nil && n > 0 {
			return time.Millisecond // what is due now may be claimable
		}
	}
	w.stalled = min(max(2*w.stalled, time.Millisecond), w.opts.PollInterval)
	return w.stalled
}

// claimsInFlight is how many claims a worker has in flight at once where
// claims run side by side (PostgreSQL): while one claim is at the server,
// the jobs of the other run, so handlers are not left idle for a claim's
// round trip (one claim at a time left a burn-down of no-op handlers at a
// quarter of what the server could claim and settle; issue 18). SQLite
// runs one write at a time, so a worker there has one claim in flight.
//
// When Batch fills every slot (the default, Batch = Concurrency) and
// handlers are short, the second claim has no slot to hold, and one claim
// is in flight at a time: in a burn-down of 100,000 no-op handlers at
// Concurrency 100 (issue 18, measured again after ClaimJobs kept one
// generic plan; 9 runs), 1,002 claims of 99.8 jobs were in flight
// 93-96% of the run: the slots sat that long reserved for the claim in
// flight, 3.5-7.5% free between a claim's return and the next one (a
// median of 90-135 µs: handing out the jobs, the no-op handlers, the
// slots' return), under 1% running handlers. The claim's round trip (a
// median of 1.8-4.7 ms for 100 jobs at load 3-5) sets the pace; the acks
// run beside it on their own connection (see ackLoop). In one run of 11
// at load 14 the loop fell into two claims of about 50 in flight (a
// gather that timed out sent a claim short of a batch, and the second
// claim's half-batch rule kept the pair going): 1,426 claims; with a CPU
// hog beside the burn-down (load 8-11) 2 runs of 5 did (1,060 and 1,161
// claims, 116 and 318 of them sent beside one in flight). A second claim
// now goes beside one of half a batch or more only when it can take a
// whole batch (claimLoop), so such a pair ends at the next return: 1,002
// or 1,003 claims in 5 runs of 5 under the same hog.
//
// Splitting such a batch in two claims of half the slots, the second
// waiting for a whole half, was measured twice and not taken. A claim
// pays a fixed cost whatever its size: the statement's setup, and the
// walk over the entries of the jobs claimed and settled before it at the
// head of jobs_ready, which vacuum has not removed yet (it does not run
// within a burn-down; a claim steps over them once, see ClaimJobs). That
// walk grows through a burn-down, about 6 buffers a thousand jobs gone: 6
// buffers of a 100-job claim's 965 at the start, 157 of 1,158 after
// 25,000 jobs, 307 of 1,318 after 50,000, 457 of 1,581 after 75,000
// (EXPLAIN (ANALYZE, BUFFERS), generic plan). Before ClaimJobs kept one
// generic plan, each claim was also planned, and the split raised the
// server's CPU a job by 3-57% (median 27%, 11 paired runs). Without the
// planning, the walk soon is most of the fixed cost: a claim's backend CPU in
// a burn-down (sequential claims, load 4-9) was 0.3-0.43 ms for 1 job at
// the start and 0.85-1.0 ms once the walk had grown, 0.75-1.8 ms for 50
// jobs, 1.2-2.6 ms for 100, so two halves cost 17-47% more than one
// batch; the burn-down's server CPU a job rose 20-27% with the split
// (bench -cpu, paired runs at load 4-14) and its wall clock moved within
// the machine's noise, and never past the single claim's.
//
// What would pay is a claim that does not walk the head every time. A
// claim starting its first descent at the position where its worker's
// last claim began (its first job) cut the server's CPU a job by 11-28%
// and the claim's round trip by 14-34% (a prototype, paired runs at load
// 4), but a job that comes back behind that position would then wait
// behind later ones, against Claim's order (priority, then run_at, then
// id): ReleaseJob keeps a job's place in line, an enqueue from a
// transaction older than the last claim has an earlier run_at, a RunAt
// may lie in the past, and not all of them wake the worker. It needs the
// statement to say where it landed, a full walk after every wake, short
// claim and every few claims, and the order promise restated, so it was
// not taken.
const claimsInFlight = 2

// maxClaimGather bounds how long a claim waits for its batch's slots
// (see claimLoop), whatever a claim's round trip took.
const maxClaimGather = 5 * time.Millisecond

// claimDone is a claim's outcome, back in the claim loop.
type claimDone struct {
	jobs     []*Job
	err      error
	sent     int           // handler slots it was sent with
	reserved int           // handler slots the claim held for its jobs (sent, and on SQLite those it grew by)
	began    time.Time     // when it was sent
	took     time.Duration // its round trip, on the wall clock
	woke     bool          // a wake, not a timer, started it
}

// claimLoop claims jobs and hands them to handlers until ctx ends and no
// claim is in flight. A claim reserves its handler slots before it is
// sent, so it never takes more jobs than there are free slots, however
// many claims are in flight, and gives back the slots its jobs did not
// fill. A claim in flight when ctx ends hands its jobs out (a claim that
// committed returns its jobs even when ctx was cancelled meanwhile; see
// Queue.Claim) before the loop returns. A second claim goes out while
// one is in flight only with half a batch of free slots, so that slots
// freed one by one do not each cost a claim, and beside a claim of half a
// batch or more only with a whole batch: the slots left beside a whole
// batch in flight (Concurrency between one and two batches), or freed by
// the handlers of one claim of a pair, went out as a claim of their own,
// the next claim took what that left, and the pair went on splitting
// every batch (a burn-down of 100,000 no-op handlers at Concurrency 200
// and Batch 100: 1,451-1,480 claims of 67-69 jobs, two in flight 98% of
// the run; with the rule 1,000-1,003 claims of 99.6-99.7; see
// claimsInFlight for what a claim costs beyond its jobs). A claim of
// fewer than half a batch in flight (a gather that timed out, a queue
// running dry) leaves room for a second of half a batch or more beside it.
//
// After a full claim (jobs wait) with none in flight and handlers still
// running, the next claim waits for a whole batch of free slots, but no
// longer than the last claim's round trip (at most maxClaimGather): the
// handlers of a batch
// that ends at once (short handlers) free their slots one by one, and
// a claim sent at the first of them took a fraction of a batch, the
// second claim the rest, twice the claims for the same jobs (a
// burn-down's claims were 49 jobs of 100; each claim also steps over
// the index entries of the jobs claimed before it that vacuum has not
// removed, so its cost grows with the claims, not the jobs). Waiting
// costs a job at most one claim's round trip, which a claim of fewer
// jobs sent at once would have cost the jobs it left behind anyway. On
// SQLite (one claim in flight, which takes the slots freed while it
// waited for the writer) a claim sent at the first freed slot waited
// behind the ack of the jobs before it and grew by the slots freed
// meanwhile, and the claims and acks of a burn-down settled at a third
// and two thirds of a batch (1,484 claims of 67 jobs and 2,990 acks of
// 33 for 100,000 jobs at Concurrency 100); waiting for the batch, with
// the acks' (ackLoop), they are about a batch each.
func (w *worker) claimLoop(ctx context.Context) {
	most := claimsInFlight
	if w.q.s.singleWriter() {
		most = 1
	}
	// gather: a claim waits for a whole batch of free slots (after a full
	// claim, while handlers run), until gatherC fires (then gathered).
	full, gathered := false, false
	var lastTook time.Duration
	var gatherC <-chan time.Time
	var gatherT *time.Timer
	defer func() {
		if gatherT != nil {
			gatherT.Stop()
		}
	}()
	done := make(chan claimDone, most)
	reqs := make(chan claimSend)
	for range most + 1 {
		w.claiming.Go(func() { w.claimers(ctx, reqs, done, most) })
	}
	defer close(reqs) // run waits for the claimers once the acks ended (see claimers)
	// inFlight: claims sent and not yet back; inFlightSlots: the slots
	// they were sent with.
	inFlight, inFlightSlots := 0, 0
	// drainedSince: when the first of the claims that have all returned
	// fewer jobs than they had slots for (the queue drained) began; zero
	// while jobs wait (a full claim, no free slot). woke: a wake, not a
	// timer, ended the wait before the next claim (see Job.WakeLatency).
	// idle: the last claim came back short (or failed): no claim goes out
	// until a wake or the timer (the next due job, the safety poll, or a
	// second after a failure).
	var drainedSince time.Time
	woke, idle := false, false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	rest := func(d time.Duration) {
		idle = true
		w.resting.Store(true)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
	}
	for {
		stopping := ctx.Err() != nil
		if stopping && inFlight == 0 {
			return
		}
		if !stopping && !idle && inFlight < most {
			free := cap(w.slots) - len(w.slots)
			need := 1
			switch {
			case inFlight > 0 && 2*inFlightSlots >= w.opts.Batch:
				// Beside a claim of half a batch or more, only a whole
				// batch goes: a second claim of the slots its handlers
				// freed would split the next batch in two, and the pair
				// would go on splitting every batch after it.
				need = w.opts.Batch
			case inFlight > 0:
				need = max(1, w.opts.Batch/2)
			case full && !gathered && free > 0 && free < w.opts.Batch && len(w.slots) > 0:
				// The wait starts at the first freed slot, not at the
				// claim's return: handlers longer than a round trip
				// would otherwise outlast it and claims shrink to one.
				need = w.opts.Batch
				if gatherC == nil {
					d := min(lastTook, maxClaimGather)
					if gatherT == nil {
						gatherT = time.NewTimer(d)
					} else {
						gatherT.Reset(d)
					}
					gatherC = gatherT.C
				}
			}
			if free >= need {
				if gatherC != nil {
					gatherT.Stop()
					gatherC = nil
				}
				gathered = false
				n := min(free, w.opts.Batch)
				for range n {
					w.slots <- struct{}{} // reserved: only this loop takes slots
				}
				inFlight++
				inFlightSlots += n
				select {
				case reqs <- claimSend{n: n, woke: woke}:
				default: // every claimer is busy (reporting an ack): never wait for one
					go w.sendClaim(ctx, n, woke, done, most)
				}
				woke = false
				continue
			}
			// Handlers signal freed slots once need are free: say so, then
			// look again, so that a slot freed meanwhile is not missed.
			w.wantFree.Store(int32(need))
			if cap(w.slots)-len(w.slots) >= need {
				continue
			}
			if inFlight == 0 {
				drainedSince = time.Time{} // jobs wait for a slot
			}
		}
		var alarm <-chan time.Time
		var wake <-chan struct{}
		if idle {
			alarm, wake = timer.C, w.wake
		}
		var stop <-chan struct{}
		if !stopping {
			stop = ctx.Done()
		}
		// A freed slot matters only when a claim could then go out: read
		// otherwise, each handler's end would wake this loop for nothing.
		var freed <-chan struct{}
		if !stopping && !idle && inFlight < most {
			freed = w.freed
		}
		select {
		case r := <-done:
			inFlight--
			inFlightSlots -= r.sent
			w.claimed(ctx, r, &drainedSince, rest)
			full, lastTook = r.err == nil && len(r.jobs) == r.reserved, r.took
			if full {
				idle = false // a full claim: more may wait
				w.resting.Store(false)
			}
		case <-gatherC:
			gatherC, gathered = nil, true
		case <-freed:
		case <-alarm:
			idle = false
			w.resting.Store(false)
		case <-wake:
			idle, woke = false, true
			w.resting.Store(false)
		case <-stop:
		}
	}
}

// claimSend is a claim the claim loop sends: n reserved slots, and
// whether a wake started it.
type claimSend struct {
	n    int
	woke bool
}

// claimers are the goroutines that run a worker loop's claims, one
// request after another (claimLoop): one more than the claims in flight,
// so that a claim goes while the goroutine of the last one still reports
// the ack it carried (settleLent). They live as long as the loop: a claim
// on a goroutine of its own grew that goroutine's stack from its start
// for every claim (SQLite's statements run deep on the claim's goroutine:
// 3-4 stack copies a claim, about 500 instructions a job of a
// burn-down), where a claimer's stack, once grown, stays. A claim that
// finds none of them waiting goes on a goroutine of its own, as before.
// The claim loop returns without waiting for them (a claimer may still
// be reporting, or acking, what the ack loop lent its claim, which a
// stop's grace and hard stop must not wait for): run waits for them
// once the ack loop ended, which a lent batch's report comes before.
func (w *worker) claimers(ctx context.Context, reqs <-chan claimSend, done chan<- claimDone, most int) {
	for req := range reqs {
		w.sendClaim(ctx, req.n, req.woke, done, most)
	}
}

// sendClaim runs one claim of n slots and sends its outcome on done.
func (w *worker) sendClaim(ctx context.Context, n int, woke bool, done chan<- claimDone, most int) {
	began := w.q.s.now()
	// One claim at a time (SQLite): once it holds the
	// writer, it also reserves the slots freed while it
	// waited there, up to a batch (a burn-down's claims
	// were 27-41 jobs of 100, and half of the claims went).
	extra := 0
	var grow func() int
	if most == 1 {
		grow = func() int {
			// The writer is ours: the ack loop may lend
			// us its batch (takeLent, settleLent).
			w.lendMu.Lock()
			w.claimOpen = true
			w.lendMu.Unlock()
			select {
			case w.claimHeld <- struct{}{}:
			default:
			}
			for n+extra < w.opts.Batch {
				select {
				case w.slots <- struct{}{}:
					extra++
				default:
					return extra
				}
			}
			return extra
		}
	}
	var lent *lentAck
	var recent *recentClaims
	if most == 1 {
		lent = new(lentAck)
		lent.take = func() []claimRef { return w.takeLent(lent) }
		recent = &w.recent
	}
	sent := time.Now()
	jobs, err := w.q.claim(ctx, w.opts.Worker, min(n, MaxClaim), w.opts.Visibility, grow, lent, recent)
	done <- claimDone{jobs: jobs, err: err, sent: n, reserved: n + extra, began: began, took: time.Since(sent), woke: woke}
	if most == 1 {
		w.settleLent(lent)
	}
}

// claimed hands a claim's jobs to handlers, gives back the slots they did
// not fill, and decides, after a short or failed claim, how long the loop
// rests (rest) before it claims again.
func (w *worker) claimed(ctx context.Context, r claimDone, drainedSince *time.Time, rest func(time.Duration)) {
	if r.woke && len(r.jobs) > 0 && !drainedSince.IsZero() {
		w.wakeLatencies(r.jobs, *drainedSince)
	}
	if len(r.jobs) > 0 {
		w.inHand.Add(int64(len(r.jobs)))
		w.wg.Add(len(r.jobs))
		w.hand(r.jobs)
	}
	for range r.reserved - len(r.jobs) {
		<-w.slots
	}
	switch {
	case r.err != nil && ctx.Err() == nil:
		w.q.s.log.Error("alkstore: claim failed", "queue", w.q.name, "error", r.err)
		*drainedSince = time.Time{}
		rest(time.Second)
	case r.err == nil && len(r.jobs) < r.reserved:
		if drainedSince.IsZero() {
			*drainedSince = r.began
		}
		if ctx.Err() == nil {
			rest(w.untilNextDue(ctx, len(r.jobs) == 0))
		}
	case r.err == nil:
		*drainedSince = time.Time{}
		w.stalled = 0
	}
}

// wakeLatencies sets the wake latency of the jobs a wake's claim returned
// (Job.WakeLatency): those on their first attempt, enqueued runnable (not
// delayed) since drainedSince, from their enqueue to now.
func (w *worker) wakeLatencies(jobs []*Job, drainedSince time.Time) {
	now := w.q.s.now()
	for _, j := range jobs {
		if j.Attempts == 1 && !j.CreatedAt.Before(drainedSince) && !j.RunAt.After(j.CreatedAt) && now.After(j.CreatedAt) {
			j.wakeLatency = now.Sub(j.CreatedAt)
		}
	}
}

// maxAckBatch is the most jobs one AckMany settles.
const maxAckBatch = 1000

// ackRounds bounds the finished jobs waiting for their ack, in rounds of
// Concurrency: fewer slowed a burn-down of no-op handlers (4 rounds at
// Concurrency 100: 0.64 of a thousand-job queue on PostgreSQL), more would
// let a stuck ack leave more jobs to run again.
const ackRounds = 10

// ackGather bounds how long, on SQLite, the ack loop waits for the next
// claim to take the writer (see ackLoop).
const ackGather = time.Millisecond

// ackLoop acks finished jobs in batches: whatever has accumulated while the
// previous batch was in flight goes in the next one. On SQLite, where the
// ack and the claims take turns on the writer, each ack also waits for
// the jobs that finish meanwhile, and adds those that finished while it
// waited for the writer (ackGrowing): an ack sent at the first finished
// job took the writer with a few jobs (a burn-down's acks held 13-33
// jobs, each its own commit; CPU a job 26.6-27.5 -> 21-24 µs, claims
// included, once acks waited for a batch).
//
// It waits, while handlers run or a claim may come, until the next claim
// takes the writer, or for ackGather at most, and then lends its batch to
// that claim (lend), which acks it in its own transaction after stamping
// its jobs: one commit for both (a burn-down of no-op handlers at
// Concurrency 100, callgrind of the whole process: commits 0.038 -> 0.025
// a job, WAL frames 0.277 -> 0.232, and 0.021 and 0.224 with ranges from
// 8 ids (execListed); acks in their own transaction 264 -> 68 for 300
// claims of 30,000 jobs). When the lent ack ran on the claim's
// goroutine right after its commit, beside the claim's handlers, it was
// a transaction of its own. An ack that waited
// for a batch (Batch jobs) went as soon as the batch's last handler
// returned, a moment before the claim that the same handlers' freed slots
// sent, and took the writer first: the claim then waited behind it, and
// the writer sat idle while the claim's jobs ran, and again while it
// passed from one goroutine to the next (a burn-down of 100,000 no-op
// handlers at Concurrency 100, writer transactions timed: held 84-87% of
// the run, idle 8-12% with no write waiting, 4-6% passing between
// goroutines waiting for it, the acks' goroutine taking it a median of
// 0.6-1.0 ms after it asked; lending: held 88-89%, passing 2.3-2.8%, the
// lent ack waiting a median of 11-14 µs; at load 4-7).
//
// On PostgreSQL an ack does not wait: it runs on a connection of its own
// beside the claim in flight, off the claim loop's path. In a burn-down of
// 100,000 no-op handlers at Concurrency 100 (issue 18) the acks held 74
// jobs on average at load 3-5 (1,353 acks for 1,002 claims; a median of
// 99) and 92-120 under more load, where jobs pile up while an ack is in
// flight. SQLite's wait (a batch, or 1 ms) on PostgreSQL made 852-981
// acks against 835-1,083 without it (paired runs at load 9-13), and
// neither the server's CPU a job nor the wall clock moved beyond the
// machine's noise, so it was not taken. What an ack cost beyond its jobs
// was its plan's walk of jobs_running (see AckJobs): sequential acks in a
// burn-down took 566-598 µs of backend CPU for 25 jobs and 1,115-1,124 µs
// for 100 with it, 297-313 and 708-732 µs without.
func (w *worker) ackLoop(ctx context.Context) {
	if w.held != nil {
		defer w.held.drain()
	}
	batch := make([]*Job, 0, maxAckBatch)
	limit := maxAckBatch
	// take adds the finished jobs waiting in acks to batch, up to limit,
	// without blocking.
	take := func() {
		for len(batch) < limit {
			select {
			case j, ok := <-w.acks:
				if !ok {
					return
				}
				batch = append(batch, j)
			default:
				return
			}
		}
	}
	var more func() []*Job
	var gatherT *time.Timer
	if w.q.s.singleWriter() {
		more = func() []*Job {
			n := len(batch)
			take()
			return batch[n:]
		}
		w.ackCtx, w.ackMore = ctx, more
		gatherT = time.NewTimer(ackGather)
		defer gatherT.Stop()
	}
	for {
		if w.held != nil {
			// The jobs held apart and the batch, together, hold no more
			// than one batch did before (see heldAcks.room).
			limit = w.held.room()
		}
		j, ok := <-w.acks
		if !ok {
			return
		}
		batch = append(batch[:0], j)
		take()
		// A handler hands its job to acks before it frees its slot: with
		// no slot held and the claim loop resting, no job is on its way,
		// and no claim.
		held := false // a claim took the writer since the last ack
		if gatherT != nil && (len(w.slots) > 0 || !w.resting.Load()) {
			gatherT.Reset(ackGather)
		gather:
			for len(batch) < maxAckBatch {
				select {
				case j, ok := <-w.acks:
					if !ok {
						break gather
					}
					batch = append(batch, j)
				case <-w.claimHeld:
					held = true
					break gather
				case <-gatherT.C:
					break gather
				}
			}
			gatherT.Stop()
		}
		if gatherT != nil && w.lend(&batch, held) {
			continue
		}
		w.ackAndReport(ctx, &batch, more)
	}
}

// lend hands *batch to the claim that holds the writer, if one took it
// since the last ack and has not yet looked for a lent batch, and returns
// once that claim acked it and reported each job's result; it returns
// false, having done nothing, when no such claim is there (the ack loop
// then acks the batch itself). The claim acks it in its own transaction,
// after stamping its jobs (takeLent): one commit for both, and the pages
// both write go to the WAL once; the ack's jobs are reported once that
// transaction committed and the claim's jobs are handed out (settleLent).
// Should that ack fail (a lent claim was lost, a statement failed), the
// claim commits without it and acks the batch after, on its own
// goroutine, as an ack of its own.
func (w *worker) lend(batch *[]*Job, held bool) bool {
	if !held {
		select {
		case <-w.claimHeld:
		default:
			return false
		}
	}
	w.lendMu.Lock()
	if !w.claimOpen {
		w.lendMu.Unlock()
		return false
	}
	w.lent = batch
	w.lendMu.Unlock()
	<-w.lentDone
	return true
}

// takeLent is l.take for a claim, called inside its transaction after its
// stamp: it closes the claim to lending (lend then leaves the ack to the
// ack loop), takes the batch lent to it, if one was, into l (no other
// claim's settleLent may take it then), and returns its claims, with the
// jobs that finished since (ackMore).
func (w *worker) takeLent(l *lentAck) []claimRef {
	if testHookTakeLent != nil {
		testHookTakeLent(w, l)
	}
	w.lendMu.Lock()
	batch := w.lent
	w.lent, w.claimOpen = nil, false
	w.lendMu.Unlock()
	l.taken, l.batch = true, batch
	if batch == nil {
		return nil
	}
	w.ackMore()
	return w.q.claimRefs(make([]claimRef, 0, len(*batch)), *batch)
}

// testHookTakeLent, set only by the package's tests, runs as a claim
// looks for a lent batch, before it closes itself to lending: a test holds
// the claim there until the ack loop lent it one, which otherwise depends
// on how the two goroutines are scheduled.
var testHookTakeLent func(w *worker, l *lentAck)

// settleLent ends, on a claim's goroutine once its transaction ended, the
// ack of the batch the ack loop lent it while it held the writer (see
// lend), if any: it reports the jobs the claim's transaction acked (l),
// or else acks the batch and reports. A claim that never looked for a
// lent batch (it failed first) closes itself to lending here, and acks
// what was lent meanwhile (perhaps to the next claim, once this one
// returned: its ack is the same).
func (w *worker) settleLent(l *lentAck) {
	batch := l.batch
	if !l.taken {
		w.lendMu.Lock()
		batch = w.lent
		w.lent, w.claimOpen = nil, false
		w.lendMu.Unlock()
	}
	if batch == nil {
		return
	}
	if l.acked {
		w.report(*batch, l.ids, nil, nil)
	} else {
		w.ackAndReport(w.ackCtx, batch, w.ackMore)
	}
	w.lentDone <- struct{}{}
}

// ackAndReport acks *batch (which more may grow) and reports each job's
// result; on PostgreSQL the jobs whose rows another transaction holds are
// left to w.held, which acks and reports them apart.
func (w *worker) ackAndReport(ctx context.Context, b *[]*Job, more func() []*Job) {
	var skipped *[]claimRef
	if w.held != nil { // PostgreSQL: only the ack loop calls this
		w.skipped = nil
		skipped = &w.skipped
	}
	ids, failed, err := w.ackBatch(ctx, b, more, skipped)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err) // why: the settles were given up
	}
	batch := *b
	if skipped != nil && len(*skipped) > 0 {
		batch = w.held.add(ctx, batch, *skipped)
	}
	w.report(batch, ids, failed, err)
}

// report reports each job's result once batch's ack ended: ids are those
// it acked, failed the jobs whose ack failed with err.
func (w *worker) report(batch []*Job, ids []int64, failed map[*Job]error, err error) {
	if len(failed) > 0 {
		w.q.s.log.Warn("alkstore: ack failed; the jobs will run again", "queue", w.q.name, "jobs", len(failed), "error", err)
		why := err
		for _, e := range failed {
			if why == nil {
				why = e
			}
		}
		w.q.s.life.settleFailed(len(failed), why)
	}
	if lost := len(batch) - len(ids) - len(failed); lost > 0 {
		// Lost: the claim expired (the job runs again), or the job was
		// cancelled or deleted meanwhile (it does not).
		w.q.s.log.Warn("alkstore: claims lost before their ack (expired: those jobs run again; or cancelled or deleted)",
			"queue", w.q.name, "lost", lost)
	}
	w.reportAcks(batch, ids, failed)
}

// ackBatch acks *batch in one AckMany (which more may grow: it appends to
// *batch), and returns the ids it acked, the jobs whose ack failed with
// why (nil when none did), and the batch's error. A batch's statement
// fails as a whole, so one job whose ack the database refuses (an
// application's trigger or foreign key, say) would leave every job
// batched with it to run again, each time it comes back. So a batch
// refused for its rows (refusedRows) is acked again in halves, and a
// refused half split again, down to the jobs at fault: about 2·log2(n)
// more AckMany calls for one such job among n, at most 2n for many, each
// failing fast. Any other error (the connection, a lock wait that timed
// out, a busy SQLite file, a read-only standby) would fail every half
// alike, so it is not split, and one met in a split fails the jobs still
// to ack without another statement.
//
// With locked not nil, the claims whose rows another transaction holds
// are left unsettled, neither acked nor failed, and put in *locked (see
// Queue.ackGrowing).
func (w *worker) ackBatch(ctx context.Context, batch *[]*Job, more func() []*Job, locked *[]claimRef) ([]int64, map[*Job]error, error) {
	ids, err := w.q.ackGrowing(ctx, *batch, more, locked)
	if err == nil {
		return ids, nil, nil
	}
	failed := map[*Job]error{}
	ids, _ = w.ackSplit(ctx, unacked(*batch, ids), err, ids, failed)
	return ids, failed, err
}

// unacked is the runs of batch that ids (what a failed ack committed
// before its error: PostgreSQL's first statement, see Queue.AckMany) did
// not ack: those alone are acked again, and the acked ones are reported
// completed, not failed.
func unacked(batch []*Job, ids []int64) []*Job {
	if len(ids) == 0 {
		return batch
	}
	acked := ackedRuns(batch, ids)
	rest := make([]*Job, 0, len(batch)-len(ids))
	for _, j := range batch {
		if acked[j.ID] != j {
			rest = append(rest, j)
		}
	}
	return rest
}

// ackSplit acks the jobs of batch, whose ack failed with err, by halves:
// it adds the ids acked to ids and returns them, puts the jobs whose ack
// failed in failed, and returns the error that stopped the split (one
// not refusedRows), if one did.
func (w *worker) ackSplit(ctx context.Context, batch []*Job, err error, ids []int64, failed map[*Job]error) ([]int64, error) {
	if !refusedRows(err) || len(batch) == 1 {
		for _, j := range batch {
			failed[j] = err
		}
		if !refusedRows(err) {
			return ids, err
		}
		return ids, nil
	}
	halves := [2][]*Job{batch[:len(batch)/2], batch[len(batch)/2:]}
	for i, half := range halves {
		got, err := w.q.ackMany(ctx, half)
		if err == nil {
			ids = append(ids, got...)
			continue
		}
		var stop error
		if ids, stop = w.ackSplit(ctx, half, err, ids, failed); stop != nil {
			if i == 0 {
				for _, j := range halves[1] {
					failed[j] = stop
				}
			}
			return ids, stop
		}
	}
	return ids, nil
}

// refusedRows reports whether err is the database refusing a statement
// for the rows it touched (a constraint, an application trigger's error),
// which a statement over other rows may not meet, rather than failing to
// run it at all.
func refusedRows(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code[:min(2, len(pg.Code))] {
		case "23", "22", "27", "09", "P0", "2F", "38", "39": // integrity, data, trigger and routine errors
			return true
		}
		return false
	}
	return errors.Is(err, sqlite3.CONSTRAINT) // a constraint, or a trigger's RAISE
}

// reportAcks reports each job's result (Job.OnResult) once its batched
// ack ended: completed when the ack took it, the settle's error when its
// ack failed, and a lost claim otherwise.
//
// A batch can hold two runs of one job: this worker's claim lapsed, it
// claimed the job again, and both runs finished before one ack. The ack
// took the job for the run holding the current claim, which is the later
// claim (a job is claimed again only once its previous claim expired, so
// after that claim's ClaimedAt), and the other run lost its claim.
func (w *worker) reportAcks(batch []*Job, ids []int64, failed map[*Job]error) {
	var acked map[int64]*Job
	if len(ids) < len(batch) {
		acked = ackedRuns(batch, ids)
	}
	for _, j := range batch {
		res := JobResult{Outcome: OutcomeAcked, State: JobCompleted}
		var err error
		if failed != nil {
			err = failed[j]
		}
		switch {
		case err != nil:
			res = JobResult{Outcome: OutcomeAcked, SettleErr: err}
		case acked != nil && acked[j.ID] != j:
			res = JobResult{Outcome: OutcomeClaimLost}
			if j.hasResultFuncs() { // read what became of it only for someone who asks
				res = w.runner.lostResult(j, nil)
			}
		}
		j.endRun(res)
	}
}

// ackedRuns maps each id an ack returned to the run of batch it acked:
// of two runs of one job, the one claimed later (see reportAcks).
func ackedRuns(batch []*Job, ids []int64) map[int64]*Job {
	acked := make(map[int64]*Job, len(ids))
	for _, id := range ids {
		acked[id] = nil
	}
	for _, j := range batch {
		run, ok := acked[j.ID]
		if ok && (run == nil || j.ClaimedAt != nil && (run.ClaimedAt == nil || j.ClaimedAt.After(*run.ClaimedAt))) {
			acked[j.ID] = j
		}
	}
	return acked
}
