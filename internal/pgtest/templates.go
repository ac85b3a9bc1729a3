package pgtest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Templates are a test package's migrated databases, one of each engine,
// made on first use, that its tests' fresh databases are copies of: an
// Open of a copy finds the schema current, as every Open of an
// application's database after its first does. A package whose tests are
// not of migrations uses them instead of migrating each test's database:
// on the 2-core VM (load ~20, -race) a store's Open of a new PostgreSQL
// database cost 0.09-0.11 CPU-seconds in the test binary and 0.26-0.27 in
// the server, of a copy 0.01-0.02 and 0.14-0.15 (CREATE DATABASE and the
// sessions); of a new SQLite file 0.042 in the test binary, of a copy a
// file's copy. (alktest did this first: migrating each test's database
// cost it a third of its CPU.)
type Templates struct {
	// Migrate opens a store on dsn (a PostgreSQL DSN or a SQLite file)
	// and closes it, leaving no session behind (a PostgreSQL copy needs
	// its template idle).
	Migrate func(ctx context.Context, dsn string) error

	once sync.Once
	dir  string // the SQLite template's directory
	lite string // the SQLite template
	pg   string // the PostgreSQL template's DSN; empty when srv is nil or cannot copy
	err  error
}

// Fresh returns a fresh database of engine ("pg" or "lite") migrated as
// Migrate leaves it: on pg a copy of the template on srv (a new database
// when srv cannot copy one: ALK_PG_CREATEDB), on lite a copy of the
// template file at file. srv is the package's one server (nil when there is
// none); every call must pass the same one.
func (m *Templates) Fresh(ctx context.Context, srv *Server, engine, file string) (string, error) {
	m.once.Do(func() {
		if m.dir, m.err = os.MkdirTemp("", "alkstore-template-"); m.err != nil {
			return
		}
		m.lite = filepath.Join(m.dir, "alk.db")
		if m.err = m.Migrate(ctx, m.lite); m.err != nil || srv == nil || !srv.CopiesDatabases() {
			return
		}
		if m.pg, m.err = srv.NewDatabase(ctx); m.err == nil {
			m.err = m.Migrate(ctx, m.pg)
		}
	})
	if m.err != nil {
		return "", m.err
	}
	if engine != "pg" {
		for _, suffix := range []string{"", "-wal"} { // a WAL, if Close left one, goes with it
			b, err := os.ReadFile(m.lite + suffix)
			if suffix != "" && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(file+suffix, b, 0o600); err != nil {
				return "", err
			}
		}
		return file, nil
	}
	if m.pg == "" { // ALK_PG_CREATEDB makes the databases (Citus): a new one, migrated by its first Open
		return srv.NewDatabase(ctx)
	}
	return srv.NewDatabaseFrom(ctx, m.pg)
}

// Remove removes the SQLite template (the PostgreSQL one goes with its
// server).
func (m *Templates) Remove() {
	if m.dir != "" {
		_ = os.RemoveAll(m.dir)
	}
}
