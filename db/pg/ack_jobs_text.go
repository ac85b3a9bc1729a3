package pgdb

// Written by hand, not by sqlc: AckJobs's statement with its ids sent as
// text. TestAckJobsTextIsAckJobs holds its arguments and result to the
// generated AckJobs's.

import "context"

// AckJobsText runs AckJobs's statement with its ids as the text of a
// bigint[] ({1,2,3}) in place of arg.Ids, which it does not send: pgx sends
// a string argument in the text format, which the server parses once as
// it binds the statement (the statement and its plan are AckJobs's), where
// a []int64 is encoded one element at a time, each boxed in an interface:
// an allocation for every job a worker acks (issue 18).
func (q *Queries) AckJobsText(ctx context.Context, ids string, arg AckJobsParams) ([]int64, error) {
	row := q.db.QueryRow(ctx, ackJobs,
		ids,
		arg.Queue,
		arg.Now,
		arg.Claims,
	)
	var acked []int64
	err := row.Scan(&acked)
	return acked, err
}
