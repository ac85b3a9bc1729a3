// Package litedriver holds what alkstore needs from its SQLite driver
// (github.com/ncruces/go-sqlite3) beyond what the driver gives: nullable
// BLOB columns that keep an empty value apart from NULL, and connections
// that turn the driver's panics into errors.
package litedriver

import (
	"database/sql/driver"
	"fmt"
)

// Blob is a nullable BLOB column: nil is SQL NULL, and any other value,
// an empty one included, is a BLOB. Reading keeps them apart: NULL scans
// to nil and a zero-length BLOB to a non-nil empty slice.
//
// Scanning into a plain []byte cannot: the driver reads a zero-length BLOB
// through sqlite3_column_blob, which returns a NULL pointer for it, so it
// arrives as nil, like NULL. It does arrive as a []byte (a typed nil),
// while NULL arrives as an untyped nil, which is what Scan tells apart.
type Blob []byte

// Scan implements sql.Scanner. src may point into the driver's memory, so
// it is copied.
func (b *Blob) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*b = nil
	case []byte:
		*b = append(make([]byte, 0, len(v)), v...)
	case string:
		*b = append(make([]byte, 0, len(v)), v...)
	default:
		return fmt.Errorf("litedriver: cannot scan %T into a BLOB", src)
	}
	return nil
}

// Value implements driver.Valuer: nil binds NULL, an empty Blob a
// zero-length BLOB.
func (b Blob) Value() (driver.Value, error) {
	if b == nil {
		return nil, nil
	}
	return []byte(b), nil
}
