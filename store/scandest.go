package store

import (
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// A Scan destination of the application's own type (an sql.Scanner, a pgx
// RowScanner or one of pgtype's scanner interfaces, a type that decodes
// JSON with its own UnmarshalJSON) runs its code while the row decodes,
// and that code may run statements through the Tx whose rows it scans
// (review56 R4). Both engines' drivers held the connection while they
// decoded: on PostgreSQL the guard's call lock (see appRows.Scan), on
// SQLite database/sql's lock of the connection (Go 1.27, for a driver
// that scans columns itself, as go-sqlite3's does): the statement waited
// for a lock its own goroutine held, for ever. Business rows decode such
// destinations once the connection is given back; the drivers' own types
// (plainDest) still decode in place, at no cost.

// plainDest reports whether decoding into d runs none of the
// application's code: d is nil or a pointer to a type pgx or database/sql
// decodes itself. Any other is decoded as if it did. Codecs the
// application registers on a pgx connection's type map run in any
// decoding, and must not run statements.
func plainDest(d any) bool {
	switch d.(type) {
	case nil, *any, *string, *[]byte, *bool, *int, *int16, *int32, *int64,
		*uint32, *uint64, *float32, *float64, *time.Time, *json.RawMessage,
		**string, **[]byte, **bool, **int, **int16, **int32, **int64,
		**float64, **time.Time, *[]string, *[]int64, *[]int32,
		*sql.RawBytes, *sql.NullString, *sql.NullInt64, *sql.NullInt32,
		*sql.NullInt16, *sql.NullBool, *sql.NullFloat64, *sql.NullTime,
		*sql.NullByte, *sql.Null[string], *sql.Null[int64], *sql.Null[int],
		*sql.Null[bool], *sql.Null[float64], *sql.Null[time.Time],
		*pgtype.Text, *pgtype.Int2, *pgtype.Int4, *pgtype.Int8, *pgtype.Bool,
		*pgtype.Float4, *pgtype.Float8, *pgtype.Numeric, *pgtype.Timestamptz,
		*pgtype.Timestamp, *pgtype.Date, *pgtype.Interval, *pgtype.UUID:
		return true
	}
	return false
}

// plainDests reports whether every destination of dest is plainDest.
func plainDests(dest []any) bool {
	for _, d := range dest {
		if !plainDest(d) {
			return false
		}
	}
	return true
}

// scanApart is database/sql's Scan (scan: a *sql.Rows' or *sql.Row's) of
// a row into dest, some of which are not plainDest: those columns are
// scanned as the driver hands them to a destination it does not know
// (into an any, through database/sql's conversion), then assigned to
// their destinations with that conversion once the Scan gave the
// connection back. columns names them in an error, when there are.
func scanApart(scan func(...any) error, columns func() ([]string, error), dest []any) error {
	into := make([]any, len(dest))
	vals := make([]any, len(dest))
	for i, d := range dest {
		into[i] = d
		if !plainDest(d) {
			into[i] = &vals[i]
		}
	}
	if err := scan(into...); err != nil {
		return err
	}
	for i, d := range dest {
		if plainDest(d) {
			continue
		}
		if err := sql.ConvertAssign(driver.ScanContext{}, d, vals[i]); err != nil {
			name := ""
			if columns != nil {
				if cols, cerr := columns(); cerr == nil && i < len(cols) {
					name = cols[i]
				}
			}
			return fmt.Errorf(`sql: Scan error on column index %d, name %q: %w`, i, name, err)
		}
	}
	return nil
}
