package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// WorkOpts configure Queue.Work. Zero values take the defaults, and each
// option makes sense set alone.
type WorkOpts struct {
	Worker      string // claim owner; default host-pid
	Concurrency int    // handlers at once; default 10
	Batch       int    // most jobs per claim; default Concurrency
	// Visibility is the claim's lease: a job whose worker died is claimed
	// again once it runs out. Work extends the claim of a handler still
	// running every Visibility/3, so a handler may run longer than its
	// Visibility (up to Timeout) without running twice. Default Timeout +
	// 30s.
	Visibility   time.Duration
	Timeout      time.Duration                   // per handler run; default 30s, or 2/3 of a Visibility set alone
	Backoff      func(attempt int) time.Duration // delay before retry n; default DefaultBackoff
	Grace        time.Duration                   // on cancel, how long in-flight handlers may finish; default 30s
	PollInterval time.Duration                   // safety poll when no wake comes; default DefaultPollInterval
}

// DefaultPollInterval is how often an idle worker claims when no wake
// comes. Wakes (an enqueue, a retry coming due, a resume) start claims at
// once; the poll only bounds how long a lost wake can delay a job.
const DefaultPollInterval = time.Second

// Handler processes one job. Returning nil acks it; an error retries it with
// backoff until its attempts are spent; an error wrapped with Permanent
// fails it at once; Snooze(d) runs it again after d without spending an
// attempt. A panic counts as an error.
//
// The handler's context ends at its Timeout, when the worker stops (after
// Grace), and when the job's claim is lost: Queue.Cancel cancelled the job
// (in any process) or the claim expired and another worker took the job.
// Then context.Cause(ctx) matches ErrClaimLost and Work settles nothing: the
// job is no longer this handler's.
type Handler func(ctx context.Context, job *Job) error

type permanentError struct{ err error }

// Error is the wrapped error's text: Permanent marks the error by its type,
// so a job's LastError reads as the handler's own error.
func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a handler error as not worth retrying: the job goes to
// dead at once.
func Permanent(err error) error { return &permanentError{err} }

type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.delay) }

// Snooze is a handler result: Work puts the job back to run again after
// delay (a negative one counts as 0) without spending an attempt or
// recording an error, as Job.Snooze does. Work recognises it wrapped, too.
func Snooze(delay time.Duration) error { return &snoozeError{max(delay, 0)} }

// DefaultBackoff is exponential with jitter: about 1s, 2s, 4s, ... capped at
// one hour. Attempt n waits between step n-1 and step n (0.5-1s, 1-2s, 2-4s,
// ..., 34-60 min), so retries of one job never get closer together; from
// attempt 14 on every retry waits exactly one hour (the jitter drawn on the
// way up keeps jobs that failed together apart).
func DefaultBackoff(attempt int) time.Duration {
	step := func(n int) time.Duration { // 1s, 2s, 4s, ... capped at one hour
		if n < 1 {
			return time.Second / 2
		}
		return min(time.Second<<min(n-1, 12), time.Hour) // 1s<<12 is past the cap
	}
	lo, hi := step(attempt-1), step(attempt)
	return lo + rand.N(hi-lo+1)
}

