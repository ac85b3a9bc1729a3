// Command bench measures alkstore against its ceiling: the same work done
// with raw SQL on the same database in the same run. Each figure is printed
// beside its ceiling as a ratio.
//
//	make bench            # both engines; PostgreSQL from ALK_PG_DSN or a throwaway cluster
//	go run ./bench -d 3s  # longer runs
//	go run ./bench -only scheduling
//	go run ./bench -only groups  # consumer groups: 1, 2, 4 members at 1 ms of work per event
//	go run ./bench -only scale   # costs beside 1e5..1e7 unrelated rows (opt-in; see scale.go)
//	go run ./bench -only retention  # partition drop vs row deletes, 10^6 events; only when asked
//	go run ./bench -only citus      # through a Citus coordinator vs a plain server (../shared/citus; only when asked)
//	go run ./bench -only queues -list  # figure names; -figure NAME -json measures one (make bench-compare)
//
// The raw-SQL ceilings live here, not in queries/: they are the yardstick,
// not statements the library runs.
package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

var (
	dur     = flag.Duration("d", 2*time.Second, "duration of each throughput measurement")
	replayN = flag.Int("replay", 50000, "events to replay in the read measurement")
	burnN   = flag.Int("jobs", 100000, "jobs in the burn-down measurement")
	workers = flag.Int("workers", 100, "Work concurrency in the burn-down")
	peers   = flag.Bool("peers", true, "also run the peers (bench/peers): River on the same PostgreSQL, River's SQLite driver and goqite on SQLite")
	idleFor = flag.Duration("idle", 10*time.Second, "how long to measure the idle cost")
	only    = flag.String("only", "", "run these sections (comma-separated): streams, queues, receivers, compaction, scheduling, groups; "+
		"or scale, retention, console and citus, which only run when named")
)

// section reports whether the named section runs: every default section
// when -only is empty.
func section(name string) bool { return *only == "" || named(name) }

// named reports whether -only names the section. Opt-in sections (scale),
// too slow for the default run, check this instead of section.
func named(name string) bool { return slices.Contains(strings.Split(*only, ","), name) }

// results keeps figures the peer comparison reuses.
var results = map[string]float64{}

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()

	srv, err := pgtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	if *serverPid == 0 {
		*serverPid = srv.Pid()
	}
	pgDSN, err := srv.NewDatabase(ctx)
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "alkstore-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The opt-in sections print tables of their own, not figures, and load
	// their data whatever the figure: under -list they name nothing and run
	// nothing (bench/compare runs them whole).
	if named("retention") && !*listFigs { // PostgreSQL only (SQLite has no partitions); never part of a full run
		benchRetention(ctx, func() string { return must(srv.NewDatabase(ctx)) })
		if *only == "retention" {
			return
		}
	}
	if named("console") && !*listFigs { // PostgreSQL only, loads 10^6 jobs; never part of a full run
		benchConsole(ctx, must(srv.NewDatabase(ctx)))
		if *only == "console" {
			return
		}
	}
	if named("citus") && !*listFigs { // a Citus cluster beside the plain server; never part of a full run
		benchCitus(ctx, func() string { return must(srv.NewDatabase(ctx)) })
		if *only == "citus" {
			return
		}
	}
	if !*listFigs && !*jsonOut {
		fmt.Printf("%-8s %-44s %14s %14s %7s\n", "engine", "measurement", "alkstore", "raw SQL", "ratio")
	}
	litePath := filepath.Join(dir, "bench.db")
	for _, e := range []struct {
		name  string
		open  func() (*store.Store, raw)
		again func(...store.Option) *store.Store // a second store on the same database
		scale func() scaleTarget                 // a store on a database of its own, for the scale section
	}{
		{"pg", func() (*store.Store, raw) { return openPG(ctx, pgDSN) },
			func(o ...store.Option) *store.Store { return must(store.Open(ctx, pgDSN, o...)) },
			func() scaleTarget { return pgScaleTarget(ctx, must(srv.NewDatabase(ctx))) }},
		{"lite", func() (*store.Store, raw) { return openLite(ctx, litePath) },
			func(o ...store.Option) *store.Store { return must(store.Open(ctx, litePath, o...)) },
			func() scaleTarget { return liteScaleTarget(ctx, scalePath(dir)) }},
	} {
		if !wantEngine(e.name) {
			continue
		}
		s, r := e.open()
		if section("streams") {
			benchStreams(ctx, e.name, s, r)
		}
		if section("queues") {
			benchQueues(ctx, e.name, s, r)
			benchHeaders(ctx, e.name, s, e.again)
		}
		if section("receivers") {
			benchReceivers(ctx, e.name, s, e.again, r)
		}
		if section("compaction") {
			benchCompaction(ctx, e.name, s)
		}
		if section("scheduling") {
			benchScheduling(ctx, e.name, s, e.again, r)
		}
		if section("groups") {
			benchGroups(ctx, e.name, s, e.again)
		}
		s.Close()
		r.close()
		if named("scale") && !*listFigs && slices.Contains(strings.Split(*scaleOn, ","), e.name) {
			t := e.scale()
			benchScale(ctx, t)
			t.s.Close()
		}
	}
	if *peers && section("queues") && *figure == "" && !*listFigs && !*jsonOut {
		peersDSN, err := srv.NewDatabase(ctx)
		if err != nil {
			log.Fatal(err)
		}
		benchPeers(ctx, peersDSN, filepath.Join(dir, "peers"))
	}
}

