package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// migration describes how to run goose on one engine.
type migration struct {
	dialect goose.Dialect
	files   func() (fs.FS, error)
	table   string
	locker  lock.SessionLocker // nil: none needed
}

// migrateOrCheck brings the schema up to date, or with auto-migration off
// only checks that it is at the version this library was built for.
func migrateOrCheck(ctx context.Context, db *sql.DB, m migration, apply bool) error {
	fsys, err := m.files()
	if err != nil {
		return err
	}
	opts := []goose.ProviderOption{goose.WithTableName(m.table), goose.WithDisableGlobalRegistry(true)}
	if m.locker != nil {
		opts = append(opts, goose.WithSessionLocker(m.locker))
	}
	p, err := goose.NewProvider(m.dialect, db, fsys, opts...)
	if err != nil {
		return err
	}
	if apply {
		_, err := p.Up(ctx)
		return err
	}
	sources := p.ListSources()
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
