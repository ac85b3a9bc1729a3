// Command peers measures alkstore's peers doing the same work the alkstore
// bench does, and prints one JSON object per figure: River on the Postgres
// database it is given (riverpgxv5), and on SQLite River (riversqlite) and
// goqite, each on a file of its own in -sqlite-dir with alkstore's SQLite
// settings (WAL, synchronous=normal, busy_timeout 10 s, the same driver,
// one writer connection as River and goqite advise). It is a nested module
// so the peers never enter alkstore's dependency graph; bench/main.go runs
// it in the same `make bench`.
//
//	go run . -dsn postgres://... -sqlite-dir /tmp/x -jobs 100000 -workers 100 -d 2s
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

var (
	jobsN   = flag.Int("jobs", 100000, "jobs to burn down")
	workers = flag.Int("workers", 100, "concurrent workers")
	dur     = flag.Duration("d", 2*time.Second, "duration of each enqueue measurement")
)

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL DSN (a database the bench may fill); empty: no River on Postgres")
	dir := flag.String("sqlite-dir", "", "directory for the SQLite peers' files; empty: no SQLite peers")
	flag.Parse()
	ctx := context.Background()
	log.SetFlags(0)

	if *dsn != "" {
		pool, err := pgxpool.New(ctx, *dsn)
		check(err)
		benchRiver(ctx, "river", riverpgxv5.New(pool), func() (n int) {
			check(pool.QueryRow(ctx, completedJobs).Scan(&n))
			return n
		})
		pool.Close()
	}
	if *dir != "" {
		db := openLite(filepath.Join(*dir, "river.db"))
		benchRiver(ctx, "river_sqlite", riversqlite.New(db), func() (n int) {
			check(db.QueryRowContext(ctx, completedJobs).Scan(&n))
			return n
		})
		db.Close()
		db = openLite(filepath.Join(*dir, "goqite.db"))
		benchGoqite(ctx, db)
		db.Close()
	}
}

// openLite opens a SQLite file as alkstore opens its writer: WAL,
// synchronous=normal, a 10 s busy timeout, one connection.
func openLite(path string) *sql.DB {
	db, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_pragma=synchronous(normal)")
	check(err)
	db.SetMaxOpenConns(1)
	return db
}

const completedJobs = "SELECT count(*) FROM river_job WHERE state = 'completed'"

// benchRiver measures River on driver: Insert from one producer, InsertMany
// of 1,000, and the burn-down of -jobs with a no-op worker.
func benchRiver[TTx any](ctx context.Context, name string, driver riverdriver.Driver[TTx], completed func() int) {
	migrator, err := rivermigrate.New(driver, nil)
	check(err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	check(err)

	reg := river.NewWorkers()
	river.AddWorker(reg, noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers: reg,
		// River's throughput settings: its defaults (100 ms cooldown, 1 s
		// poll) cap a queue near 1,000 jobs/s, which would flatter alkstore.
		FetchCooldown:     river.FetchCooldownMin,
		FetchPollInterval: 10 * time.Millisecond,
	})
	check(err)

	n, start := 0, time.Now()
	for time.Since(start) < *dur {
		_, err := client.Insert(ctx, noopArgs{}, nil)
		check(err)
		n++
	}
	emit(name+" insert", float64(n)/time.Since(start).Seconds())

	batch := make([]river.InsertManyParams, 1000)
	for i := range batch {
		batch[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	n, start = 0, time.Now()
	for time.Since(start) < *dur {
		_, err := client.InsertMany(ctx, batch)
		check(err)
		n += len(batch)
	}
	emit(name+" insert_many_1000", float64(n)/time.Since(start).Seconds())
	err = driver.GetExecutor().Exec(ctx, "DELETE FROM river_job")
	check(err)

	// Burn-down: fill, then time a no-op worker pool until every job completed.
	for i := 0; i < *jobsN; i += len(batch) {
		_, err := client.InsertMany(ctx, batch[:min(len(batch), *jobsN-i)])
		check(err)
	}
	start = time.Now()
	check(client.Start(ctx))
	for completed() < *jobsN {
		time.Sleep(20 * time.Millisecond)
	}
	emit(name+" burndown", float64(*jobsN)/time.Since(start).Seconds())
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	check(client.Stop(stopCtx))
}

// benchGoqite measures goqite: Send from one producer, 1,000 SendTx in one
// transaction (it has no batch call), and the burn-down of -jobs through
// its job runner (-workers at a time, each job deleted when done).
func benchGoqite(ctx context.Context, db *sql.DB) {
	_, err := db.ExecContext(ctx, goqiteSchema)
	check(err)
	q := goqite.New(goqite.NewOpts{DB: db, Name: "bench"})
	body := []byte(`{"to":"someone@example.com"}`)

	n, start := 0, time.Now()
	for time.Since(start) < *dur {
		check(q.Send(ctx, goqite.Message{Body: body}))
		n++
	}
	emit("goqite insert", float64(n)/time.Since(start).Seconds())

	sendMany := func(k int, name string) {
		tx, err := db.BeginTx(ctx, nil)
		check(err)
		for range k {
			if name == "" {
				check(q.SendTx(ctx, tx, goqite.Message{Body: body}))
			} else {
				_, err := jobs.CreateTx(ctx, tx, q, name, goqite.Message{Body: body})
				check(err)
			}
		}
		check(tx.Commit())
	}
	n, start = 0, time.Now()
	for time.Since(start) < *dur {
		sendMany(1000, "")
		n += 1000
	}
	emit("goqite insert_many_1000", float64(n)/time.Since(start).Seconds())
	_, err = db.ExecContext(ctx, "DELETE FROM goqite")
	check(err)

	for i := 0; i < *jobsN; i += 1000 {
		sendMany(min(1000, *jobsN-i), "noop")
	}
	var done atomic.Int64
	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: *workers, PollInterval: 10 * time.Millisecond, Queue: q})
	r.Register("noop", func(context.Context, []byte) error { done.Add(1); return nil })
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	start = time.Now()
	go func() { r.Start(rctx); close(stopped) }()
	for {
		var left int
		check(db.QueryRowContext(ctx, "SELECT count(*) FROM goqite").Scan(&left))
		if left == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	emit("goqite burndown", float64(*jobsN)/time.Since(start).Seconds())
	cancel()
	<-stopped
}

// goqiteSchema is goqite's schema_sqlite.sql (v0.4.0), which it leaves to
// the application to run.
const goqiteSchema = `create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);`

func emit(name string, rate float64) {
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"name": name, "rate": rate})
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