// rawEvent is what a raw-SQL reader collects: the same row, no library.
type rawEvent struct {
	id      int64
	stream  string
	key     *string
	payload []byte
	created time.Time
}

func lastOf(page []rawEvent) int64 {
	if len(page) == 0 {
		return 0
	}
	return page[len(page)-1].id
}

// raw is the ceiling: the same row shape written and read with plain SQL.
type raw interface {
	insert(ctx context.Context, payload []byte) error
	// readPage reads up to limit events after the id after into page's
	// array. The 8 → 1 ceiling's reader reuses one from read to read, as
	// the subscriber hands its events on one by one from a pooled scratch
	// page: a slice of capacity limit made for each of its short pages was
	// 47 KB of garbage an event (the library's subscriber 1.7 KB), and with
	// it the ceiling lost to what it bounds (1.14 in a full run).
	readPage(ctx context.Context, after int64, limit int, page []rawEvent) ([]rawEvent, error)
	// eventHead is the newest raw event's id, 0 when there is none.
	eventHead(ctx context.Context) (int64, error)
	insertJob(ctx context.Context, payload []byte) error
	insertJobs(ctx context.Context, payloads [][]byte) error
	// takeJobs removes up to n jobs in one statement: claim and ack fused,
	// the least work any queue can do per job.
	takeJobs(ctx context.Context, n int) (int, error)
	// claimSettle claims up to n jobs with one UPDATE ... RETURNING (state,
	// attempt, claim token and expiry, as a fenced claim stamps them), then
	// settles them with one DELETE fenced by the token: the least work a
	// queue that runs handlers between claim and ack can do.
	claimSettle(ctx context.Context, n int, token int64) (int, error)
	// clearSettled removes what the jobs takeJobs deleted left in raw_jobs's
	// indexes (PostgreSQL: VACUUM; SQLite deletes its index entries with
	// the row), so that claimSettle starts, as the library's burn-down
	// does, on an index without a head of settled entries to step over.
	clearSettled(ctx context.Context) error
	// holdVacuum vacuums each table and keeps autovacuum off it until the
	// returned release runs (PostgreSQL; SQLite: nothing to do). A
	// burn-down's claims walk the index entries of the jobs settled
	// before them until a vacuum frees their pages, so a run's rate
	// depended on whether autovacuum's minute fell inside it (issue 18):
	// held, the library's run and its ceilings each start vacuumed and
	// keep their walk to the end.
	holdVacuum(ctx context.Context, tables ...string) (release func(context.Context) error, err error)
	// orderWithJob inserts a bench_orders row and a job in one transaction.
	orderWithJob(ctx context.Context, id int64, payload []byte) error
	// createSchedules creates n schedule rows due at first; fireDue fires
	// each one due at now: an advance to now+1h and an enqueue, atomically.
	createSchedules(ctx context.Context, n int, payload []byte, first time.Time) error
	fireDue(ctx context.Context, now time.Time) (int, error)
	close()
}

