// Package schema embeds alkstore's goose migrations, one folder per dialect.
// They are also sqlc's schema input and what a DBA applies with the goose
// CLI and alkstore's version table (see README.md, "Schema and migrations").
//
// Applied migrations never change, the 00001 baseline included: every
// schema change is a new numbered file, with the same number in pg/ and
// lite/ (a no-op SELECT 1 where a dialect has nothing to do).
package schema

import (
	"embed"
	"io/fs"
)

//go:embed pg/*.sql pg/bootstrap/*.sql lite/*.sql
var files embed.FS

// Version table names: alkstore keeps its goose history apart from any the
// application keeps in goose's default goose_db_version table.
const (
	PostgresVersionTable = "alkstore.goose_db_version"
	SQLiteVersionTable   = "alk_goose_db_version"
)

// Postgres returns the PostgreSQL migrations.
func Postgres() (fs.FS, error) { return fs.Sub(files, "pg") }

// SQLite returns the SQLite migrations.
func SQLite() (fs.FS, error) { return fs.Sub(files, "lite") }

// PostgresBootstrap is the statement run before goose on PostgreSQL: it
// creates the alkstore schema that holds goose's version table.
func PostgresBootstrap() (string, error) {
	b, err := files.ReadFile("pg/bootstrap/00000_schema.sql")
	return string(b), err
}