func (o WorkOpts) withDefaults() (WorkOpts, error) {
	if o.Worker == "" {
		host, _ := os.Hostname()
		o.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if err := validateLocalName("worker", o.Worker); err != nil {
		return o, err
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
// shuts down. It claims in batches while it has free slots, and otherwise
// sleeps until a job is enqueued (a wake), the next delayed job or claim
// deadline comes due, or the safety poll fires; it never busy-polls.
//
// When ctx is cancelled or the store begins to shut down, Work stops
// claiming (a claim in flight either hands its jobs to handlers or claims
// nothing), lets in-flight handlers finish within Grace, then cancels their
// context, settles every job and returns. A job whose handler failed only
// because the stop cancelled it goes back to the queue with its attempt
// restored. Work returns nil after ctx was cancelled and an error matching
// ErrClosed when the store's shutdown stopped it (or had begun before Work
// started); other errors are bad options.
//
// A handler may settle its own job (Ack, Retry with a delay of its choice,
// Fail, Snooze) and return; Work then leaves the job as the handler settled
// it.
//
// While the queue is paused (Queue.Pause) Work claims nothing; it starts
// again at the resume's wake. Handlers that run longer than Visibility/3
// get their claim extended by Visibility every Visibility/3 (a heartbeat,
// fenced like every settle); when a heartbeat or a cancel wake finds the
// claim gone, the handler's context is cancelled.
func (q *Queue) Work(ctx context.Context, opts WorkOpts, handler Handler) error {
	if q.s == nil {
		return opErr("work", q.name, errNoStore)
	}
	if q.err != nil {
		return opErr("work", q.name, q.err)
	}
	if handler == nil {
		return opErr("work", q.name, fmt.Errorf("%w: nil handler", ErrInvalidArgument))
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return opErr("work", q.name, err)
	}
	leave, err := q.s.life.enterLoop()
	if err != nil {
		return opErr("work", q.name, err)
	}
	defer leave()
	w := &worker{q: q, opts: opts, handler: handler,
		slots: make(chan struct{}, opts.Concurrency), freed: make(chan struct{}, 1),
		running: map[*Job]*runningJob{}}
	w.run(ctx)
	if q.s.life.stoppedByClose() && ctx.Err() == nil {
		return opErr("work", q.name, ErrClosed)
	}
	return nil
}

type worker struct {
	q       *Queue
	opts    WorkOpts
	handler Handler
	slots   chan struct{} // one token per running handler
	freed   chan struct{} // a signal after a handler gave its slot back
	acks    chan *Job
	wg      sync.WaitGroup
	wake    <-chan struct{} // a job was enqueued
	stopped atomic.Bool     // handlers were cancelled by the stop, not by their Timeout

	mu      sync.Mutex
	running map[*Job]*runningJob // handlers running
}

// runningJob is a running handler as the heartbeat and claim checks see it.
type runningJob struct {
	since     time.Time               // when its handler started
	ctx       context.Context         // the handler's: done at its Timeout, a hard stop or a lost claim
	claimGone context.CancelCauseFunc // cancels the handler: its claim is gone
}

func (w *worker) run(ctx context.Context) {
	sub := w.q.s.subscribe(queueTopic(w.q.name))
	defer sub.Close()
	w.wake = sub.C()
	// Claiming stops when ctx is cancelled or the store begins to shut down.
	ctx, stopClaiming := w.q.s.life.loopContext(ctx)
	defer stopClaiming()

	// Handlers outlive the stop by up to Grace so stopping does not abort
	// work in flight; settling uses a context that survives the stop.
	handlerBase, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	settleCtx := context.WithoutCancel(ctx)

	w.acks = make(chan *Job, w.opts.Concurrency)
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

	for ctx.Err() == nil {
		free := cap(w.slots) - len(w.slots)
		if free == 0 {
			w.waitForSlot(ctx)
			continue
		}
		// A claim that committed returns its jobs even when ctx was cancelled
		// meanwhile; they run like any other (see Queue.Claim).
		jobs, err := w.q.Claim(ctx, w.opts.Worker, min(free, w.opts.Batch), w.opts.Visibility)
		for _, j := range jobs {
			w.slots <- struct{}{}
			w.wg.Add(1)
			go w.runJob(handlerBase, settleCtx, j)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			w.q.s.log.Error("alkstore: claim failed", "queue", w.q.name, "error", err)
			w.sleep(ctx, time.Second)
		case err == nil && len(jobs) < min(free, w.opts.Batch):
			w.sleep(ctx, w.untilNextDue(ctx))
		}
	}

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
		select {
		case <-done:
		default:
			w.q.s.life.cut.Store(true) // handlers were still running
		}
	}
	w.stopped.Store(true)
	cancelHandlers()
	<-done
	stopWatching()
	watchers.Wait()
	close(w.acks)
	<-ackerDone
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
	held := make(map[int64]*Job, len(w.running))
	for j := range w.running {
		held[j.ID] = j
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
	for id, j := range held {
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
		w.claimGone(j, cause)
	}
}

// claimGone cancels the handler of j, if it still runs, with cause.
func (w *worker) claimGone(j *Job, cause error) {
	w.mu.Lock()
	r := w.running[j]
	w.mu.Unlock()
	if r != nil {
		r.claimGone(cause)
	}
}

// heartbeats extends, every Visibility/3, the claims of the handlers that
// have run for Visibility/3 or more and whose context is still live (not
// past Timeout, not stopped hard), by Visibility: a claim is extended
// before two thirds of its lease are gone, and handlers shorter than a
// third of it cost nothing. A beat that finds the claim gone cancels the
// handler.
func (w *worker) heartbeats(ctx context.Context) {
	every := max(w.opts.Visibility/3, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		var due []*Job
		for j, r := range w.running {
			// Only for a handler whose context is live: one past its Timeout
			// or stopped hard that ignores its context keeps no claim, so
			// its job comes back after Visibility instead of never.
			if time.Since(r.since) >= every && r.ctx.Err() == nil {
				due = append(due, j)
			}
		}
		w.mu.Unlock()
		var beats sync.WaitGroup
		for _, j := range due {
			beats.Add(1)
			go func() { defer beats.Done(); w.heartbeat(ctx, j) }()
		}
		beats.Wait()
	}
}

func (w *worker) heartbeat(ctx context.Context, j *Job) {
	if j.settled() { // the handler settled its job itself
		return
	}
	_, err := j.extend(ctx, w.opts.Visibility)
	switch {
	case errors.Is(err, ErrClaimLost):
		w.claimGone(j, fmt.Errorf("job %d: heartbeat: %w", j.ID, err))
	case err != nil && !j.settled() && ctx.Err() == nil:
		w.q.s.log.Warn("alkstore: heartbeat failed", "queue", w.q.name, "job", j.ID, "error", err)
	}
}

// untilNextDue is how long to sleep when the queue has nothing claimable:
// until the earliest run_at or claim deadline, at most the safety poll.
func (w *worker) untilNextDue(ctx context.Context) time.Duration {
	due, err := w.q.nextDue(ctx)
	if err != nil || due == nil {
		return w.opts.PollInterval
	}
	return min(max(due.Sub(w.q.s.now()), time.Millisecond), w.opts.PollInterval)
}

func (w *worker) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-w.wake:
	case <-t.C:
	}
}

// waitForSlot waits until a handler finishes. The slots channel has no
// "became non-full" signal, so finishing handlers ping freed.
func (w *worker) waitForSlot(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-w.freed:
	}
}