func benchStreams(ctx context.Context, engine string, s *store.Store, r raw) {
	payload := make([]byte, 128)
	st := s.Stream("bench")
	for _, workers := range []int{1, 8} {
		what := fmt.Sprintf("publish, %d publisher(s) (events/s)", workers)
		if !want(engine, what) {
			continue
		}
		publish := func() error { _, err := st.Publish(ctx, payload); return err }
		insert := func() error { return r.insert(ctx, payload) }
		lib, ceil := pair(workers, publish, insert)
		row(engine, what, lib, ceil)
		if *cpuPerJob { // three more runs of each, alternating, metered
			for range 3 {
				for _, side := range []struct {
					what    string
					op      func() error
					profile bool
				}{{fmt.Sprintf("publish ×%d", workers), publish, true}, {fmt.Sprintf("raw insert ×%d", workers), insert, false}} {
					m := startCPU(side.what, side.profile).withProbe(probeOf(r))
					n := onceN(workers, side.op)
					m.stop(engine, int(n))
				}
			}
		}
	}

	// Replay: fill a fresh stream, then read it back in pages of 1000.
	const replayWhat = "replay read, pages of 1000 (events/s)"
	if !want(engine, replayWhat) {
		return
	}
	replay := s.Stream("replay")
	msgs := make([]store.Message, 1000)
	for i := range msgs {
		msgs[i].Payload = payload
	}
	for i := 0; i < *replayN; i += len(msgs) {
		must(replay.PublishMany(ctx, msgs))
		for range msgs {
			must0(r.insert(ctx, payload))
		}
	}
	// Each side replays the whole stream; a replay lasts tens of
	// milliseconds, so the two sides alternate five times (drift on a shared
	// machine falls on both) and each keeps its best.
	libReplay := func() (float64, int) {
		start, n, last := time.Now(), 0, int64(0)
		for {
			evs, err := replay.ReadSince(ctx, last, 1000)
			must0(err)
			if len(evs) == 0 {
				break
			}
			n += len(evs)
			last = evs[len(evs)-1].Offset
		}
		return float64(n) / time.Since(start).Seconds(), n
	}
	rawReplay := func() (float64, int) {
		start, n, last := time.Now(), 0, int64(0)
		for {
			// a page of its own each read, as ReadEvents returns one
			page, err := r.readPage(ctx, last, 1000, make([]rawEvent, 0, 1000))
			must0(err)
			if len(page) == 0 {
				break
			}
			n, last = n+len(page), lastOf(page)
		}
		return float64(n) / time.Since(start).Seconds(), n
	}
	// -cpu: CPU an event of both sides' reads (client, and the server's),
	// from a pass of each before the timed ones.
	if *cpuPerJob {
		m := startCPU("replay read", false)
		_, n := libReplay()
		m.stop(engine, n)
		m = startCPU("raw replay read", false)
		_, n = rawReplay()
		m.stop(engine, n)
	}
	var lib, ceil float64
	for range 5 {
		a, _ := libReplay()
		b, _ := rawReplay()
		lib, ceil = max(lib, a), max(ceil, b)
	}
	row(engine, replayWhat, lib, ceil)
}

// pair measures a figure and its ceiling alternately (A B A B A B), so
// drift on a shared machine falls on both sides, and returns the best of
// each.
func pair(workers int, lib, ceil func() error) (float64, float64) {
	var a, b float64
	for range 3 {
		a = max(a, once(workers, lib))
		b = max(b, once(workers, ceil))
	}
	return a, b
}

