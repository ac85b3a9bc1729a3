package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/spf13/cobra"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

func (a *app) migrateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply or show alkstore's schema migrations (the goose files the library embeds)"}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration, then list them as status does",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.migrate = true
			if _, err := a.store(cmd.Context()); err != nil {
				return err
			}
			return a.printStatus(cmd.Context())
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Long: `List this binary's migrations and whether each is applied, then each
version the database records applied that this binary has no file for: a
newer alkstore applied it, and this binary's other commands refuse the
database until it is upgraded (stderr says so; the exit code is 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.printStatus(cmd.Context())
		},
	})
	return cmd
}

type migrationJSON struct {
	Version int64  `json:"version"`
	File    string `json:"file,omitempty"`
	Applied bool   `json:"applied"`
	// Unknown: the database records this version applied and this binary
	// has no file for it (a newer alkstore applied it).
	Unknown bool `json:"unknown,omitempty"`
}

// printStatus reads goose's history through alkstore's version table,
// read only: a database alkstore never touched lists every migration
// pending. It lists, after this binary's files, the versions the database
// records applied that it has no file for, and says on stderr when the
// database is newer than this binary: status and up said every migration
// was applied while every other command refused the database.
func (a *app) printStatus(ctx context.Context) error {
	dsn, err := a.resolveDSN()
	if err != nil {
		return err
	}
	db, dialect, fsys, table, err := openSQL(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := goose.NewProvider(dialect, db, fsys, goose.WithDisableGlobalRegistry(true), goose.WithTableName(table))
	if err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, db, dialect, table)
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	out, have, want := statusRows(p.ListSources(), applied)
	if err := a.printMigrations(out); err != nil {
		return err
	}
	if have > want {
		_, err = fmt.Fprintf(a.errOut, "the database is at version %d, newer than this alkstore binary (%d): a newer alkstore migrated it; "+
			"upgrade this binary (its other commands refuse this database)\n", have, want)
	}
	return err
}

// statusRows is a row for each of this binary's migrations, then one for
// each version the database records applied without a file here; have is
// the highest version applied, want this binary's highest.
func statusRows(sources []*goose.Source, applied map[int64]bool) (rows []migrationJSON, have, want int64) {
	known := map[int64]bool{}
	for _, src := range sources {
		known[src.Version] = true
		want = max(want, src.Version)
		rows = append(rows, migrationJSON{Version: src.Version, File: src.Path, Applied: applied[src.Version]})
	}
	var unknown []int64
	for v, ok := range applied {
		if ok && v > 0 { // goose records 0 when it creates the table
			have = max(have, v)
			if !known[v] {
				unknown = append(unknown, v)
			}
		}
	}
	slices.Sort(unknown)
	for _, v := range unknown {
		rows = append(rows, migrationJSON{Version: v, Applied: true, Unknown: true})
	}
	return rows, have, want
}

func (a *app) printMigrations(rows []migrationJSON) error {
	if a.json {
		for _, m := range rows {
			if err := jsonLine(a.out, m); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.out, "VERSION", "FILE", "STATE")
	for _, m := range rows {
		state, file := "pending", m.File
		switch {
		case m.Unknown:
			state, file = "applied (unknown to this binary)", "-"
		case m.Applied:
			state = "applied"
		}
		t.row(m.Version, file, state)
	}
	return t.flush()
}

// appliedVersions is every version the version table records as applied;
// none when the table does not exist (goose creates it when it migrates).
// A database it cannot read is an error, never "nothing applied": a status
// listing every migration pending for a database that does not exist, or
// that is no database, told the operator to migrate it.
func appliedVersions(ctx context.Context, db *sql.DB, dialect goose.Dialect, table string) (map[int64]bool, error) {
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	st, err := database.NewStore(dialect, table)
	if err != nil {
		return nil, err
	}
	applied := map[int64]bool{}
	rows, err := st.ListMigrations(ctx, db)
	if err != nil {
		if noVersionTable(err) {
			return applied, nil
		}
		return nil, fmt.Errorf("read the schema versions from %s: %w", table, err)
	}
	for _, r := range rows {
		applied[r.Version] = applied[r.Version] || r.IsApplied
	}
	return applied, nil
}

// noVersionTable reports whether err says the version table (PostgreSQL:
// or its schema) does not exist. goose's SQLite store cannot ask the
// catalog (TableExists is PostgreSQL's only), so its text is all there is.
func noVersionTable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42P01" || pe.Code == "3F000" // undefined_table, invalid_schema_name
	}
	return strings.Contains(err.Error(), "no such table")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// openSQL opens a database/sql handle for goose on the DSN's engine, the
// one store.Open picks (internal/dsn classifies for both: a key=value DSN
// was an SQLite file name here, created in the working directory with the
// password in its name). A DSN Open refuses is refused as Open refuses it.
func openSQL(ctx context.Context, d string) (*sql.DB, goose.Dialect, fs.FS, string, error) {
	kind, target := dsnform.Classify(d)
	switch {
	case kind.Postgres():
		// As the store's pool reads it: its pool_* settings are not the
		// server's (sql.Open("pgx", d) sent them, and the server refused).
		cfg, err := dsnform.ConnConfig(d)
		if err != nil {
			return nil, "", nil, "", openRefusal(ctx, d)
		}
		fsys, err := schema.Postgres()
		if err != nil {
			return nil, "", nil, "", err
		}
		return stdlib.OpenDB(*cfg), goose.DialectPostgres, fsys, schema.PostgresVersionTable, nil
	case kind == dsnform.SQLite:
		fsys, err := schema.SQLite()
		if err != nil {
			return nil, "", nil, "", err
		}
		db, err := openLiteReadOnly(target)
		return db, goose.DialectSQLite3, fsys, schema.SQLiteVersionTable, err
	default:
		return nil, "", nil, "", openRefusal(ctx, d)
	}
}

// openRefusal is the error store.Open refuses d with, before any I/O (a
// DSN of no engine, or one that does not parse): migrate says what every
// other command says, with the same exit code.
func openRefusal(ctx context.Context, d string) error {
	st, err := store.Open(ctx, d, store.WithoutMigrate())
	if err == nil {
		_ = st.Close()
		err = fmt.Errorf("open: %w", store.ErrInvalidArgument)
	}
	return err
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver

// openLiteReadOnly opens an SQLite path or file: URI (dsnform.Classify's
// target: sqlite: stripped) for reading the version table. A file that
// does not exist is an error, as a PostgreSQL database that does not exist
// is: SQLite would create it, and the status of the empty file listed
// every migration pending and exited 0.
func openLiteReadOnly(path string) (*sql.DB, error) {
	if err := noLiteFile(path); err != nil {
		return nil, err
	}
	uri := path
	if !strings.HasPrefix(path, "file:") {
		uri = "file:" + (&url.URL{Path: path}).EscapedPath()
	}
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return litedriver.Open(uri + sep + "_pragma=query_only(1)&_pragma=busy_timeout(5000)")
}

// noLiteFile is the error for an SQLite path or file: URI (dsnform.Classify's
// target) naming a file that does not exist; nil for one that exists, an
// in-memory database or a URI it cannot read. Only migrate up creates the
// file: SQLite creates a missing one on open, and a mistyped path left an
// empty file behind every read command, which migrate status then listed
// as a database with every migration pending.
func noLiteFile(path string) error {
	if file, ok := liteFile(path); ok {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("open: no SQLite database at \"%s\" (alkstore migrate up creates it)", file) // not %q: its escapes would hide a password from the scrub
		}
	}
	return nil
}

// liteFile is the file an SQLite path or file: URI names; false for an
// in-memory database or a URI it cannot read.
func liteFile(path string) (string, bool) {
	if !strings.HasPrefix(path, "file:") {
		return path, path != "" && path != ":memory:"
	}
	u, err := url.Parse(path)
	if err != nil || u.Query().Get("mode") == "memory" {
		return "", false
	}
	file := u.Path
	if u.Opaque != "" {
		// file:relative.db; the opaque part keeps its escapes
		// ("file:exists%207.db" names "exists 7.db", as SQLite reads it).
		if file, err = url.PathUnescape(u.Opaque); err != nil {
			return "", false
		}
	}
	return file, file != "" && file != ":memory:"
}
