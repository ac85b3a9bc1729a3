// Package tests is alkstore's contract suite: every behaviour test body runs
// against both engines, as subtests "pg" and "lite", on real databases.
package tests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// engineEnv is one engine's fresh, empty database.
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

// newEnv is a fresh database of one engine. A test of one engine only skips
// when ALK_ENGINES leaves that engine out (the fast SQLite-only inner loop).
func newEnv(t *testing.T, name string) *engineEnv {
	t.Helper()
	if !slices.Contains(engines, name) {
		t.Skipf("%s=%s leaves out %s", pgtest.EnginesEnv, os.Getenv(pgtest.EnginesEnv), name)
	}
	switch name {
	case "pg":
		dsn, err := pgServer.NewDatabase(context.Background())
		require.NoError(t, err)
		return &engineEnv{name: name, dsn: dsn}
	default:
		return &engineEnv{name: name, dsn: filepath.Join(t.TempDir(), "alk.db")}
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
