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

// ClaimJobsAndAckEach runs ClaimJobsAndAck's statement as ClaimJobsEach
// runs ClaimJobs's: each claimed job's row is handed to each in one reused
// ClaimJobsRow, and the ids the carried ack settled (the statement's last
// row, id 0) are returned. Its ack's ids and claims go as text, as
// AckJobsText sends AckJobs's (ackIDs the text of a bigint[], ackClaims
// the JSON object of each id's token), in place of arg.AckIds and
// arg.AckClaims, which it does not send. TestClaimJobsAndAckEachIsClaimJobsAndAck
// holds its arguments and columns to the generated ClaimJobsAndAck's.
func (q *Queries) ClaimJobsAndAckEach(ctx context.Context, ackIDs, ackClaims string, arg ClaimJobsAndAckParams,
	each func(*ClaimJobsRow)) ([]int64, error) {
	rows, err := q.db.Query(ctx, claimJobsAndAck,
		ackIDs,
		arg.Queue,
		arg.Now,
		ackClaims,
		arg.MaxJobs,
		arg.ClaimExpiresAt,
		arg.ClaimToken,
		arg.Worker,
	)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var i ClaimJobsRow
	var acked []int64
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
		&acked,
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if acked != nil { // the last row: the ack's
			continue
		}
		each(&i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if acked == nil {
		acked = []int64{}
	}
	return acked, nil
}
