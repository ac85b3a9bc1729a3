package pgdb

// Written by hand, not by sqlc: EnqueueJobsAlike's statement, its payloads
// any value pgx encodes as a bytea[] and its ids read from its first id or
// the array's binary form. TestEnqueueJobsAlikeFromIsEnqueueJobsAlike holds its
// arguments to the generated EnqueueJobsAlike's.

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// EnqueueJobsAlikeFrom runs EnqueueJobsAlike's statement with payloads in
// place of arg.Payloads (a [][]byte, or a pgtype.ArrayGetter that spares
// building one) and appends the ids of its n jobs to ids: first_id and
// the next n-1 when the statement sends no array (they were contiguous),
// else the array's. A binary bigint[] without NULLs (the statement's,
// under the extended protocol) is read in one pass; any other form goes
// through pgx's Scan, as EnqueueJobsAlike's. Scanning the array into a
// []int64 cost about 200 instructions an id (callgrind, a 1,000-job
// batch).
func (q *Queries) EnqueueJobsAlikeFrom(ctx context.Context, arg EnqueueJobsAlikeParams, payloads any, n int, ids []int64) ([]int64, error) {
	rows, err := q.db.Query(ctx, enqueueJobsAlike,
		payloads,
		arg.Wake,
		arg.Headers,
		arg.Queue,
		arg.Priority,
		arg.MaxAttempts,
		arg.Now,
		arg.RunAt,
		arg.ExpiresAt,
	)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, pgx.ErrNoRows
	}
	got, err := alikeIDs(rows, n, ids)
	if err != nil {
		return nil, err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return got, nil
}

// alikeIDs appends to ids those of EnqueueJobsAlike's row (first_id, ids):
// n from first_id up when ids is NULL, else the array's elements.
func alikeIDs(rows pgx.Rows, n int, ids []int64) ([]int64, error) {
	fd, raw := rows.FieldDescriptions(), rows.RawValues()
	if len(fd) == 2 && len(raw) == 2 && fd[0].Format == pgtype.BinaryFormatCode && fd[0].DataTypeOID == pgtype.Int8OID &&
		len(raw[0]) == 8 && fd[1].Format == pgtype.BinaryFormatCode && fd[1].DataTypeOID == pgtype.Int8ArrayOID {
		if raw[1] == nil {
			return AppendIDRun(ids, int64(binary.BigEndian.Uint64(raw[0])), n), nil
		}
		if got, ok := AppendInt8Array(ids, raw[1]); ok {
			return got, nil
		}
	}
	var r EnqueueJobsAlikeRow
	if err := rows.Scan(&r.FirstID, &r.Ids); err != nil {
		return nil, err
	}
	return r.AppendIDs(ids, n), nil
}

// AppendIDs appends to ids those of the n jobs r answers for (see
// EnqueueJobsAlike): n from r.FirstID up when r.Ids is nil (they were
// contiguous), else r.Ids.
func (r EnqueueJobsAlikeRow) AppendIDs(ids []int64, n int) []int64 {
	if r.Ids == nil {
		return AppendIDRun(ids, r.FirstID, n)
	}
	return append(ids, r.Ids...)
}

// AppendIDRun appends first and the n-1 ids after it to ids.
func AppendIDRun(ids []int64, first int64, n int) []int64 {
	for id := first; id < first+int64(n); id++ {
		ids = append(ids, id)
	}
	return ids
}

// AppendInt8Array appends the elements of b, a one-dimensional bigint[]
// without NULLs in PostgreSQL's binary form, to ids; ok is false (and ids
// returned as they were) when b is anything else: NULL, NULL elements,
// another type or shape, or malformed. An empty array appends nothing.
func AppendInt8Array(ids []int64, b []byte) (_ []int64, ok bool) {
	if len(b) < 12 {
		return ids, false
	}
	ndim, hasNull, elem := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:])
	switch {
	case elem != pgtype.Int8OID || hasNull != 0:
		return ids, false
	case ndim == 0:
		return ids, len(b) == 12
	case ndim != 1 || len(b) < 20:
		return ids, false
	}
	n := int64(int32(binary.BigEndian.Uint32(b[12:])))
	b = b[20:]
	if n < 0 || int64(len(b)) != n*12 {
		return ids, false
	}
	out := ids
	for ; len(b) >= 12; b = b[12:] {
		if binary.BigEndian.Uint32(b) != 8 {
			return ids, false
		}
		out = append(out, int64(binary.BigEndian.Uint64(b[4:])))
	}
	return out, true
}
