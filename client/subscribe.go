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
	JobCompleted JobEventKind = "completed" // the handler returned nil
	JobRetried   JobEventKind = "retried"   // it failed and runs again after its backoff
	JobDead      JobEventKind = "dead"      // it failed for good: Permanent, or its last attempt
	JobSnoozed   JobEventKind = "snoozed"   // it returned store.Snooze
	JobCancelled JobEventKind = "cancelled" // its claim was lost while it ran (Queue.Cancel)
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
// SubscribeBuffer).
//
// Sending never blocks a worker: when the buffer is full the new event is
// dropped and counted (Dropped), so a slow reader loses the newest events,
// never slows the jobs. The kind is read from the handler's result (see
// store.HandlerOutcome) as the run ends, before the job is settled; a
// payload that a typed queue cannot decode fails its job without a run,
// and a job a stop gives back (released) or that the handler settled
// itself has no event.
func (c *Client) Subscribe(buffer int, kinds ...JobEventKind) *Subscription {
	if buffer <= 0 {
		buffer = SubscribeBuffer
	}
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

// publish wraps h to tell subscribers how each run ended.
func (c *Client) publish(h store.Handler) store.Handler {
	return func(ctx context.Context, job *store.Job) error {
		start := time.Now()
		done := false
		defer func() {
			if done {
				return
			}
			// A panic counts as an error: its run gets its event, then the
			// panic goes on to the lifecycle, which settles the job.
			if p := recover(); p != nil {
				c.emit(ctx, job, start, fmt.Errorf("handler panicked: %v", p))
				panic(p)
			}
		}()
		err := h(ctx, job)
		done = true
		c.emit(ctx, job, start, err)
		return err
	}
}

// emit sends the event of one handler run to every subscription.
func (c *Client) emit(ctx context.Context, job *store.Job, start time.Time, err error) {
	ev := JobEvent{Job: job, Duration: time.Since(start), Err: err}
	switch store.HandlerOutcome(ctx, job, err) {
	case store.OutcomeAcked:
		ev.Kind = JobCompleted
	case store.OutcomeSnoozed:
		ev.Kind = JobSnoozed
	case store.OutcomeRetried:
		ev.Kind = JobRetried
	case store.OutcomeFailed:
		ev.Kind = JobDead
	case store.OutcomeClaimLost:
		ev.Kind = JobCancelled
	default: // released by a stop, or settled by the handler itself: no outcome of its own
		return
	}
	c.subs.Range(func(k, _ any) bool {
		k.(*Subscription).send(ev)
		return true
	})
}