// rate runs op from workers goroutines for the measurement duration, twice,
// and returns the better operations per second.
func rate(workers int, op func() error) float64 {
	return max(once(workers, op), once(workers, op))
}

// once runs op from workers goroutines for the measurement duration and
// returns operations per second.
func once(workers int, op func() error) float64 {
	start := time.Now()
	n := onceN(workers, op)
	return float64(n) / time.Since(start).Seconds()
}

// onceN runs op from workers goroutines for the measurement duration and
// returns how many ran.
func onceN(workers int, op func() error) int64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(*dur)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				must0(op())
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load()
}

func best(measure func() float64) float64 { return max(measure(), measure()) }

func row(engine, what string, lib, ceil float64) {
	results[engine+" "+what] = lib
	f := fig{Engine: engine, Figure: what, Value: lib, Unit: unit(what)}
	if ceil != 0 {
		f.Ceiling, f.Beside = ceil, "raw SQL"
	}
	if emit(f) {
		return
	}
	if ceil == 0 { // no raw SQL counterpart
		fmt.Printf("%-8s %-44s %14.0f %14s %7s\n", engine, what, lib, "-", "-")
	} else {
		fmt.Printf("%-8s %-44s %14.0f %14.0f %7.2f\n", engine, what, lib, ceil, lib/ceil)
	}
}

func must[T any](v T, err error) T {
	must0(err)
	return v
}

func must0(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// --- PostgreSQL ---

type pgRaw struct{ pool *pgxpool.Pool }

// probeOf is r's serverProbe, nil on SQLite.
func probeOf(r raw) serverProbe {
	if pr, ok := r.(pgRaw); ok {
		return pr
	}
	return nil
}

func (r pgRaw) counts() (wal, xid int64) {
	must0(r.pool.QueryRow(context.Background(), `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&wal, &xid))
	return wal, xid
}

// sampleWaits samples the database's other client backends every
// -waits-every (20 ms) until stop, which returns the average number in a statement, by what
// they were doing: "CPU" (no wait event: running, or waiting for a core)
// or the wait event's type and name.
func (r pgRaw) sampleWaits() func() map[string]float64 {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan map[string]float64)
	go func() {
		sum, n := map[string]float64{}, 0
		t := time.NewTicker(*waitsEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				for k := range sum {
					sum[k] /= float64(max(n, 1))
				}
				done <- sum
				return
			case <-t.C:
			}
			rows, err := r.pool.Query(ctx, `SELECT COALESCE(wait_event_type || ':' || wait_event, 'CPU'), count(*)::float8
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
				  AND backend_type = 'client backend' AND state = 'active' GROUP BY 1`)
			if err != nil {
				continue // ctx ended
			}
			for rows.Next() {
				var k string
				var c float64
				if rows.Scan(&k, &c) == nil {
					sum[k] += c
				}
			}
			rows.Close()
			n++
		}
	}()
	return func() map[string]float64 {
		cancel()
		return <-done
	}
}

func openPG(ctx context.Context, dsn string) (*store.Store, raw) {
	s := must(store.Open(ctx, dsn, store.WithMaxConns(16)))
	cfg := must(pgxpool.ParseConfig(dsn))
	cfg.MaxConns = 16
	pool := must(pgxpool.NewWithConfig(ctx, cfg))
	// The ceilings' indexes end with the id, so, like the library's job
	// indexes since schema 00034, they skip deduplication: a page never
	// holds equal keys, and searching it for them is work the least SQL
	// would not do.
	_, err := pool.Exec(ctx, `CREATE TABLE raw_events (id bigserial PRIMARY KEY, stream text NOT NULL, key text,
		payload bytea, created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX ON raw_events (stream, id) WITH (deduplicate_items = off);
		CREATE TABLE raw_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL, payload bytea,
		priority integer NOT NULL DEFAULT 0, state text NOT NULL DEFAULT 'pending', attempts integer NOT NULL DEFAULT 0,
		max_attempts integer NOT NULL DEFAULT 25, created_at timestamptz NOT NULL DEFAULT now(),
		run_at timestamptz NOT NULL DEFAULT now(), claim_token bigint, claim_expires_at timestamptz);
		CREATE INDEX ON raw_jobs (queue, priority DESC, run_at, id) WITH (deduplicate_items = off) WHERE state = 'pending'`)
	must0(err)
	return s, pgRaw{pool}
}

func (r pgRaw) insert(ctx context.Context, payload []byte) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO raw_events (stream, key, payload) VALUES ($1, $2, $3)`, "bench", nil, payload)
	return err
}

func (r pgRaw) readPage(ctx context.Context, after int64, limit int, page []rawEvent) ([]rawEvent, error) {
	page = page[:0]
	rows, err := r.pool.Query(ctx, `SELECT id, key, payload, created_at FROM raw_events
		WHERE stream = $1 AND id > $2 ORDER BY id LIMIT $3`, "bench", after, limit)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		ev := rawEvent{stream: "bench"}
		if err := rows.Scan(&ev.id, &ev.key, &ev.payload, &ev.created); err != nil {
			return page, err
		}
		page = append(page, ev)
	}
	return page, rows.Err()
}

func (r pgRaw) eventHead(ctx context.Context) (int64, error) {
	var id int64
	err := r.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM raw_events`).Scan(&id)
	return id, err
}

func (r pgRaw) insertJob(ctx context.Context, payload []byte) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO raw_jobs (queue, payload) VALUES ($1, $2)`, "bench", payload)
	return err
}

