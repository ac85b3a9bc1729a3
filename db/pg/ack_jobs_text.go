package pgdb

// Written by hand, not by sqlc: AckJobs's statement with its ids sent as
// text. TestAckJobsTextIsAckJobs holds its arguments and result to the
// generated AckJobs's.

import "context"

// AckJobsText runs AckJobs's statement with its ids as the text of a
// bigint[] ({1,2,3}) in place of arg.Ids, and the claims' JSON as text in
// place of arg.Claims, neither of which it sends: pgx sends
// a string argument in the text format, which the server parses once as
// it binds the statement (the statement and its plan are AckJobs's), where
// a []int64 is encoded one element at a time, each boxed in an interface:
// an allocation for every job a worker acks (issue 18). The claims go as a
// string for every query mode: where pgx does not know the parameter's
// type (QueryExecModeExec, the simple protocol) it sends a []byte as
// bytea ("\x7b..."), which jsonb refuses (SQLSTATE 22P02); a string is
// the JSON's text in every mode, parsed once as the statement is bound.
func (q *Queries) AckJobsText(ctx context.Context, ids, claims string, arg AckJobsParams) ([]int64, error) {
	row := q.db.QueryRow(ctx, ackJobs,
		ids,
		arg.Queue,
		arg.Now,
		claims,
	)
	var acked []int64
	err := row.Scan(&acked)
	return acked, err
}