func (w *worker) runJob(handlerBase, settleCtx context.Context, j *Job) {
	defer w.wg.Done()
	defer func() {
		<-w.slots
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}()
	claimCtx, claimGone := context.WithCancelCause(handlerBase)
	ctx, cancel := context.WithTimeout(claimCtx, w.opts.Timeout)
	w.mu.Lock()
	w.running[j] = &runningJob{since: time.Now(), ctx: ctx, claimGone: claimGone}
	w.mu.Unlock()

	err := callHandler(ctx, w.handler, j)

	w.mu.Lock()
	delete(w.running, j)
	w.mu.Unlock()
	stoppedIt := err != nil && handlerBase.Err() != nil && w.stopped.Load()
	lost := errors.Is(context.Cause(claimCtx), ErrClaimLost)
	cancel()
	claimGone(nil)
	if lost {
		return // cancelled or taken over: the job is not ours to settle
	}
	w.settle(settleCtx, j, err, stoppedIt)
}

func callHandler(ctx context.Context, h Handler, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, j)
}

// settle settles the job by its handler's result, unless the handler
// settled it itself. stoppedIt says the handler failed after the stop
// cancelled it: the job did not fail, so it goes back with its attempt.
func (w *worker) settle(ctx context.Context, j *Job, err error, stoppedIt bool) {
	if j.settled() {
		return
	}
	var perm *permanentError
	var snooze *snoozeError
	switch {
	case err == nil:
		w.acks <- j
		return
	case errors.As(err, &snooze):
		err = j.Snooze(ctx, snooze.delay)
	case stoppedIt:
		err = j.release(ctx)
	case errors.As(err, &perm):
		err = j.Fail(ctx, err.Error())
	default:
		_, err = j.Retry(ctx, w.opts.Backoff(j.Attempts), err.Error())
	}
	if err != nil {
		w.q.s.log.Warn("alkstore: could not settle job", "queue", w.q.name, "job", j.ID, "error", err)
	}
}

// ackLoop acks finished jobs in batches: whatever has accumulated while the
// previous batch was in flight goes in the next one.
func (w *worker) ackLoop(ctx context.Context) {
	batch := make([]*Job, 0, cap(w.acks))
	for j := range w.acks {
		batch = append(batch[:0], j)
	drain:
		for len(batch) < 1000 {
			select {
			case j, ok := <-w.acks:
				if !ok {
					break drain
				}
				batch = append(batch, j)
			default:
				break drain
			}
		}
		n, err := w.q.AckMany(ctx, batch)
		if err != nil {
			w.q.s.log.Warn("alkstore: ack failed; the jobs will run again", "queue", w.q.name, "jobs", len(batch), "error", err)
		} else if int(n) < len(batch) {
			// Lost: the claim expired (the job runs again), or the job was
			// cancelled or deleted meanwhile (it does not).
			w.q.s.log.Warn("alkstore: claims lost before their ack (expired: those jobs run again; or cancelled or deleted)",
				"queue", w.q.name, "lost", len(batch)-int(n))
		}
	}
}
