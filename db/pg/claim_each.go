package pgdb

// Written by hand, not by sqlc: ClaimJobs's statement, read without
// allocating per row. TestClaimJobsEachIsClaimJobs holds its arguments and
// columns to the generated ClaimJobs's.

import "context"

// ClaimJobsEach runs ClaimJobs's statement and hands each row to each as
// it is read, in one ClaimJobsRow (and one list of scan targets) reused
// for every row, where ClaimJobs allocates both per row and a slice of
// them. Each row's Payload, Errors, Headers, ExpiresAt and LastError are
// its own (the scan allocates them anew, or sets them nil for NULL): each
// may keep them, but not the row itself.
func (q *Queries) ClaimJobsEach(ctx context.Context, arg ClaimJobsParams, each func(*ClaimJobsRow)) error {
	rows, err := q.db.Query(ctx, claimJobs,
		arg.Now,
		arg.ClaimExpiresAt,
		arg.ClaimToken,
		arg.Worker,
		arg.Queue,
		arg.MaxJobs,
	)
	if err != nil {
		return err
	}
	defer rows.Close()
	var i ClaimJobsRow
	dest := []any{
		&i.ID,
		&i.Payload,
		&i.Priority,
		&i.Attempts,
		&i.MaxAttempts,
		&i.CreatedAt,
		&i.RunAt,
		&i.ExpiresAt,
		&i.LastError,
		&i.Errors,
		&i.Headers,
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		each(&i)
	}
	return rows.Err()
}
