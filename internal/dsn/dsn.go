// Package dsn reads a DSN as store.Open does: which engine it names, and
// (secrets.go) what in it is secret. The library and the alkstore command
// share it, so the command never takes a DSN for another engine than the
// library would.
package dsn

import (
	"regexp"
	"strings"
)

// Kind is the form of a DSN.
type Kind int

const (
	Empty            Kind = iota // no DSN
	Unsupported                  // a URL of a scheme Open does not take
	PostgresURL                  // postgres:// or postgresql://
	PostgresKeyValue             // libpq's key=value form ("host=/tmp dbname=app")
	SQLite                       // a file path, sqlite:path or a file: URI
)

// Postgres reports whether the DSN names a PostgreSQL database.
func (k Kind) Postgres() bool { return k == PostgresURL || k == PostgresKeyValue }

// keyValue matches libpq's "host=... dbname=..." form, which Open reads
// as pgx does (without it, it would be read as a SQLite file name).
var keyValue = regexp.MustCompile(`^\s*[a-z_]+\s*=`)

// uriScheme matches a URI scheme (RFC 3986), the only part of an
// unsupported DSN that an error may quote.
var uriScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// Classify is the form of d and, for SQLite, the path or file: URI to
// open (sqlite: stripped); for Unsupported, the scheme when it is one
// ("" when the text before "://" may hold a password: "u:pw@h://").
func Classify(d string) (Kind, string) {
	switch {
	case strings.HasPrefix(d, "postgres://"), strings.HasPrefix(d, "postgresql://"):
		return PostgresURL, ""
	case strings.HasPrefix(d, "sqlite:"):
		return SQLite, strings.TrimPrefix(d, "sqlite:")
	case strings.HasPrefix(d, "file:"):
		return SQLite, d
	case d == "":
		return Empty, ""
	case keyValue.MatchString(d):
		return PostgresKeyValue, ""
	case strings.Contains(d, "://"):
		scheme, _, _ := strings.Cut(d, "://")
		if !uriScheme.MatchString(scheme) {
			scheme = ""
		}
		return Unsupported, scheme
	default:
		return SQLite, d
	}
}
