package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/store"
)

// JobEventKind is what became of a job's run.
type JobEventKind string

const (
	JobCompleted JobEventKind = "completed" // the handler returned nil (or called Job.Ack) and the job completed
	JobRetried   JobEventKind = "retried"   // it failed (or its handler called Job.Retry) and runs again at Result.RunAt
	JobDead      JobEventKind = "dead"      // it failed for good: Permanent, its last attempt (an outbox's too), or Job.Fail
	JobSnoozed   JobEventKind = "snoozed"   // it returned store.Snooze (or called Job.Snooze) and runs again at Result.RunAt
	JobCancelled JobEventKind = "cancelled" // it was cancelled (Queue.Cancel) while it ran, or by its handler
	// JobLost: its claim was lost while it ran or before its settle
	// (it lapsed and another worker took the job, or the job was
	// deleted): nothing was settled; Result.State says what the job was
	// found as.
	JobLost JobEventKind = "lost"
	// JobReleased: a stop cancelled the handler, which then failed, or
	// the handler released its job itself (store.Job.Release): the job
	// is back in its queue with its attempt given back, due at
	// Result.RunAt.
	JobReleased JobEventKind = "released"
	// JobUnsettled: the settle failed (a database error, in
	// Result.SettleErr): the job runs again once its claim lapses.
	JobUnsettled JobEventKind = "unsettled"
	// JobFailed selects, in Subscribe, both JobRetried and JobDead: every
	// run that failed. No event has it as its Kind.
	JobFailed JobEventKind = "failed"
)

// JobEvent is one handler run of a queue or outbox the client runs.
type JobEvent struct {
	Kind     JobEventKind
	Job      *store.Job    // as the handler got it
	Duration time.Duration // how long the handler (and its middleware) ran
	Err      error         // what the handler returned (nil for completed)
	// Result is what the lifecycle did, after the settle (see
	// store.Job.OnResult): the outcome, the job's state and when it runs
	// again, and why a settle failed.
	Result store.JobResult
}

// SubscribeBuffer is a subscription's buffer unless Subscribe is given one.
const SubscribeBuffer = 256

// Subscription is a channel of job events; see Client.Subscribe.
type Subscription struct {
	c       *Client
	ch      chan JobEvent
	kinds   []JobEventKind // nil: every kind
	dropped atomic.Int64
	once    sync.Once
	mu      sync.Mutex // held by sends, so Close never closes a channel mid-send
	closed  bool
}

// C delivers the events, in the order their runs ended per goroutine. It
// is closed by Close.
func (sub *Subscription) C() <-chan JobEvent { return sub.ch }

// Dropped counts the events dropped because the buffer was full.
func (sub *Subscription) Dropped() int64 { return sub.dropped.Load() }

// Close ends the subscription and closes C.
func (sub *Subscription) Close() {
	sub.once.Do(func() {
		sub.c.subs.Delete(sub)
		sub.mu.Lock()
		sub.closed = true
		close(sub.ch)
		sub.mu.Unlock()
	})
}

// Subscribe returns a subscription to the job events of every queue and
// outbox this client runs (like River's Client.Subscribe), for tests and
// metrics: one event per handler run, of the given kinds (none: all;
// JobFailed: retried and dead). buffer sizes its channel (0:
// SubscribeBuffer; at most store.MaxSubscribeBuffer, which a larger one
// takes: the channel is allocated up front, so a huge buffer panicked in
// make or ran the process out of memory).
//
// Sending never blocks a worker: when the buffer is full the new event is
// dropped and counted (Dropped), so a slow reader loses the newest events,
// never slows the jobs. An event is sent once the run was settled (for a
// completed job, once its batched ack committed) and says what actually
// happened (store.Job.OnResult): a run whose settle found its claim gone
// is JobLost (or JobCancelled), one whose settle failed JobUnsettled, an
// outbox's last failed delivery JobDead. A payload that a typed queue
// cannot decode fails its job without a run (no event). A job its handler
// settled itself has the event of that settle (store.JobResult.SettledAs):
// Ack gives JobCompleted, Fail JobDead, Cancel JobCancelled, and the
// put-backs JobRetried (Retry; JobDead when no attempt was left),
// JobSnoozed (Snooze) and JobReleased (Release), with Result.RunAt; Tx
// forms alike, once their transaction committed.
func (c *Client) Subscribe(buffer int, kinds ...JobEventKind) *Subscription {
	if buffer <= 0 {
		buffer = SubscribeBuffer
	}
	buffer = min(buffer, store.MaxSubscribeBuffer)
	sub := &Subscription{c: c, ch: make(chan JobEvent, buffer)}
	for _, k := range kinds {
		if k == JobFailed {
			sub.kinds = append(sub.kinds, JobRetried, JobDead)
		} else {
			sub.kinds = append(sub.kinds, k)
		}
	}
	c.subs.Store(sub, struct{}{})
	return sub
}

