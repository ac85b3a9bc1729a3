package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
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
		Short: "Apply every pending migration",
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
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.printStatus(cmd.Context())
		},
	})
	return cmd
}

type migrationJSON struct {
	Version int64  `json:"version"`
	File    string `json:"file"`
	Applied bool   `json:"applied"`
}

// printStatus reads goose's history through alkstore's version table,
// read only: a database alkstore never touched lists every migration
// pending.
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
	var out []migrationJSON
	for _, src := range p.ListSources() {
		out = append(out, migrationJSON{Version: src.Version, File: src.Path, Applied: applied[src.Version]})
	}
	if a.json {
		for _, m := range out {
			if err := jsonLine(a.out, m); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.out, "VERSION", "FILE", "STATE")
	for _, m := range out {
		state := "pending"
		if m.Applied {
			state = "applied"
		}
		t.row(m.Version, m.File, state)
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
