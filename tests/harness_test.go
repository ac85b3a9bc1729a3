// Package tests is alkstore's contract suite: every behaviour test body runs
// against both engines, as subtests "pg" and "lite", on real databases.
package tests

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

var engines []string // the engines ALK_ENGINES selects; both by default

func TestMain(m *testing.M) {
	setGCPercent()
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child)) // this binary was started as a test's child process
	}
	if child := os.Getenv(serverChildEnv); child != "" {
		os.Exit(serverChild(child)) // a harness test's child: a run holding a server
	}
	var err error
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	flag.Parse() // for setParallel and willRun; m.Run does not parse again
	setParallel()
	if slices.Contains(engines, "pg") { // ALK_ENGINES=lite needs no PostgreSQL
		if err := clusters.start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	prebuild()
	code := m.Run()
	clusters.stop()
	removeSkewedLite()
	liteTemplate.remove()
	waitBuilds()
	os.Exit(code)
}

// testGOGC is the GC percent of this package's processes (the run and
// its children) unless GOGC sets one. The race detector's runs allocate
// much: at Go's 100 the GC took 6% of the run's samples (perf), and
// with 200 a subset of the heaviest tests (payloads at the limit, the plan
// test, cut writes, concurrent increments) took 58-66 CPU-seconds against
// 66-71, the run's peak RSS 1.5 GB before. Tests that change the GC
// percent restore it.
const testGOGC = 200

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(testGOGC)
	}
}

// prebuild starts, in the background beside the tests before them, the
// builds the selected tests will wait for.
func prebuild() {
	var after []<-chan struct{}
	if slices.ContainsFunc(cliTests, willRun) {
		startCLIBuild()
		after = append(after, cliBuild.done)
	}
	if willRun("TestExamplesRunTwiceSideBySide") {
		startExamplesBuild(after...)
	}
}

// engineEnv is one engine's fresh database of the test's own: a copy of a
// migrated one, or empty (emptyDatabases).
type engineEnv struct {
	name string // "pg" or "lite"
	dsn  string
	pg   *cluster // the server of dsn on PostgreSQL (the test's alone while it runs); nil on SQLite
	t    *testing.T
	// plan is the session explainPG runs the test's plan checks on
	// (planConn), on database planDSN; nil until the first.
	plan    *pgx.Conn
	planDSN string
	// execDBs are execSQL's pools (execDB), by test and database.
	execMu  sync.Mutex
	execDBs map[execKey]*sql.DB
}

// eachEngine runs body once per engine ALK_ENGINES selects (both by
// default), each on its own fresh database, and makes the test parallel
// (parallelTest): it runs beside the other tests that call eachEngine. The
// engines' runs are parallel subtests too: they share nothing, and pg's
// half mostly waits on the server while lite's computes. They start when
// the test function returns, so code after eachEngine must not read what
// the bodies wrote (put it in t.Cleanup, or use eachEngineInTurn).
// GOTESTFLAGS=-parallel=1 runs every test body one at a time.
func eachEngine(t *testing.T, body func(t *testing.T, e *engineEnv)) {
	t.Helper()
	parallelTest(t)
	if top, _, sub := strings.Cut(t.Name(), "/"); sub {
		if _, parallelTop := parallelNames.Load(top); parallelTop {
			t.Fatalf("eachEngine in subtest %s of a parallel test: use eachEngineEachForm", t.Name())
		}
	}
	eachEngineAlone(t, body)
}

// eachEngineEachForm is eachEngine for a test of several forms (keep or
// not, in a Tx or not): each engine's run of each form is a parallel
// subtest of the test itself (TestX/pg/<form>, one t.Run named
// "pg/<form>"), on a fresh database of its own, queued once for a
// -parallel slot beside the engine halves of every other test. Forms as
// the test's subtests, each calling eachEngine, waited twice in the queue
// (Go's testing queues a test's parallel subtests behind every test already
// waiting, and a serial subtest whose halves were parallel takes a slot
// back after them): in make test (session 49) the four tests built so
// waited 14-94 s a form for that slot, and their later forms ran alone on
// idle cores for the run's last 12 s; as parallel subtests of parallel
// halves, they still came last, a 25 s tail. Forms one after the other
// inside each engine's half (sessions 50-57) queued once, but made the
// run's longest bodies: three forms of the hung-handler test 47 s on
// SQLite, the group crash test's two 27 s on each engine, which started
// 170 s into a 197 s run and were its last 15 s alone (session 58).
func eachEngineEachForm(t *testing.T, forms []string, body func(t *testing.T, e *engineEnv, form int)) {
	t.Helper()
	parallelTest(t)
	for _, name := range engines {
		for i, form := range forms {
			t.Run(name+"/"+form, func(t *testing.T) {
				t.Parallel()
				labelled(t, func() { body(t, newEnv(t, name), i) })
			})
		}
	}
}