func (sub *Subscription) send(ev JobEvent) {
	if sub.kinds != nil && !slices.Contains(sub.kinds, ev.Kind) {
		return
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.closed {
		return
	}
	select {
	case sub.ch <- ev:
	default:
		sub.dropped.Add(1)
	}
}

// publish wraps h to tell subscribers how each run ended, once the
// lifecycle settled it.
func (c *Client) publish(h store.Handler) store.Handler {
	return func(ctx context.Context, job *store.Job) error {
		start := time.Now()
		var took time.Duration
		var err error
		registered := job.OnResult(func(res store.JobResult) { c.emit(job, took, err, res) })
		if !registered { // not run by the lifecycle: read the outcome from the result
			defer func() {
				if p := recover(); p != nil {
					c.emit(job, time.Since(start), nil, store.JobResult{Outcome: store.OutcomeFailed, Err: fmt.Errorf("handler panicked: %v", p)})
					panic(p)
				}
			}()
			err := h(ctx, job)
			c.emit(job, time.Since(start), err, store.JobResult{Outcome: store.HandlerOutcome(ctx, job, err), Err: err})
			return err
		}
		// A panic goes on to the lifecycle, which settles the job and
		// reports its result; its duration is taken on the way out.
		defer func() { took = time.Since(start) }()
		err = h(ctx, job)
		return err
	}
}

// emit sends the event of one handler run to every subscription.
func (c *Client) emit(job *store.Job, took time.Duration, err error, res store.JobResult) {
	if err == nil {
		err = res.Err // a panic, which the lifecycle turned into an error
	}
	ev := JobEvent{Job: job, Duration: took, Err: err, Result: res}
	switch {
	case res.SettleErr != nil:
		ev.Kind = JobUnsettled
	case res.Outcome == store.OutcomeAcked:
		ev.Kind = JobCompleted
	case res.Outcome == store.OutcomeSnoozed:
		ev.Kind = JobSnoozed
	case res.Outcome == store.OutcomeRetried:
		ev.Kind = JobRetried
	case res.Outcome == store.OutcomeFailed:
		ev.Kind = JobDead
	case res.Outcome == store.OutcomeReleased:
		ev.Kind = JobReleased
	case res.Outcome == store.OutcomeClaimLost && res.State == store.JobCancelled:
		ev.Kind = JobCancelled
	case res.Outcome == store.OutcomeClaimLost:
		ev.Kind = JobLost
	case res.Outcome == store.OutcomeSettledByHandler:
		// The handler's own settle: the kind of the settle it made.
		if ev.Kind = handlerSettleKind(res); ev.Kind == "" {
			return // run outside the lifecycle, which alone knows which
		}
	default:
		return
	}
	c.subs.Range(func(k, _ any) bool {
		k.(*Subscription).send(ev)
		return true
	})
}

// handlerSettleKind is the kind of the settle a handler made of its own
// job (store.JobResult.SettledAs), "" when unknown.
func handlerSettleKind(res store.JobResult) JobEventKind {
	switch res.SettledAs {
	case store.OutcomeAcked:
		return JobCompleted
	case store.OutcomeRetried:
		return JobRetried
	case store.OutcomeFailed:
		return JobDead
	case store.OutcomeSnoozed:
		return JobSnoozed
	case store.OutcomeReleased:
		return JobReleased
	case store.OutcomeCancelled:
		return JobCancelled
	}
	return ""
}
