package store

import (
	"context"
	"fmt"
)

// OutboxQueuePrefix starts the name of every outbox's backing queue. It is in
// the reserved namespace, so Store.Queue refuses it: an outbox is reachable
// only through its Outbox handle.
const OutboxQueuePrefix = ReservedPrefix + "_outbox:"

// unlimitedAttempts is an outbox message's own attempt limit unless its
// EnqueueOpts set one: OutboxOpts.MaxAttempts of the delivering Run governs.
const unlimitedAttempts = 1 << 30

// Outbox is a transactional outbox: messages written in the same transaction
// as the business rows they describe, delivered afterwards (to a webhook, a
// broker, another service) by Run with retries, backoff and dead letters.
// Creating one does no I/O; a bad name is reported by every operation.
type Outbox struct {
	name string
	q    *Queue
}

// Outbox returns the outbox called name, backed by the queue
// OutboxQueuePrefix+name.
func (s *Store) Outbox(name string) *Outbox {
	// The backing queue's name is reserved on purpose; only the outbox's own
	// name is the caller's to choose, and it is validated like any name.
	return &Outbox{name: name, q: newQueue(handle{s: s, name: OutboxQueuePrefix + name, err: validateName(name)})}
}

// Name returns the outbox's name.
func (ob *Outbox) Name() string { return ob.name }

// QueueName returns the name of the backing queue, as Stats and the janitor
// report it.
func (ob *Outbox) QueueName() string { return ob.q.name }

// EnqueueTx adds a message inside tx: it is delivered only if tx commits.
// opts work as for jobs; MaxAttempts, when set, caps the message's delivery
// attempts below OutboxOpts.MaxAttempts.
func (ob *Outbox) EnqueueTx(ctx context.Context, tx Tx, payload []byte, opts EnqueueOpts) (int64, error) {
	return ob.q.enqueue(ctx, tx.via(ctx), payload, outboxOpts(opts))
}

// Enqueue adds a message on its own (auto-commit).
func (ob *Outbox) Enqueue(ctx context.Context, payload []byte, opts EnqueueOpts) (int64, error) {
	return ob.q.enqueue(ctx, autoWrite(ctx), payload, outboxOpts(opts))
}

func outboxOpts(o EnqueueOpts) EnqueueOpts {
	if o.MaxAttempts == 0 {
		o.MaxAttempts = unlimitedAttempts
	}
	return o
}

// OutboxOpts configure Outbox.Run: a worker's options (Concurrency is
// deliveries at once, Timeout per delivery, Grace on stop, ...) and the
// outbox's attempt limit. Zero values take the defaults.
type OutboxOpts struct {
	WorkOpts
	MaxAttempts int // deliveries before a message goes to dead; default DefaultMaxAttempts
}

// Run delivers messages with deliver until ctx is cancelled, through the
// queue machinery (see Queue.Work): deliver returning nil completes the
// message; an error retries it after Backoff until MaxAttempts deliveries
// failed, then it goes to dead; Permanent sends it to dead at once. A
// message whose deliverer crashed counts the attempt too. Messages are
// delivered at least once: make deliver idempotent (the message's ID is a
// good idempotency key). Run is NewWorker and Worker.Run.
func (ob *Outbox) Run(ctx context.Context, opts OutboxOpts, deliver Handler) error {
	w, err := ob.NewWorker(opts, deliver)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// NewWorker returns the worker that Run runs, checked as Queue.NewWorker
// checks (and a negative MaxAttempts), to run and stop on its own.
func (ob *Outbox) NewWorker(opts OutboxOpts, deliver Handler) (*Worker, error) {
	switch {
	case opts.MaxAttempts < 0:
		return nil, opErr("outbox run", ob.name, fmt.Errorf("%w: MaxAttempts %d < 0", ErrInvalidArgument, opts.MaxAttempts))
	case deliver == nil:
		return nil, opErr("outbox run", ob.name, fmt.Errorf("%w: no deliver function", ErrInvalidArgument))
	}
	limit := opts.MaxAttempts
	if limit == 0 {
		limit = DefaultMaxAttempts
	}
	return ob.q.NewWorker(opts.WorkOpts, func(ctx context.Context, m *Job) error {
		if m.Attempts > limit {
			// Earlier deliveries crashed or timed out past their claim.
			return Permanent(fmt.Errorf("attempts exhausted: %d deliveries started, MaxAttempts is %d", m.Attempts-1, limit))
		}
		err := deliver(ctx, m)
		if err != nil && m.Attempts >= limit {
			return Permanent(err)
		}
		return err
	})
}

// Stats counts the outbox's messages by state.
func (ob *Outbox) Stats(ctx context.Context) (QueueStats, error) { return ob.q.Stats(ctx) }

// Job returns one message by id, dead ones included (to see LastError).
func (ob *Outbox) Job(ctx context.Context, id int64) (*Job, error) { return ob.q.Job(ctx, id) }

// Requeue sends a dead message back for delivery, with its attempts reset.
func (ob *Outbox) Requeue(ctx context.Context, id int64) error { return ob.q.Requeue(ctx, id) }

// Jobs returns a page of the outbox's messages in one state, as Queue.Jobs
// pages a queue's jobs (what an operator lists dead messages with).
func (ob *Outbox) Jobs(ctx context.Context, opts JobsOpts) ([]*Job, error) {
	return ob.q.Jobs(ctx, opts)
}

// RequeueDead sends every dead message back for delivery, as
// Queue.RequeueDead does a queue's dead jobs, and returns how many it moved.
func (ob *Outbox) RequeueDead(ctx context.Context) (int64, error) { return ob.q.RequeueDead(ctx) }