// eachEngineAlone is eachEngine for a test that must run alone, with no
// other test beside it (its two engines still run side by side): one that
// sets process-wide hooks on names other tests use too
// (wake.SetGateWindow), or whose check is a latency or a rate other tests'
// load would stretch.
func eachEngineAlone(t *testing.T, body func(t *testing.T, e *engineEnv)) {
	t.Helper()
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			labelled(t, func() { body(t, newEnv(t, name)) })
		})
	}
}

// eachEngineInTurn is eachEngine with the engines run one after the other
// and the test alone, for a body that changes or inspects process-wide
// state (GC settings, every goroutine, allocations) the other engine's run
// or another test would disturb.
func eachEngineInTurn(t *testing.T, body func(t *testing.T, e *engineEnv)) {
	t.Helper()
	requireSerial(t, "eachEngineInTurn")
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			labelled(t, func() { body(t, newEnv(t, name)) })
		})
	}
}

// labelled runs f with the profiler label test=t.Name(), which the
// goroutines f starts inherit: go tool pprof -tags splits a -cpuprofile of
// the run by test half (beside serverCPUEnv's log of the server's share).
func labelled(t *testing.T, f func()) {
	pprof.Do(context.Background(), pprof.Labels("test", t.Name()), func(context.Context) { f() })
}

// requireSerial fails t unless nothing runs beside it: neither t nor any
// test it is a subtest of is parallel. t.Setenv, which may not run beside
// other tests, is what tells (it panics in a parallel test or a subtest of
// one); it sets a variable only this check reads, and keeps t from calling
// t.Parallel after.
func requireSerial(t *testing.T, what string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s in a parallel test, or a subtest of one (parallelTest, eachEngine): other tests run beside it (%v)", what, r)
		}
	}()
	t.Setenv("ALK_TEST_SERIAL", t.Name())
}

// parallelTests are the tests parallelTest marked; parallelNames the same
// by name (eachEngine looks a subtest's top-level test up by name).
var parallelTests, parallelNames sync.Map // *testing.T, string → true

// parallelTest marks a top-level test parallel. Go runs parallel tests
// after every serial one has ended, at most -parallel test bodies at once
// (setParallel), so a serial test still runs alone. eachEngine calls it; a
// test of one engine, or one that calls eachEngine in its subtests, calls
// it first thing when it works only on its own databases, stores and
// processes (each PostgreSQL test on a server of its own while it runs:
// clusters). Tests that change or read what the whole process shares stay
// serial: environment variables, GC settings, goroutine counts,
// allocations, signals, the wake package's test hooks (keyed by topics
// other tests use too), latencies; they use eachEngineAlone or
// eachEngineInTurn, or do not call parallelTest. A subtest is left as it
// is: its siblings run in the order written.
func parallelTest(t *testing.T) {
	if strings.Contains(t.Name(), "/") {
		return
	}
	if _, marked := parallelTests.LoadOrStore(t, true); !marked { // eachEngine may be called twice
		t.Parallel()
		name := t.Name()
		parallelNames.Store(name, true)
		t.Cleanup(func() { parallelTests.Delete(t); parallelNames.Delete(name) })
	}
}

// testParallel is -parallel unless the command line sets it. Go's default,
// GOMAXPROCS (2 on the 2-core machines this suite runs on), is the two
// engine halves one test already runs: with tests one after another the
// suite kept 1.07 of 2 cores busy (stop 43), most of a test's time being
// waits (leases, timers, subprocesses, the server). At 6 it still did, on
// a quiet machine: the package's run took about 200 CPU-seconds in 197 s
// (session 58; the tests and their servers, about one core of two), its
// parallel phase held by bodies that wait (leases lapsing, hard-stop
// waits, killed children): 54 engine halves of 5 s or more made 570 of
// its 855 body-seconds. At 8, ./tests alone took 190 s at load 7-9
// against 261-271 s at 6 (load 6-13); 8 is also maxClusters, so every
// PostgreSQL body still has a server of its own at once.
const testParallel = 8

func setParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
}

// parallel is -parallel: at most that many test bodies run at once.
func parallel() int {
	n, _ := strconv.Atoi(flag.Lookup("test.parallel").Value.String())
	return max(n, 1)
}

