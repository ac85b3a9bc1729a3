package store

import (
	"context"
	"fmt"
)

// JobQueue is a typed view of a queue: payloads are values of T, encoded
// and decoded with the store's codec (JSON unless the store was opened
// WithCodec).
type JobQueue[T any] struct {
	q *Queue
}

// JobQueue returns the typed view of the queue called name.
func (s *Store) JobQueue[T any](name string) *JobQueue[T] {
	return &JobQueue[T]{q: s.Queue(name)}
}

// Queue returns the untyped queue underneath, for Claim, Stats, Job and
// the other byte-level operations.
func (t *JobQueue[T]) Queue() *Queue { return t.q }

// Enqueue encodes v and adds it as a job.
func (t *JobQueue[T]) Enqueue(ctx context.Context, v T, opts EnqueueOpts) (int64, error) {
	payload, err := t.encode(v)
	if err != nil {
		return 0, opErr("enqueue", t.q.name, err)
	}
	return t.q.Enqueue(ctx, payload, opts)
}

// EnqueueTx encodes v and adds it as a job inside tx.
func (t *JobQueue[T]) EnqueueTx(ctx context.Context, tx Tx, v T, opts EnqueueOpts) (int64, error) {
	payload, err := t.encode(v)
	if err != nil {
		return 0, opErr("enqueue", t.q.name, err)
	}
	return t.q.EnqueueTx(ctx, tx, payload, opts)
}

// TypedJob is one job of a typed batch (JobQueue.EnqueueMany): its value
// and options, as NewJob for Queue.EnqueueMany.
type TypedJob[T any] struct {
	Value T
	Opts  EnqueueOpts
}

// EnqueueMany encodes every value and adds them as jobs in one
// transaction, as Queue.EnqueueMany (a unique job whose key is held gets
// the holder's id). A value that does not encode fails the batch with
// ErrCodec before any I/O.
func (t *JobQueue[T]) EnqueueMany(ctx context.Context, jobs []TypedJob[T]) ([]int64, error) {
	nj, err := t.encodeAll(jobs)
	if err != nil {
		return nil, err
	}
	return t.q.EnqueueMany(ctx, nj)
}

// EnqueueManyTx is EnqueueMany inside tx, all or none there too (see
// Queue.EnqueueManyTx).
func (t *JobQueue[T]) EnqueueManyTx(ctx context.Context, tx Tx, jobs []TypedJob[T]) ([]int64, error) {
	nj, err := t.encodeAll(jobs)
	if err != nil {
		return nil, err
	}
	return t.q.EnqueueManyTx(ctx, tx, nj)
}

// encodeAll encodes a typed batch for Queue's batch forms.
func (t *JobQueue[T]) encodeAll(jobs []TypedJob[T]) ([]NewJob, error) {
	out := make([]NewJob, len(jobs))
	for i, j := range jobs {
		payload, err := t.encode(j.Value)
		if err != nil {
			return nil, opErr("enqueue many", t.q.name, fmt.Errorf("job %d: %w", i, err))
		}
		out[i] = NewJob{Payload: payload, Opts: j.Opts}
	}
	return out, nil
}

// Work runs handler on each job's decoded value, as Queue.Work does. A
// payload that does not decode fails its job at once with ErrCodec in its
// cause; the worker keeps going.
func (t *JobQueue[T]) Work(ctx context.Context, opts WorkOpts, handler func(ctx context.Context, job *Job, v T) error) error {
	w, err := t.NewWorker(opts, handler)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// WorkTx runs handler on each job's decoded value in a transaction, as
// Queue.WorkTx does.
func (t *JobQueue[T]) WorkTx(ctx context.Context, opts WorkOpts, handler func(ctx context.Context, tx Tx, job *Job, v T) error) error {
	w, err := t.NewWorkerTx(opts, handler)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// NewWorker is Queue.NewWorker for handler on decoded values (see Work).
func (t *JobQueue[T]) NewWorker(opts WorkOpts, handler func(ctx context.Context, job *Job, v T) error) (*Worker, error) {
	if handler == nil {
		return t.q.NewWorker(opts, nil)
	}
	return t.q.NewWorker(opts, func(ctx context.Context, job *Job) error {
		v, err := t.decode(job)
		if err != nil {
			return err
		}
		return handler(ctx, job, v)
	})
}

// NewWorkerTx is Queue.NewWorkerTx for handler on decoded values (see
// WorkTx).
func (t *JobQueue[T]) NewWorkerTx(opts WorkOpts, handler func(ctx context.Context, tx Tx, job *Job, v T) error) (*Worker, error) {
	if handler == nil {
		return t.q.NewWorkerTx(opts, nil)
	}
	return t.q.NewWorkerTx(opts, func(ctx context.Context, tx Tx, job *Job) error {
		v, err := t.decode(job)
		if err != nil {
			return err
		}
		return handler(ctx, tx, job, v)
	})
}

// decode is a job's value as a handler gets it; a payload that does not
// decode is a permanent failure.
func (t *JobQueue[T]) decode(job *Job) (T, error) {
	var v T
	if err := t.q.s.codec.Unmarshal(job.Payload, &v); err != nil {
		return v, Permanent(fmt.Errorf("%w: decode job %d: %w", ErrCodec, job.ID, err))
	}
	return v, nil
}

// Payload decodes job's payload with the store's codec, as Work hands it
// to its handler.
func (t *JobQueue[T]) Payload(job *Job) (T, error) {
	var v T
	switch {
	case t == nil || t.q == nil || t.q.s == nil:
		return v, opErr("payload", "", errNoStore)
	case job == nil:
		return v, opErr("payload", t.q.name, fmt.Errorf("%w: nil job", ErrInvalidArgument))
	}
	if err := t.q.s.codec.Unmarshal(job.Payload, &v); err != nil {
		return v, opErr("payload", t.q.name, fmt.Errorf("%w: decode job %d: %w", ErrCodec, job.ID, err))
	}
	return v, nil
}

func (t *JobQueue[T]) encode(v T) ([]byte, error) {
	b, err := t.q.s.codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCodec, err)
	}
	return b, nil
}