func (r pgRaw) insertJobs(ctx context.Context, payloads [][]byte) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO raw_jobs (queue, payload) SELECT 'bench', unnest($1::bytea[])`, payloads)
	return err
}

func (r pgRaw) takeJobs(ctx context.Context, n int) (int, error) {
	tag, err := r.pool.Exec(ctx, `DELETE FROM raw_jobs WHERE id IN (SELECT id FROM raw_jobs
		WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
		ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)`, n)
	return int(tag.RowsAffected()), err
}

func (r pgRaw) claimSettle(ctx context.Context, n int, token int64) (int, error) {
	rows, err := r.pool.Query(ctx, `UPDATE raw_jobs SET state = 'running', attempts = attempts + 1, claim_token = $2,
			claim_expires_at = now() + interval '5 minutes'
		WHERE id IN (SELECT id FROM raw_jobs WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
			ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING id, payload`, n, token)
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if rows.Close(); rows.Err() != nil || len(ids) == 0 {
		return 0, rows.Err()
	}
	tag, err := r.pool.Exec(ctx, `DELETE FROM raw_jobs WHERE id = ANY($1) AND state = 'running' AND claim_token = $2`, ids, token)
	return int(tag.RowsAffected()), err
}

func (r pgRaw) clearSettled(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, `VACUUM raw_jobs`)
	return err
}

func (r pgRaw) holdVacuum(ctx context.Context, tables ...string) (func(context.Context) error, error) {
	for _, t := range tables {
		if _, err := r.pool.Exec(ctx, `VACUUM `+t); err != nil {
			return nil, err
		}
		if _, err := r.pool.Exec(ctx, `ALTER TABLE `+t+` SET (autovacuum_enabled = off)`); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) error {
		for _, t := range tables {
			if _, err := r.pool.Exec(ctx, `ALTER TABLE `+t+` RESET (autovacuum_enabled)`); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func (r pgRaw) orderWithJob(ctx context.Context, id int64, payload []byte) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO bench_orders (id) VALUES ($1)`, id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO raw_jobs (queue, payload) VALUES ('outbox', $1)`, payload)
		return err
	})
}

func (r pgRaw) createSchedules(ctx context.Context, n int, payload []byte, first time.Time) error {
	// The library's row shape, indexes included.
	_, err := r.pool.Exec(ctx, `CREATE TABLE raw_schedules (LIKE alkstore.schedules INCLUDING ALL)`)
	if err == nil {
		_, err = r.pool.Exec(ctx, `INSERT INTO raw_schedules (name, spec, tz, queue, payload, priority, max_attempts,
				next_fire_at, created_at, updated_at)
			SELECT 's' || i, '@hourly', 'UTC', 'fired', $2, 0, 25, $3, now(), now()
			FROM generate_series(1, $1::int) i`, n, payload, first)
	}
	return err
}

func (r pgRaw) fireDue(ctx context.Context, now time.Time) (int, error) {
	rows, err := r.pool.Query(ctx, `SELECT name, next_fire_at FROM raw_schedules WHERE NOT paused AND next_fire_at <= $1
		ORDER BY next_fire_at, name`, now)
	if err != nil {
		return 0, err
	}
	type due struct {
		name string
		at   time.Time
	}
	dues, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (due, error) {
		var d due
		return d, row.Scan(&d.name, &d.at)
	})
	if err != nil {
		return 0, err
	}
	// One statement per fire: the advance and the enqueue, atomically.
	for _, d := range dues {
		if _, err := r.pool.Exec(ctx, `WITH f AS (UPDATE raw_schedules SET next_fire_at = $3, last_fired_at = $4
				WHERE name = $1 AND next_fire_at = $2 RETURNING queue, payload, priority, max_attempts)
			INSERT INTO raw_jobs (queue, payload, priority, max_attempts, created_at, run_at)
			SELECT queue, payload, priority, max_attempts, $4, $2 FROM f`, d.name, d.at, now.Add(time.Hour), now); err != nil {
			return 0, err
		}
	}
	return len(dues), nil
}

func (r pgRaw) close() { r.pool.Close() }

// --- SQLite ---

// liteRaw mirrors the store's SQLite set-up: one writer connection, a pool
// of readers, statements prepared once.
type liteRaw struct {
	writer, readers  *sql.DB
	insertEv, insJob *sql.Stmt
}

// openLite's raw_jobs keeps the index entry a pending job has in alk_jobs
// (alk_jobs_ready; alk_jobs's other partial indexes hold no pending job,
// and schema 00032 dropped alk_jobs_due, so raw_jobs_due went too), so
// the ceilings of enqueue and burn-down write the same index entries a
// job costs the library.
func openLite(ctx context.Context, path string) (*store.Store, raw) {
	s := must(store.Open(ctx, path))
	writer := must(sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(normal)"))
	writer.SetMaxOpenConns(1)
	// The readers read as the library's do (litedriver.Query: columns read
	// in place, no *sql.Rows): through database/sql the ceiling paid for
	// conversions the library does not make and read slower than it
	// (SQLite replay 1.50 of raw, 8 -> 1 1.04; issue 18's third part).
	readers := must(litedriver.Open("file:" + path + "?_pragma=busy_timeout(10000)&_pragma=query_only(1)"))
	_, err := writer.ExecContext(ctx, `CREATE TABLE raw_events (id INTEGER PRIMARY KEY AUTOINCREMENT, stream TEXT NOT NULL,
		key TEXT, payload BLOB, created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)));
		CREATE INDEX raw_events_stream_id ON raw_events (stream, id);
		CREATE TABLE raw_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, payload BLOB,
		priority INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
		max_attempts INTEGER NOT NULL DEFAULT 25, created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
		run_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)), claim_token INTEGER, claim_expires_at INTEGER);
		CREATE INDEX raw_jobs_ready ON raw_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending'`)
	must0(err)
	r := liteRaw{writer: writer, readers: readers}
	r.insertEv = must(writer.PrepareContext(ctx, `INSERT INTO raw_events (stream, key, payload) VALUES (?, ?, ?)`))
	r.insJob = must(writer.PrepareContext(ctx, `INSERT INTO raw_jobs (queue, payload) VALUES (?, ?)`))
	return s, r
}