// newEnv is a fresh database of one engine, the test's own: a copy of a
// database Open migrated once for the whole run (migrated templates), so
// that Open finds the schema current, as every later Open of an
// application's database does; or, in a test that called emptyDatabases,
// an empty one. A test of one engine only skips when ALK_ENGINES leaves
// that engine out (the fast SQLite-only inner loop).
func newEnv(t *testing.T, name string) *engineEnv {
	t.Helper()
	if !slices.Contains(engines, name) {
		t.Skipf("%s=%s leaves out %s", pgtest.EnginesEnv, os.Getenv(pgtest.EnginesEnv), name)
	}
	empty := wantsEmptyDatabases(t)
	switch name {
	case "pg":
		c := clusters.lease(t)
		var dsn string
		var err error
		if empty || !c.CopiesDatabases() {
			dsn, err = c.NewDatabase(context.Background())
		} else {
			dsn, err = c.NewDatabaseFrom(context.Background(), c.migrated())
		}
		require.NoError(t, err)
		return &engineEnv{name: name, dsn: dsn, pg: c, t: t}
	default:
		e := &engineEnv{name: name, dsn: filepath.Join(t.TempDir(), "alk.db"), t: t}
		if !empty {
			copySQLite(t, liteTemplate.file(), e.dsn)
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

// clusters are the run's PostgreSQL servers. A test's pg half has a server
// to itself while it runs, as when tests ran one after another: the settled
// stream horizon is cluster-wide (a transaction open in one database holds
// back reads in every other), and so are roles, connections and the
// server's statistics. Parallel tests' pg halves therefore run on
// throwaway clusters started as they are needed, one for each test body
// that may run at once (-parallel, at most maxClusters): with fewer, pg
// halves held most of the run's slots waiting for a server while SQLite
// halves waited for a slot (stop 44, three clusters for six slots). Each
// has its own max_connections (300), which one test at a time never nears.
// On an ALK_PG_DSN server, the only one, pg halves take turns. A subtest
// of a test that holds a server must not call t.Parallel (pool.wait). A
// lease ends with a check that the test left no session on its databases
// (cluster.leftovers).
var clusters pool

const maxClusters = 8

// cluster is one server and its databases made once for many tests.
type cluster struct {
	*pgtest.Server
	template struct { // the migrated database newEnv copies
		once sync.Once
		dsn  string
		err  error
	}
	skewed struct { // the plan tests' skewed queue (skewed_test.go)
		once sync.Once
		dsn  string // no connection to it stays open
		ok   bool
	}
	checker *pgx.Conn // leftovers' connection (to the maintenance database), used by one release at a time
	// sessionsBefore and sessionsOpened are the lease's session counts for
	// serverCPUEnv's log, set by the test holding the server.
	sessionsBefore, sessionsOpened int64
}

type pool struct {
	mu       sync.Mutex
	freed    *sync.Cond
	all      []*cluster
	free     []*cluster
	max      int               // clusters the run may start
	slots    int               // tests that may run at once: -parallel
	starting int               // clusters being started
	waiting  int               // tests waiting for a server
	leases   map[string]*lease // by test name
}

type lease struct {
	c *cluster
	t *testing.T
}

// start starts the first server (it serves the serial tests) or connects
// to ALK_PG_DSN's.
func (p *pool) start() error {
	p.freed = sync.NewCond(&p.mu)
	p.leases = map[string]*lease{}
	p.slots = parallel()
	p.max = min(p.slots, maxClusters)
	if os.Getenv("ALK_PG_DSN") != "" {
		p.max = 1
	}
	srv, err := pgtest.StartForTests()
	if err != nil {
		return err
	}
	c := &cluster{Server: srv}
	p.all, p.free = []*cluster{c}, []*cluster{c}
	return nil
}

// lease gives t a server until t ends: the one t's parent test holds, if
// any (a pg half's subtests use its server), else a free one, a new one
// while fewer than max run, or the next one freed. Another run of the same
// test (go test -count) waits for this one's server to be freed, so that a
// subtest's parent is found by name.
func (p *pool) lease(t *testing.T) *cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if l := p.leases[t.Name()]; l != nil {
			if l.t == t {
				return l.c
			}
			p.wait(t)
			continue
		}
		for name := t.Name(); strings.Contains(name, "/"); {
			name = name[:strings.LastIndexByte(name, '/')]
			if l := p.leases[name]; l != nil {
				return l.c
			}
		}
		if n := len(p.free); n > 0 {
			c := p.free[n-1]
			p.free = p.free[:n-1]
			p.leases[t.Name()] = &lease{c: c, t: t}
			name := t.Name()
			logServerCPU(t, name, c)                    // its cleanup runs after release's
			t.Cleanup(func() { p.release(t, name, c) }) // after the stores' Close, registered later
			return c
		}
		if len(p.all)+p.starting < p.max {
			p.starting++
			p.mu.Unlock()
			srv, err := pgtest.StartForTests()
			p.mu.Lock()
			p.starting--
			if err != nil {
				p.freed.Broadcast()
				t.Fatalf("another PostgreSQL server for parallel tests: %v", err)
			}
			c := &cluster{Server: srv}
			p.all = append(p.all, c)
			p.free = append(p.free, c)
			continue
		}
		p.wait(t)
	}
}

// serverCPUEnv names a file each test's lease of a throwaway PostgreSQL
// server appends a line to when it ends: the test's name, a tab, the
// CPU-seconds the server spent while the test held it (its backends', and
// its databases' creation and drop), a tab, and the sessions the test
// opened on its databases (pg_stat_database.sessions, read before the
// drop). With the test binary's profile labelled by test half
// (eachEngineAlone, eachEngineInTurn: go test -cpuprofile, then go tool
// pprof -tags), it tells where a run's CPU-seconds go; children the tests
// start are in neither.
const serverCPUEnv = "ALK_TEST_PGCPU"

func logServerCPU(t *testing.T, name string, c *cluster) {
	file := os.Getenv(serverCPUEnv)
	if file == "" || c.Pid() == 0 {
		return
	}
	before := pgtest.ClusterCPU(c.Pid())
	c.sessionsBefore = c.sessionCount()
	t.Cleanup(func() {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Errorf("%s: %v", serverCPUEnv, err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s\t%.2f\t%d\n", name, (pgtest.ClusterCPU(c.Pid()) - before).Seconds(), c.sessionsOpened)
	})
}

// sessionCount is how many sessions were ever opened on this process's
// databases on the server that still exist (-1 if it cannot tell): for
// serverCPUEnv's log, which takes the count at a lease's start from the
// one before its databases' drop. Backends count their session when they
// end (PostgreSQL 14 and later), and every session of a test has ended
// by then (leftovers).
func (c *cluster) sessionCount() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.sessions(ctx); err != nil { // connects c.checker
		return -1
	}
	var n int64
	ours := fmt.Sprintf(`alk\_test\_%d\_%%`, os.Getpid())
	if err := c.checker.QueryRow(ctx, `SELECT coalesce(sum(sessions), 0)::int8 FROM pg_stat_database WHERE datname LIKE $1`,
		pgx.QueryExecModeSimpleProtocol, ours).Scan(&n); err != nil {
		return -1
	}
	return n
}

// wait waits, p.mu held, for a server to be freed, unless the wait could
// hang the run. Every test that runs holds one of the run's -parallel
// slots, and so does one that waits here, but a test that is done with
// its body and waits for its parallel subtests gives its slot back (Go's
// testing) while it keeps its server. More tests holding a server or
// waiting for one than slots means such a test; once tests waiting here
// take every slot, its subtests never run and it never frees its server
// (-parallel=1: at the first wait). So that fails the waiting test at
// once, naming the rule the holder broke.
func (p *pool) wait(t *testing.T) {
	if n := len(p.leases) + p.starting + p.waiting + 1; n > p.slots {
		held := slices.Sorted(maps.Keys(p.leases))
		t.Fatalf("%s would wait for a PostgreSQL server that a test keeps while it waits for parallel subtests "+
			"(%d tests hold a server or wait for one, more than -parallel=%d), which can hang the run: "+
			"a subtest of a test that holds a server (a pg half, or any test that called newEnv for pg) "+
			"must not call t.Parallel. Servers are held by %s", t.Name(), n, p.slots, strings.Join(held, ", "))
	}
	p.waiting++
	p.freed.Wait()
	p.waiting--
}

// release gives c back when the test called name ends, unless the test
// left something running on it (leftovers), which fails the test and
// retires the server: the next test on it would inherit it.
func (p *pool) release(t *testing.T, name string, c *cluster) {
	left := c.leftovers()
	if left != nil {
		t.Errorf("%s left on its PostgreSQL server what the next test there would inherit "+
			"(a store, pool or connection not closed, a prepared transaction not finished): %v", name, left)
	}
	retire := left != nil && c.Dir() != "" // a throwaway cluster: another starts if needed
	if os.Getenv(serverCPUEnv) != "" {
		c.sessionsOpened = c.sessionCount() - c.sessionsBefore
	}
	if left == nil && c.Dir() != "" {
		// The test's databases go (the migrated and the skewed templates
		// stay): a throwaway cluster lives in memory (pgtest's
		// clusterBase), where a run's 450 databases would hold 3 GB.
		if err := c.DropDatabasesBut(context.Background(), c.template.dsn, c.skewed.dsn); err != nil {
			t.Errorf("dropping the databases of %s: %v", name, err)
		}
	}
	p.mu.Lock()
	delete(p.leases, name)
	if retire {
		p.all = slices.DeleteFunc(p.all, func(x *cluster) bool { return x == c })
	} else {
		p.free = append(p.free, c)
	}
	p.freed.Broadcast()
	p.mu.Unlock()
	if retire {
		c.stop()
	}
}

// leftovers returns an error naming the sessions connected to this run's
// databases on the server and the prepared transactions in them, or nil.
// A session that a test closed may still be ending (its backend exits
// after the client hung up), so it waits for them to end, 5 s at most.
// One query when there are none, the usual case.
func (c *cluster) leftovers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left, err := c.sessions(ctx)
		if err != nil {
			return fmt.Errorf("checking for them: %w", err)
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(strings.Join(left, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sessions lists the sessions and prepared transactions on this process's
// databases. Its connection stays open from one release to the next: a
// connection a release cost twice the query (160 ms against 75 ms, load 11
// on 2 cores); median check 133 ms then, 48 ms so. It connects again when
// a test ended it.
func (c *cluster) sessions(ctx context.Context) ([]string, error) {
	ours := fmt.Sprintf(`alk\_test\_%d\_%%`, os.Getpid()) // pgtest's names for this process's databases
	for try := 0; ; try++ {
		if c.checker == nil {
			cfg, err := pgx.ParseConfig(c.AdminDSN())
			if err != nil {
				return nil, err
			}
			cfg.RuntimeParams["application_name"] = "alkstore tests: lease check"
			if c.checker, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				return nil, err
			}
		}
		rows, _ := c.checker.Query(ctx, `
			SELECT format('session %s in %s (%s, application_name %L): %s', pid, datname, state, application_name, left(query, 200))
			FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND datname LIKE $1 AND application_name NOT LIKE 'citus%'
			UNION ALL
			SELECT format('prepared transaction %L in %s', gid, database) FROM pg_prepared_xacts WHERE database LIKE $1`,
			pgx.QueryExecModeSimpleProtocol, ours)
		left, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil || try > 0 {
			return left, err
		}
		c.checker.Close(ctx)
		c.checker = nil
	}
}

// stop closes the lease check's connection and stops the server.
func (c *cluster) stop() {
	if c.checker != nil {
		c.checker.Close(context.Background())
		c.checker = nil
	}
	c.Stop()
}

// stop stops every server the run started.
func (p *pool) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.all {
		c.stop()
	}
}

// migrated returns the DSN of the server's migrated database, migrating it
// on first use. No connection to it stays open: a copy needs it idle. A
// migrated copy costs a tenth of an empty database plus every migration
// (0.05 s against 0.14 s, quiet; several times both under load), and
// almost every test opens its database first thing.
func (c *cluster) migrated() string {
	c.template.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if c.template.dsn, c.template.err = c.NewDatabase(ctx); c.template.err == nil {
			c.template.err = openAndClose(ctx, c.template.dsn)
		}
	})
	if c.template.err != nil {
		panic(fmt.Sprintf("the migrated PostgreSQL template: %v", c.template.err))
	}
	return c.template.dsn
}

