package litedb

// Written by hand, not by sqlc: ClaimableJobs's statement, read without
// allocating per row. TestClaimableJobsEachIsClaimableJobs holds its
// arguments and columns to the generated ClaimableJobs's.

import (
	"context"
	"database/sql"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// ClaimableJobsEachRow is a row of ClaimableJobs as ClaimableJobsEach reads
// it: LastError, Errors and Headers are the driver's bytes, nil for NULL
// (and for an empty text), valid only until the next row; ExpiresAt is
// Valid unless NULL. Payload is the row's own copy.
type ClaimableJobsEachRow struct {
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

// ClaimableJobsEach runs ClaimableJobs's statement and hands each row to
// each as it is read, in one ClaimableJobsEachRow (and one list of scan
// targets) reused for every row, where ClaimableJobs allocates a row, its
// scan targets and its errors' text per row, reads each nullable column
// through database/sql's reflection, and grows a slice of them. each may
// keep a row's Payload (the scan allocates it anew, or sets it nil for
// NULL), and must copy what it keeps of the rest.
func (q *Queries) ClaimableJobsEach(ctx context.Context, arg ClaimableJobsParams, each func(*ClaimableJobsEachRow)) error {
	rows, err := q.query(ctx, q.claimableJobsStmt, claimableJobs, arg.Queue, arg.Now, arg.MaxJobs)
	if err != nil {
		return err
	}
	defer rows.Close()
	var i ClaimableJobsEachRow
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
