package pgdb

// Written by hand, not by sqlc: EnqueueJobsAlike's statement, its payloads
// any value pgx encodes as a bytea[] and its ids read from the array's
// binary form. TestEnqueueJobsAlikeFromIsEnqueueJobsAlike holds its
// arguments to the generated EnqueueJobsAlike's.

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// EnqueueJobsAlikeFrom runs EnqueueJobsAlike's statement with payloads in
// place of arg.Payloads (a [][]byte, or a pgtype.ArrayGetter that spares
// building one), and appends the ids to ids. A binary bigint[] without
// NULLs (the statement's, under the extended protocol) is read in one
// pass; any other form goes through pgx's Scan, as EnqueueJobsAlike's.
// Scanning the array into a []int64 cost about 200 instructions an id
// (callgrind, a 1,000-job batch).
func (q *Queries) EnqueueJobsAlikeFrom(ctx context.Context, arg EnqueueJobsAlikeParams, payloads any, ids []int64) ([]int64, error) {
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
	fd := rows.FieldDescriptions()
	got, ok := ids, false
	if len(fd) == 1 && fd[0].Format == pgtype.BinaryFormatCode && fd[0].DataTypeOID == pgtype.Int8ArrayOID {
		got, ok = AppendInt8Array(ids, rows.RawValues()[0])
	}
	if !ok {
		var scanned []int64
		if err := rows.Scan(&scanned); err != nil {
			return nil, err
		}
		got = append(ids, scanned...)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return got, nil
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