// liteTemplate is the migrated SQLite database newEnv copies (a file copy:
// 0.015 s against 0.05 s for an empty database and every migration).
var liteTemplate liteMigrated

type liteMigrated struct {
	once sync.Once
	dir  string // removed by TestMain
	err  error
}

// file returns the SQLite template's file, migrating it on first use.
func (m *liteMigrated) file() string {
	m.once.Do(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if m.dir, m.err = pgtest.TempDir("alkstore-template-"); m.err == nil { // swept if the run ends abnormally
			m.err = openAndClose(c, filepath.Join(m.dir, "alk.db"))
		}
	})
	if m.err != nil {
		panic(fmt.Sprintf("the migrated SQLite template: %v", m.err))
	}
	return filepath.Join(m.dir, "alk.db")
}

// remove removes the SQLite template's file (PostgreSQL's goes with the
// server's databases).
func (m *liteMigrated) remove() {
	if m.dir != "" {
		pgtest.RemoveTempDir(m.dir)
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

// heavyCtx is ctx for a test that waits for nothing but its own bounded
// work, and much of it (thousands of calls, or hundreds of MiB copied under
// -race): its deadline only catches a hang. Two such tests took 46-80 s of
// ctx's two minutes at load 13-20, and ran out of them in make test at load
// 20-34, having hung nowhere.
func heavyCtx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
