// Command peers measures River on the Postgres database it is given, doing
// the same work the alkstore bench does, and prints one JSON object per
// figure. It is a nested module so River never enters alkstore's
// dependency graph; bench/main.go runs it in the same `make bench`.
//
//	go run . -dsn postgres://... -jobs 100000 -workers 100 -d 2s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL DSN (a database the bench may fill)")
	jobs := flag.Int("jobs", 100000, "jobs to burn down")
	workers := flag.Int("workers", 100, "concurrent workers")
	dur := flag.Duration("d", 2*time.Second, "duration of the InsertMany measurement")
	flag.Parse()
	ctx := context.Background()
	log.SetFlags(0)

	pool, err := pgxpool.New(ctx, *dsn)
	check(err)
	defer pool.Close()
	driver := riverpgxv5.New(pool)
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

	batch := make([]river.InsertManyParams, 1000)
	for i := range batch {
		batch[i] = river.InsertManyParams{Args: noopArgs{}}
	}

	// InsertMany of 1,000, repeated for the measurement duration.
	n, start := 0, time.Now()
	for time.Since(start) < *dur {
		_, err := client.InsertMany(ctx, batch)
		check(err)
		n += len(batch)
	}
	emit("insert_many_1000", float64(n)/time.Since(start).Seconds())
	_, err = pool.Exec(ctx, "TRUNCATE river_job")
	check(err)

	// Burn-down: fill, then time a no-op worker pool until every job completed.
	for i := 0; i < *jobs; i += len(batch) {
		_, err := client.InsertMany(ctx, batch[:min(len(batch), *jobs-i)])
		check(err)
	}
	start = time.Now()
	check(client.Start(ctx))
	for {
		var done int
		check(pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&done))
		if done >= *jobs {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	emit("burndown", float64(*jobs)/time.Since(start).Seconds())
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	check(client.Stop(stopCtx))
}

func emit(name string, rate float64) {
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"name": name, "rate": rate})
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
