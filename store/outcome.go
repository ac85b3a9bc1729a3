package store

import (
	"context"
	"errors"
)

// HandlerOutcome tells middleware, which sees a handler's result before
// the lifecycle settles the job, which Outcome the lifecycle gives it (see
// runner.settle, whose order of rules it follows): what to count instead of
// "error or not", since a snooze, a cancel and a stop are not failures.
// ctx is the context the handler ran with (its cause says whether the
// claim was lost or a stop cut it).
//
// It cannot know that the settle then failed (JobResult.SettleErr) or that
// the claim lapsed after the handler returned, and an outbox deliverer's
// last attempt reads as retried (Outbox.Run turns it into a failure
// outside the deliverer). Job.OnResult reports what the lifecycle actually
// did, after the settle; HandlerOutcome is for handlers run outside it.
func HandlerOutcome(ctx context.Context, job *Job, err error) Outcome {
	cause := context.Cause(ctx)
	_, snoozed := SnoozeDelay(err)
	switch {
	case errors.Is(cause, ErrClaimLost):
		return OutcomeClaimLost
	case job != nil && job.q != nil && job.settled():
		return OutcomeSettledByHandler
	case err == nil:
		return OutcomeAcked
	case snoozed:
		return OutcomeSnoozed
	case ctx.Err() != nil && errors.Is(cause, context.Canceled):
		// A stop cancelled the handler (a Timeout ends it with
		// DeadlineExceeded instead): it goes back with its attempt.
		return OutcomeReleased
	case IsPermanent(err), job != nil && job.Attempts >= job.MaxAttempts:
		return OutcomeFailed
	}
	return OutcomeRetried
}
