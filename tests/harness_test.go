// Package tests is alkstore's contract suite: every behaviour test body runs
// against both engines, as subtests "pg" and "lite", on real databases.
package tests

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

var (
	pgServer *pgtest.Server // nil when ALK_ENGINES leaves out pg
	engines  []string       // the engines ALK_ENGINES selects; both by default
)

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child)) // this binary was started as a test's child process
	}
	var err error
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !slices.Contains(engines, "pg") {
		prebuild()
		code := m.Run() // ALK_ENGINES=lite: no PostgreSQL needed
		removeSkewedLite()
		migratedTemplate.remove()
		waitExamplesBuild()
		os.Exit(code)
	}
	srv, err := pgtest.StartForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgServer = srv
	prebuild()
	code := m.Run()
	srv.Stop()
	removeSkewedLite()
	migratedTemplate.remove()
	waitExamplesBuild()
	os.Exit(code)
}

// prebuild starts, in the background beside the tests before them, the
// builds the selected tests will wait for.
func prebuild() {
	flag.Parse() // for willRun; m.Run does not parse again
	if willRun("TestExamplesRunTwiceSideBySide") {
		startExamplesBuild()
	}
}

// engineEnv is one engine's fresh database of the test's own: a copy of a
// migrated one, or empty (emptyDatabases).
type engineEnv struct {
	name string // "pg" or "lite"
	dsn  string
}

// eachEngine runs body once per engine ALK_ENGINES selects (both by
// default), each on its own fresh database. The engines' runs are parallel
// subtests: they share nothing, and pg's half mostly waits on the server
// while lite's computes, so a test takes about its slower half instead of
// the sum. They start when the test function returns, so code after
// eachEngine must not read what the bodies wrote (put it in t.Cleanup, or use
// eachEngineInTurn). GOTESTFLAGS=-parallel=1 runs them one at a time.
func eachEngine(t *testing.T, body func(t *testing.T, e *engineEnv)) {
	t.Helper()
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body(t, newEnv(t, name))
		})
	}
}

// eachEngineInTurn is eachEngine with the engines run one after the other,
// for a body that changes or inspects process-wide state (GC settings,
// every goroutine) the other engine's run would disturb.
func eachEngineInTurn(t *testing.T, body func(t *testing.T, e *engineEnv)) {
	t.Helper()
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			body(t, newEnv(t, name))
		})
	}
}

// newEnv is a fresh database of one engine, the test's own: a copy of a
// database Open migrated once for the whole run (migratedTemplate), so that
// Open finds the schema current, as every later Open of an application's
// database does; or, in a test that called emptyDatabases, an empty one.
// A test of one engine only skips when ALK_ENGINES leaves that engine out
// (the fast SQLite-only inner loop).
func newEnv(t *testing.T, name string) *engineEnv {
	t.Helper()
	if !slices.Contains(engines, name) {
		t.Skipf("%s=%s leaves out %s", pgtest.EnginesEnv, os.Getenv(pgtest.EnginesEnv), name)
	}
	empty := wantsEmptyDatabases(t)
	switch name {
	case "pg":
		var dsn string
		var err error
		if empty || !pgServer.CopiesDatabases() {
			dsn, err = pgServer.NewDatabase(context.Background())
		} else {
			dsn, err = pgServer.NewDatabaseFrom(context.Background(), migratedTemplate.pg())
		}
		require.NoError(t, err)
		return &engineEnv{name: name, dsn: dsn}
	default:
		e := &engineEnv{name: name, dsn: filepath.Join(t.TempDir(), "alk.db")}
		if !empty {
			copySQLite(t, migratedTemplate.lite(), e.dsn)
		}
		return e
	}
}

// emptyTests are the tests (by name) that called emptyDatabases.
var emptyTests sync.Map

// emptyDatabases makes newEnv give t and its subtests empty databases, on
// which no Open has run, instead of copies of a migrated one. Every test of
// migrations or of what Open does to a database without alkstore's schema
// calls it first: TestMigrate*, tests applying schema versions with goose
// (applyVersions, the goose CLI), tests of a fresh database's first Open,
// and tests that prepare a database before its first Open.
func emptyDatabases(t *testing.T) {
	t.Helper()
	name := t.Name()
	emptyTests.Store(name, true)
	t.Cleanup(func() { emptyTests.Delete(name) }) // after its subtests, parallel ones too
}

func wantsEmptyDatabases(t *testing.T) bool {
	name := t.Name()
	for {
		if _, ok := emptyTests.Load(name); ok {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// migratedTemplate holds one database of each engine that Open migrated,
// made on first use and copied by newEnv: CREATE DATABASE ... TEMPLATE on
// PostgreSQL, a file copy on SQLite. A migrated copy costs a tenth of an
// empty database plus every migration (0.05 s against 0.14 s on PostgreSQL,
// 0.015 s against 0.05 s on SQLite, quiet; several times both under load),
// and almost every test opens its database first thing.
var migratedTemplate templates

type templates struct {
	pgOnce, liteOnce sync.Once
	pgDSN, liteDir   string // liteDir is removed by TestMain
	pgErr, liteErr   error
}

// pg returns the PostgreSQL template's DSN, migrating it on first use. No
// connection to it stays open: a copy needs it idle.
func (m *templates) pg() string {
	m.pgOnce.Do(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if m.pgDSN, m.pgErr = pgServer.NewDatabase(c); m.pgErr == nil {
			m.pgErr = openAndClose(c, m.pgDSN)
		}
	})
	if m.pgErr != nil {
		panic(fmt.Sprintf("the migrated PostgreSQL template: %v", m.pgErr))
	}
	return m.pgDSN
}

// lite returns the SQLite template's file, migrating it on first use.
func (m *templates) lite() string {
	m.liteOnce.Do(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if m.liteDir, m.liteErr = os.MkdirTemp("", "alkstore-template-"); m.liteErr == nil {
			m.liteErr = openAndClose(c, filepath.Join(m.liteDir, "alk.db"))
		}
	})
	if m.liteErr != nil {
		panic(fmt.Sprintf("the migrated SQLite template: %v", m.liteErr))
	}
	return filepath.Join(m.liteDir, "alk.db")
}

// remove removes the SQLite template's file (PostgreSQL's goes with the
// server's databases).
func (m *templates) remove() {
	if m.liteDir != "" {
		_ = os.RemoveAll(m.liteDir)
	}
}

func openAndClose(c context.Context, dsn string) error {
	s, err := store.Open(c, dsn)
	if err != nil {
		return err
	}
	return s.Close()
}

// copySQLite copies the SQLite database file src (closed: its WAL, if any
// is left, goes with it) to dst.
func copySQLite(t *testing.T, src, dst string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		from, err := os.Open(src + suffix)
		if suffix != "" && os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		to, err := os.Create(dst + suffix)
		require.NoError(t, err)
		_, err = io.Copy(to, from)
		require.NoError(t, err)
		require.NoError(t, to.Close())
		require.NoError(t, from.Close())
	}
}

// open opens a store on the env's database, closed when the test ends.
func (e *engineEnv) open(t testing.TB, opts ...store.Option) *store.Store {
	t.Helper()
	s, err := store.Open(ctx(t), e.dsn, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// pool opens an application pool on the env's Postgres database.
func (e *engineEnv) pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(ctx(t), e.dsn)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// ctx is a test context with a generous deadline, so a hang fails the test
// instead of the whole run.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func offsets(evs []store.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Offset
	}
	return out
}