func (r liteRaw) insert(ctx context.Context, payload []byte) error {
	_, err := r.insertEv.ExecContext(ctx, "bench", nil, payload)
	return err
}

const liteReadPage = `SELECT id, key, payload, created_at FROM raw_events
	WHERE stream = ? AND id > ? ORDER BY id LIMIT ?`

func (r liteRaw) readPage(ctx context.Context, after int64, limit int, page []rawEvent) ([]rawEvent, error) {
	page = page[:0]
	err := litedriver.Query(ctx, r.readers, liteReadPage, func(row *litedriver.Row) error {
		ev := rawEvent{id: row.Int64(0), stream: "bench", payload: row.Blob(2), created: time.UnixMicro(row.Int64(3))}
		if !row.Null(1) {
			key := string(row.Text(1))
			ev.key = &key
		}
		page = append(page, ev)
		return nil
	}, "bench", after, int64(limit))
	return page, err
}

func (r liteRaw) eventHead(ctx context.Context) (int64, error) {
	var id int64
	err := r.readers.QueryRowContext(ctx, `SELECT COALESCE(max(id), 0) FROM raw_events`).Scan(&id)
	return id, err
}

func (r liteRaw) insertJob(ctx context.Context, payload []byte) error {
	_, err := r.insJob.ExecContext(ctx, "bench", payload)
	return err
}

