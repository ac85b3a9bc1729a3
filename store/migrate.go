package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// migration describes how to run goose on one engine.
type migration struct {
	dialect goose.Dialect
	files   func() (fs.FS, error)
	table   string
	locker  lock.SessionLocker // nil: none needed
	// guarded: the engine has no migration lock (goose has none for
	// SQLite); each migration's transaction checks instead that no one else
	// applied it first (see onceStore).
	guarded bool
}

// migrateOrCheck brings the schema up to date, or with auto-migration off
// only checks that it is at the version this library was built for.
func migrateOrCheck(ctx context.Context, db *sql.DB, m migration, apply bool) error {
	fsys, err := m.files()
	if err != nil {
		return err
	}
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	dialect := m.dialect
	if m.guarded {
		st, err := database.NewStore(m.dialect, m.table)
		if err != nil {
			return err
		}
		dialect = goose.DialectCustom
		opts = append(opts, goose.WithStore(onceStore{st}))
	} else {
		opts = append(opts, goose.WithTableName(m.table))
	}
	if m.locker != nil {
		opts = append(opts, goose.WithSessionLocker(m.locker))
	}
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return err
	}
	sources := p.ListSources()
	if apply {
		return up(ctx, p, len(sources))
	}
	want := sources[len(sources)-1].Version
	have, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("%w: cannot read the schema version (apply schema/ with goose, or open with auto-migration): %w", ErrSchemaVersion, err)
	}
	if have != want {
		return fmt.Errorf("%w: database is at version %d, this library needs %d", ErrSchemaVersion, have, want)
	}
	return nil
}

// up applies the pending migrations. A migration that failed because
// another process applied it first (its transaction rolled back) is not an
// error: up looks again and applies what is still pending. Each retry
// follows someone else's progress, so there are at most as many as
// migrations.
func up(ctx context.Context, p *goose.Provider, migrations int) error {
	for attempt := 0; ; attempt++ {
		_, err := p.Up(ctx)
		if err == nil || attempt == migrations || !lostRace(ctx, p, err) {
			return err
		}
	}
}

// lostRace tells whether err is a migration that someone else applied
// first: onceStore said so, or the statements failed (a table that already
// exists) and the database is now at or past that version.
func lostRace(ctx context.Context, p *goose.Provider, err error) bool {
	if errors.Is(err, errAppliedElsewhere) {
		return true
	}
	var partial *goose.PartialError
	if !errors.As(err, &partial) || partial.Failed == nil || partial.Failed.Source == nil {
		return false
	}
	have, verr := p.GetDBVersion(ctx)
	return verr == nil && have >= partial.Failed.Source.Version
}

// errAppliedElsewhere rolls back a migration another process applied first.
var errAppliedElsewhere = errors.New("migration already applied by another process")

// onceStore is goose's version store with a check that makes concurrent
// migrations of one SQLite file safe without a lock: goose runs each
// migration and records its version in one transaction, which on the writer
// connection is BEGIN IMMEDIATE, so it holds SQLite's write lock and reads
// the latest committed versions. Recording a version that is already
// recorded means another process applied the migration after this one
// decided to: the transaction fails and rolls back (as would its statements
// that do not fail on a second run), and up looks again.
type onceStore struct{ database.Store }

// CreateVersionTable does nothing when another process created the table
// after this one looked (goose would fail, then retry a second later): the
// version read inside the transaction succeeds only if the table exists. A
// failed statement leaves an SQLite transaction usable.
func (s onceStore) CreateVersionTable(ctx context.Context, db database.DBTxConn) error {
	if _, err := s.GetLatestVersion(ctx, db); err == nil || errors.Is(err, database.ErrVersionNotFound) {
		return nil
	}
	return s.Store.CreateVersionTable(ctx, db)
}

func (s onceStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	m, err := s.GetMigration(ctx, db, req.Version)
	switch {
	case err == nil && m.IsApplied && req.Version == 0:
		return nil // the version table's first row, written by whoever created the table
	case err == nil && m.IsApplied:
		return fmt.Errorf("version %d: %w", req.Version, errAppliedElsewhere)
	case err != nil && !errors.Is(err, database.ErrVersionNotFound):
		return err
	}
	return s.Store.Insert(ctx, db, req)
}
