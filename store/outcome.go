package store

import (
	"context"
	"errors"
)

// Outcome is how a handler's result settles its job, as Queue.Work reads
// it: what middleware counts instead of "error or not" (a snooze is not a
// failure, a cancelled job is not one either).
type Outcome string

const (
	OutcomeCompleted Outcome = "completed" // nil: acked
	OutcomeSnoozed   Outcome = "snoozed"   // Snooze(d): back to pending, the attempt given back
	OutcomeRetried   Outcome = "retried"   // another error with attempts left: runs again after the backoff
	OutcomeDead      Outcome = "dead"      // Permanent(err), or an error on the last attempt: failed for good
	// OutcomeCancelled: the job's claim was lost while it ran (Queue.Cancel
	// anywhere, or another worker took the lapsed claim): nothing is
	// settled, whatever the handler returned.
	OutcomeCancelled Outcome = "cancelled"
)

// HandlerOutcome classifies a handler's result for job, with the context
// the handler ran with (its cause says whether the claim was lost). It
// reads the result the way Work settles it; it does not know whether the
// settle itself then succeeded.
//
// An outbox deliverer's last attempt reads as retried: Outbox.Run turns it
// into a permanent failure outside the deliverer (its OutboxOpts.MaxAttempts
// is not the job's).
//
// It works on today's Work, which reads a handler's error; the rewrite of
// the handler lifecycle into one typed outcome replaces its body.
func HandlerOutcome(ctx context.Context, job *Job, err error) Outcome {
	var snooze *snoozeError
	var permanent *permanentError
	switch {
	case errors.Is(context.Cause(ctx), ErrClaimLost):
		return OutcomeCancelled
	case err == nil:
		return OutcomeCompleted
	case errors.As(err, &snooze):
		return OutcomeSnoozed
	case errors.As(err, &permanent):
		return OutcomeDead
	case job != nil && job.Attempts >= job.MaxAttempts:
		return OutcomeDead
	}
	return OutcomeRetried
}