// insertJobs is one statement for the batch, as on PostgreSQL: the
// payloads in a JSONB array (SQLite's binary JSON) of raw strings, each a
// payload's bytes as they are, as the library's EnqueueMany binds them
// (store/queue_lite.go; a JSON text array of hex strings cost both a parse
// and an unhex a job, about 5,300 of 19,300 instructions a job, callgrind), in array
// order without a sort (json_each consumes ORDER BY rowid; ORDER BY j.key
// sorted the rows, about 4,200 instructions a job, a cost the ceiling need
// not pay).
func (r liteRaw) insertJobs(ctx context.Context, payloads [][]byte) error {
	size := 0
	for _, p := range payloads {
		size += jsonbHeaderLen(len(p)) + len(p)
	}
	b := appendJSONBHeader(make([]byte, 0, 9+size), 0xb, size) // an array
	for _, p := range payloads {
		b = appendJSONBHeader(b, 0xa, len(p)) // a raw string
		b = append(b, p...)
	}
	_, err := r.writer.ExecContext(ctx, `INSERT INTO raw_jobs (queue, payload)
		SELECT 'bench', CAST(j.value AS BLOB) FROM json_each(?) AS j ORDER BY j.rowid`, b)
	return err
}

// appendJSONBHeader appends the header of a JSONB element of type t whose
// payload is n bytes (https://sqlite.org/jsonb.html).
func appendJSONBHeader(b []byte, t byte, n int) []byte {
	switch {
	case n <= 11:
		return append(b, byte(n)<<4|t)
	case n <= 0xff:
		return append(b, 0xc0|t, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xd0|t), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xe0|t), uint32(n))
}

// jsonbHeaderLen is the length of appendJSONBHeader's header for n bytes.
func jsonbHeaderLen(n int) int {
	switch {
	case n <= 11:
		return 1
	case n <= 0xff:
		return 2
	case n <= 0xffff:
		return 3
	}
	return 5
}

func (r liteRaw) takeJobs(ctx context.Context, n int) (int, error) {
	res, err := r.writer.ExecContext(ctx, `DELETE FROM raw_jobs WHERE id IN (SELECT id FROM raw_jobs
		WHERE queue = 'bench' AND state = 'pending' AND run_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER)
		ORDER BY priority DESC, run_at, id LIMIT ?)`, n)
	if err != nil {
		return 0, err
	}
	k, err := res.RowsAffected()
	return int(k), err
}

func (r liteRaw) clearSettled(context.Context) error { return nil }

func (r liteRaw) holdVacuum(context.Context, ...string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}

