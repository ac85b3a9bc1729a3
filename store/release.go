package store

import "context"

// Release gives a claimed job back to its queue without spending its
// attempt: it is claimable again at once, in its old place in line (its
// RunAt is kept). It is what a stop does with a job whose handler it
// cancelled: the job did not fail. A handler that releases its own job
// should then return (its result no longer settles the job). Like Ack, it
// fails with ErrClaimLost once the claim expired or another worker holds
// the job.
func (j *Job) Release(ctx context.Context) error { return j.release(ctx) }
