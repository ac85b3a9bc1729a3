package store

import (
	"errors"
	"fmt"
	"time"
)

// Store returns the store the queue belongs to (for helpers such as
// alktest that are handed a queue).
func (q *Queue) Store() *Store {
	if q == nil {
		return nil
	}
	return q.s
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

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent: Work fails such a job at once instead of retrying it.
func IsPermanent(err error) bool {
	var perm *permanentError
	return errors.As(err, &perm)
}

// SnoozeDelay reports whether err, or an error it wraps, is a Snooze
// result, and its delay: Work puts such a job back without spending an
// attempt.
func SnoozeDelay(err error) (time.Duration, bool) {
	var snooze *snoozeError
	if errors.As(err, &snooze) {
		return snooze.delay, true
	}
	return 0, false
}
