package litedb

// Written by hand, not by sqlc: ClaimedJobs's statement, read without
// allocating per row. TestClaimedJobsEachIsClaimedJobs holds its arguments
// and columns to the generated ClaimedJobs's.

import (
	"context"
	"database/sql"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// ClaimedJobsEachRow is a row of ClaimedJobs as ClaimedJobsEach reads it:
// LastError, Errors and Headers are the driver's bytes, nil for NULL (and
// for an empty text), valid only until the next row; ExpiresAt is Valid
// unless NULL. Payload is the row's own copy.
type ClaimedJobsEachRow struct {
	ID          int64
	Payload     litedriver.Blob
	Priority    int64
	Attempts    int64
	MaxAttempts int64
	CreatedAt   int64
	RunAt       int64
	ExpiresAt   sql.NullInt64
	LastError   sql.RawBytes
	Errors      sql.RawBytes
	Headers     sql.RawBytes
}

// ClaimedJobsEach runs ClaimedJobs's statement and hands each row to each
// as it is read, in one ClaimedJobsEachRow (and one list of scan targets)
// reused for every row, where ClaimedJobs allocates a row, its scan
// targets, its errors' text and its nullable columns per row, and a slice
// of them. each may keep a row's Payload (the scan allocates it anew, or
// sets it nil for NULL), and must copy what it keeps of the rest.
func (q *Queries) ClaimedJobsEach(ctx context.Context, arg ClaimedJobsParams, each func(*ClaimedJobsEachRow)) error {
	rows, err := q.query(ctx, q.claimedJobsStmt, claimedJobs, arg.Ids, arg.ClaimToken)
	if err != nil {
		return err
	}
	defer rows.Close()
	var i ClaimedJobsEachRow
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
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}
