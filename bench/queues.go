package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/store"
)

func benchQueues(ctx context.Context, engine string, s *store.Store, r raw) {
	payload := []byte(`{"to":"someone@example.com"}`)
	q := s.Queue("bench")
	for _, workers := range []int{1, 8} {
		what := fmt.Sprintf("enqueue, %d producer(s) (jobs/s)", workers)
		if !want(engine, what) {
			continue
		}
		lib, ceil := pair(workers, func() error { _, err := q.Enqueue(ctx, payload, store.EnqueueOpts{}); return err },
			func() error { return r.insertJob(ctx, payload) })
		row(engine, what, lib, ceil)
	}

	// Unique jobs: a fresh key each time (an insert through the unique
	// index), then the same key again and again (a duplicate: the insert
	// conflicts and the holder is read).
	var seq atomic.Int64
	if what := "enqueue unique, new key (jobs/s)"; want(engine, what) {
		uniq := rate(1, func() error {
			_, err := q.Enqueue(ctx, payload, store.EnqueueOpts{Unique: store.UniqueOpts{Key: fmt.Sprint("k", seq.Add(1))}})
			return err
		})
		row(engine, what, uniq, 0)
	}
	if what := "enqueue unique, duplicate (calls/s)"; want(engine, what) {
		dup := rate(1, func() error {
			_, err := q.Enqueue(ctx, payload, store.EnqueueOpts{Unique: store.UniqueOpts{Key: "k1"}})
			return err
		})
		row(engine, what, dup, 0)
	}

	jobs := make([]store.NewJob, 1000)
	payloads := make([][]byte, len(jobs))
	for i := range jobs {
		jobs[i].Payload, payloads[i] = payload, payload
	}
	if what := "EnqueueMany of 1,000 (jobs/s)"; want(engine, what) {
		lib, ceil := pair(1, func() error { _, err := q.EnqueueMany(ctx, jobs); return err },
			func() error { return r.insertJobs(ctx, payloads) })
		row(engine, what, lib*float64(len(jobs)), ceil*float64(len(jobs)))
	}

	// Burn-down: fill a fresh queue, then time Work with a no-op handler
	// until every job is acked; the ceiling removes the same number of rows
	// with a fused claim-and-delete, as many workers in parallel.
	if what := fmt.Sprintf("burn-down of %d via Work (jobs/s)", *burnN); want(engine, what) {
		burn := s.Queue("burndown")
		for i := 0; i < *burnN; i += len(jobs) {
			must(burn.EnqueueMany(ctx, jobs[:min(len(jobs), *burnN-i)]))
		}
		for i := 0; i < *burnN; i += len(payloads) {
			must0(r.insertJobs(ctx, payloads[:min(len(payloads), *burnN-i)]))
		}
		lib := burnDown(ctx, burn, *burnN)
		ceil := rawBurnDown(ctx, r, *burnN)
		row(engine, what, lib, ceil)
	}
}

func burnDown(ctx context.Context, q *store.Queue, total int) float64 {
	var handled atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- q.Work(wctx, store.WorkOpts{Concurrency: *workers}, func(context.Context, *store.Job) error {
			handled.Add(1)
			return nil
		})
	}()
	for {
		if handled.Load() >= int64(total) {
			st, err := q.Stats(ctx)
			must0(err)
			if st.Ready+st.Running == 0 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	must0(<-done)
	return float64(total) / elapsed.Seconds()
}

func rawBurnDown(ctx context.Context, r raw, total int) float64 {
	var left atomic.Int64
	left.Store(int64(total))
	start := time.Now()
	done := make(chan struct{}, 8)
	for w := 0; w < 8; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for left.Load() > 0 {
				n, err := r.takeJobs(ctx, 100)
				must0(err)
				left.Add(-int64(n))
				if n == 0 {
					return
				}
			}
		}()
	}
	for w := 0; w < 8; w++ {
		<-done
	}
	return float64(total) / time.Since(start).Seconds()
}

// benchRiver runs bench/peers (River on the same PostgreSQL, same job
// counts) and prints alkstore's Postgres figures beside River's.
func benchRiver(ctx context.Context, dsn string) {
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-dsn", dsn,
		"-jobs", fmt.Sprint(*burnN), "-workers", fmt.Sprint(*workers), "-d", dur.String())
	cmd.Dir = "bench/peers"
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	must0(err)
	must0(cmd.Start())
	river := map[string]float64{}
	dec := json.NewDecoder(out)
	for {
		var fig struct {
			Name string
			Rate float64
		}
		if err := dec.Decode(&fig); err != nil {
			break
		}
		river[fig.Name] = fig.Rate
	}
	if err := cmd.Wait(); err != nil {
		log.Printf("bench/peers failed: %v", err)
		return
	}
	fmt.Printf("\n%-8s %-44s %14s %14s %7s\n", "engine", "versus River v0.51.2 (riverpgxv5)", "alkstore", "River", "ratio")
	peer := func(what, ours, theirs string) {
		a, b := results["pg "+ours], river[theirs]
		fmt.Printf("%-8s %-44s %14.0f %14.0f %7.2f\n", "pg", what, a, b, a/b)
	}
	peer("EnqueueMany / InsertMany of 1,000 (jobs/s)", "EnqueueMany of 1,000 (jobs/s)", "insert_many_1000")
	peer(fmt.Sprintf("burn-down of %d, no-op worker (jobs/s)", *burnN), fmt.Sprintf("burn-down of %d via Work (jobs/s)", *burnN), "burndown")
}