func (r liteRaw) claimSettle(ctx context.Context, n int, token int64) (int, error) {
	rows, err := r.writer.QueryContext(ctx, `UPDATE raw_jobs SET state = 'running', attempts = attempts + 1, claim_token = ?,
			claim_expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) + 300000000
		WHERE id IN (SELECT id FROM raw_jobs WHERE queue = 'bench' AND state = 'pending'
			AND run_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER) ORDER BY priority DESC, run_at, id LIMIT ?)
		RETURNING id, payload`, token, n)
	if err != nil {
		return 0, err
	}
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if rows.Close(); rows.Err() != nil || len(ids) == 0 {
		return 0, rows.Err()
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	res, err := r.writer.ExecContext(ctx, `DELETE FROM raw_jobs WHERE id IN (SELECT value FROM json_each(?))
		AND state = 'running' AND claim_token = ?`, string(list), token)
	if err != nil {
		return 0, err
	}
	k, err := res.RowsAffected()
	return int(k), err
}

func (r liteRaw) orderWithJob(ctx context.Context, id int64, payload []byte) error {
	tx, err := r.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO bench_orders (id) VALUES (?)`, id); err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, r.insJob).ExecContext(ctx, "outbox", payload); err != nil {
		return err
	}
	return tx.Commit()
}

func (r liteRaw) createSchedules(ctx context.Context, n int, payload []byte, first time.Time) error {
	// The library's row shape, indexes included.
	_, err := r.writer.ExecContext(ctx, `CREATE TABLE raw_schedules (name TEXT PRIMARY KEY, spec TEXT NOT NULL,
		tz TEXT NOT NULL, queue TEXT NOT NULL, payload BLOB, priority INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
		next_fire_at INTEGER NOT NULL, paused BOOLEAN NOT NULL DEFAULT FALSE, last_fired_at INTEGER,
		created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
		CREATE INDEX raw_schedules_due ON raw_schedules (next_fire_at) WHERE NOT paused`)
	if err == nil {
		_, err = r.writer.ExecContext(ctx, `WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?)
			INSERT INTO raw_schedules (name, spec, tz, queue, payload, priority, max_attempts, next_fire_at, created_at, updated_at)
			SELECT 's' || n, '@hourly', 'UTC', 'fired', ?, 0, 25, ?, 0, 0 FROM i`, n, payload, first.UnixMicro())
	}
	return err
}

func (r liteRaw) fireDue(ctx context.Context, now time.Time) (int, error) {
	rows, err := r.readers.QueryContext(ctx, `SELECT name, next_fire_at FROM raw_schedules
		WHERE NOT paused AND next_fire_at <= ? ORDER BY next_fire_at, name`, now.UnixMicro())
	if err != nil {
		return 0, err
	}
	type due struct {
		name string
		at   int64
	}
	var dues []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.name, &d.at); err != nil {
			rows.Close()
			return 0, err
		}
		dues = append(dues, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, d := range dues {
		if err := r.fireOne(ctx, d.name, d.at, now); err != nil {
			return 0, err
		}
	}
	return len(dues), nil
}

// fireOne is the advance and the enqueue in one transaction (SQLite has no
// data-modifying CTEs).
func (r liteRaw) fireOne(ctx context.Context, name string, at int64, now time.Time) error {
	tx, err := r.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var queue string
	var payload []byte
	var priority, maxAttempts int64
	if err := tx.QueryRowContext(ctx, `UPDATE raw_schedules SET next_fire_at = ?, last_fired_at = ?
		WHERE name = ? AND next_fire_at = ? RETURNING queue, payload, priority, max_attempts`,
		now.Add(time.Hour).UnixMicro(), now.UnixMicro(), name, at).Scan(&queue, &payload, &priority, &maxAttempts); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO raw_jobs (queue, payload, priority, max_attempts, created_at, run_at)
		VALUES (?, ?, ?, ?, ?, ?)`, queue, payload, priority, maxAttempts, now.UnixMicro(), at); err != nil {
		return err
	}
	return tx.Commit()
}

func (r liteRaw) close() {
	r.readers.Close()
	r.writer.Close()
}
