package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// migration describes how to run goose on one engine.
type migration struct {
	dialect goose.Dialect
	files   func() (fs.FS, error)
	table   string
	cli     string // the goose command a DBA runs, for error messages
	// objects reads which of the tables Open looks at exist.
	objects func(ctx context.Context) (schemaObjects, error)
	// prepare readies the database for goose and returns the lock to
	// migrate under (nil: none needed). It runs only when a migration is
	// pending, so that opening a current database needs no privilege beyond
	// those of the library's own statements.
	prepare func(ctx context.Context) (lock.SessionLocker, error)
	// guarded: the engine has no migration lock (goose has none for
	// SQLite); each migration's transaction checks instead that no one else
	// applied it first (see onceStore).
	guarded bool
}

// schemaObjects is what Open looks at before it asks goose anything.
type schemaObjects struct {
	versionTable bool   // alkstore's goose version table exists
	tables       bool   // alkstore's tables exist
	defaultTable string // goose's default version table, if it exists
}

// migrateOrCheck brings the schema up to date, or with auto-migration off
// only checks that it is at the version this library was built for. A
// current database is only read: goose, which creates its version table
// and (on PostgreSQL) the alkstore schema first, runs only when a migration
// is pending.
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
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return err
	}
	sources := p.ListSources()
	want := sources[len(sources)-1].Version
	have, applied, err := recordedVersions(ctx, db, m)
	if err != nil {
		return err
	}
	var missing []int64 // below the recorded version, never applied
	for _, src := range sources {
		if v := src.Version; v < have && !applied[v] {
			if !lateSafe[v] {
				return fmt.Errorf("%w: the database records version %d but not version %d, which cannot be applied after it "+
					"(schema/README.md)", ErrSchemaVersion, have, v)
			}
			missing = append(missing, v)
		}
	}
	switch {
	case len(missing) == 0 && (have == want || apply && have > want):
		return nil
	case !apply && have == 0:
		return fmt.Errorf("%w: the database has no alkstore schema (%s records no version): apply it with %s, or open with auto-migration", ErrSchemaVersion, m.table, m.cli)
	case !apply && len(missing) > 0:
		return fmt.Errorf("%w: database is at version %d without versions %v, this library needs %d: open with auto-migration, or add -allow-missing to: %s",
			ErrSchemaVersion, have, missing, want, m.cli)
	case !apply && have > want:
		return fmt.Errorf("%w: the database is at version %d, newer than this library (%d): a newer alkstore migrated it; upgrade alkstore",
			ErrSchemaVersion, have, want)
	case !apply:
		return fmt.Errorf("%w: the database is at version %d, older than this library (%d): apply the migrations with %s, or open with auto-migration",
			ErrSchemaVersion, have, want, m.cli)
	}
	// The missing versions are all late-safe: goose applies them first,
	// then the new ones.
	opts = append(opts, goose.WithAllowOutofOrder(true))
	if p, err = goose.NewProvider(dialect, db, fsys, opts...); err != nil {
		return err
	}
	if m.prepare != nil {
		locker, err := m.prepare(ctx)
		if err != nil {
			return err
		}
		if locker != nil {
			opts = append(opts, goose.WithSessionLocker(locker))
			if p, err = goose.NewProvider(dialect, db, fsys, opts...); err != nil {
				return err
			}
		}
	}
	return up(ctx, p, len(sources))
}

// lateSafe are the versions main merged after a higher one: 00010 landed
// before 00007, 00009 and 00008 (in that order), so a database opened by
// main in between records 00010 without them. Each touches tables the
// versions above it up to 00010 do not (00008 copies the events indexes
// from the catalog, whichever exist), so Open applies them late. Any other
// version missing below the recorded one is refused: version numbers are
// taken when a branch merges (schema/README.md).
var lateSafe = map[int64]bool{7: true, 8: true, 9: true}

// recordedVersions returns the latest version alkstore's version table
// records (0 when it records none or does not exist: goose creates it when
// it migrates) and every version applied. It refuses a database whose
// alkstore tables exist while that table records none: their schema was
// applied with another version table (goose's default one, when -table was
// left out), and migrating would apply it again. The tables are looked at
// before the version is read: a migration commits its tables and its
// version together, so tables seen here mean their version is visible
// below, even while another process is migrating.
func recordedVersions(ctx context.Context, db *sql.DB, m migration) (int64, map[int64]bool, error) {
	objs, err := m.objects(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("read the schema catalog: %w", err)
	}
	var have int64
	applied := map[int64]bool{}
	if objs.versionTable {
		st, err := database.NewStore(m.dialect, m.table)
		if err != nil {
			return 0, nil, err
		}
		rows, err := st.ListMigrations(ctx, db)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: cannot read the schema versions from %s: %w", ErrSchemaVersion, m.table, err)
		}
		seen := map[int64]bool{}
		for _, r := range rows { // newest first: a version's latest row says whether it is applied
			if !seen[r.Version] {
				seen[r.Version] = true
				applied[r.Version] = r.IsApplied
			}
		}
		for v, ok := range applied {
			if ok {
				have = max(have, v)
			}
		}
	}
	if have > 0 || !objs.tables {
		return have, applied, nil
	}
	if objs.defaultTable != "" {
		return 0, nil, fmt.Errorf("%w: alkstore's tables exist but %s records no version, and goose's default version table %s exists: "+
			"the schema was applied without -table %s; copy its history into %s (README.md, \"Schema and migrations\"), "+
			"then run goose as: %s", ErrSchemaVersion, m.table, objs.defaultTable, m.table, m.table, m.cli)
	}
	return 0, nil, fmt.Errorf("%w: alkstore's tables exist but %s records no version: the schema was applied with another "+
		"goose version table; copy its history into %s (README.md, \"Schema and migrations\"), then run goose as: %s",
		ErrSchemaVersion, m.table, m.table, m.cli)
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
// exists) and the database now records that version applied.
func lostRace(ctx context.Context, p *goose.Provider, err error) bool {
	if errors.Is(err, errAppliedElsewhere) {
		return true
	}
	var partial *goose.PartialError
	if !errors.As(err, &partial) || partial.Failed == nil || partial.Failed.Source == nil {
		return false
	}
	status, err := p.Status(ctx)
	return err == nil && slices.ContainsFunc(status, func(s *goose.MigrationStatus) bool {
		return s.Source.Version == partial.Failed.Source.Version && s.State == goose.StateApplied
	})
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
