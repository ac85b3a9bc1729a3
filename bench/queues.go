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
		enqueue := func() error { _, err := q.Enqueue(ctx, payload, store.EnqueueOpts{}); return err }
		insert := func() error { return r.insertJob(ctx, payload) }
		lib, ceil := pair(workers, enqueue, insert)
		row(engine, what, lib, ceil)
		if *cpuPerJob { // three more runs of each, alternating, metered (as the publish rows)
			for range 3 {
				for _, side := range []struct {
					what    string
					op      func() error
					profile bool
				}{{fmt.Sprintf("enqueue ×%d", workers), enqueue, true}, {fmt.Sprintf("raw insert ×%d", workers), insert, false}} {
					m := startCPU(side.what, side.profile).withProbe(probeOf(r))
					n := onceN(workers, side.op)
					m.stop(engine, int(n))
				}
			}
		}
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
		many := func() error { _, err := q.EnqueueMany(ctx, jobs); return err }
		insert := func() error { return r.insertJobs(ctx, payloads) }
		lib, ceil := pair(1, many, insert)
		row(engine, what, lib*float64(len(jobs)), ceil*float64(len(jobs)))
		if *cpuPerJob { // one more run of each, metered
			for _, side := range []struct {
				what string
				op   func() error
			}{{"EnqueueMany of 1,000", many}, {"raw batch of 1,000", insert}} {
				m := startCPU(side.what, false)
				n := onceN(1, side.op)
				m.stop(engine, int(n)*len(jobs))
			}
		}
	}

	// Burn-down: fill a fresh queue, then time Work with a no-op handler
	// until every job is acked. Two ceilings remove the same number of rows,
	// 8 workers in parallel taking 100 at a time: a fused claim-and-delete
	// (one statement a batch), and a claim then a settle (two statements a
	// batch, the least a queue running handlers between them can do). The
	// second row is the same measurement beside the second ceiling; the
	// third, a second queue's burn-down with as many jobs in flight as the
	// ceilings (Concurrency 800), beside it too.
	if what := fmt.Sprintf("burn-down of %d via Work (jobs/s)", *burnN); want(engine, what) {
		burn, wide := s.Queue("burndown"), s.Queue("burndown-wide")
		for _, q := range []*store.Queue{burn, wide} {
			for i := 0; i < *burnN; i += len(jobs) {
				must(q.EnqueueMany(ctx, jobs[:min(len(jobs), *burnN-i)]))
			}
		}
		fill := func() {
			for i := 0; i < *burnN; i += len(payloads) {
				must0(r.insertJobs(ctx, payloads[:min(len(payloads), *burnN-i)]))
			}
		}
		fill()
		release := must(r.holdVacuum(ctx, "alkstore.jobs", "raw_jobs"))
		m := startCPU("burn-down via Work", true)
		lib := burnDown(ctx, burn, *burnN, false, *workers)
		m.stop(engine, *burnN)
		// The ceilings keep 8 claims of 100 in flight; with Concurrency
		// 100 a worker keeps one (a claim goes as its handlers free a
		// batch of slots), so it waits out each claim's round trip. The
		// same burn-down with as many jobs in flight as the ceiling:
		m = startCPU("burn-down via Work, Concurrency 800", false)
		wideRate := burnDown(ctx, wide, *burnN, false, 8*100)
		m.stop(engine, *burnN)
		m = startCPU("raw delete", false)
		one := rawBurnDown(ctx, *burnN, r.takeJobs)
		m.stop(engine, *burnN)
		// The delete left its 100,000 entries at the head of raw_jobs's
		// index (PostgreSQL); each claim below would step over them, a walk
		// the library's run, on a queue of fresh jobs, does not make
		// (2,800 against 2,000 buffers a claim), or not, when autovacuum's
		// minute happened to fall between the two runs: the ceiling moved
		// with it (server CPU a job 25-32 against 19-24 µs; issue 18).
		must0(r.clearSettled(ctx))
		fill()
		var token atomic.Int64
		m = startCPU("raw claim + settle", false)
		two := rawBurnDown(ctx, *burnN, func(ctx context.Context, n int) (int, error) {
			return r.claimSettle(ctx, n, token.Add(1))
		})
		m.stop(engine, *burnN)
		must0(release(ctx))
		row(engine, what, lib, one)
		row(engine, fmt.Sprintf("burn-down of %d, beside claim + settle", *burnN), lib, two)
		row(engine, "burn-down, Concurrency 800, beside claim + settle", wideRate, two)
	}

	// The same burn-down through WorkTx with a no-op transactional handler:
	// each job pays a transaction of its own (begin, complete, commit)
	// instead of a share of a batched ack; on SQLite the transactions also
	// take turns on the writer slot.
	if what := fmt.Sprintf("burn-down of %d via WorkTx (jobs/s)", *burnN); want(engine, what) {
		burnTx := s.Queue("burndown-tx")
		for i := 0; i < *burnN; i += len(jobs) {
			must(burnTx.EnqueueMany(ctx, jobs[:min(len(jobs), *burnN-i)]))
		}
		release := must(r.holdVacuum(ctx, "alkstore.jobs"))
		m := startCPU("burn-down via WorkTx", false)
		rate := burnDown(ctx, burnTx, *burnN, true, *workers)
		m.stop(engine, *burnN)
		must0(release(ctx))
		row(engine, what, rate, 0)
	}
}

func burnDown(ctx context.Context, q *store.Queue, total int, inTx bool, concurrency int) float64 {
	var handled atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	opts := store.WorkOpts{Concurrency: concurrency}
	go func() {
		if inTx {
			done <- q.WorkTx(wctx, opts, func(context.Context, store.Tx, *store.Job) error {
				handled.Add(1)
				return nil
			})
			return
		}
		done <- q.Work(wctx, opts, func(context.Context, *store.Job) error {
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

// rawBurnDown runs take (n jobs at most a call) from 8 workers until total
// jobs are gone.
func rawBurnDown(ctx context.Context, total int, take func(ctx context.Context, n int) (int, error)) float64 {
	var left atomic.Int64
	left.Store(int64(total))
	start := time.Now()
	done := make(chan struct{}, 8)
	for w := 0; w < 8; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for left.Load() > 0 {
				n, err := take(ctx, 100)
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

// benchPeers runs bench/peers (River on the same PostgreSQL; River's SQLite
// driver and goqite on SQLite files of their own in liteDir, same job
// counts) and prints alkstore's figures beside theirs.
func benchPeers(ctx context.Context, dsn, liteDir string) {
	must0(os.MkdirAll(liteDir, 0o755))
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-dsn", dsn, "-sqlite-dir", liteDir,
		"-jobs", fmt.Sprint(*burnN), "-workers", fmt.Sprint(*workers), "-d", dur.String())
	cmd.Dir = "bench/peers"
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	must0(err)
	must0(cmd.Start())
	theirs := map[string]float64{}
	dec := json.NewDecoder(out)
	for {
		var fig struct {
			Name string
			Rate float64
		}
		if err := dec.Decode(&fig); err != nil {
			break
		}
		theirs[fig.Name] = fig.Rate
	}
	if err := cmd.Wait(); err != nil {
		log.Printf("bench/peers failed: %v", err)
		return
	}
	for _, p := range []struct{ engine, peer, title string }{
		{"pg", "river", "River v0.51.2 (riverpgxv5)"},
		{"lite", "river_sqlite", "River v0.51.2 (riversqlite)"},
		{"lite", "goqite", "goqite v0.4.0"},
	} {
		fmt.Printf("\n%-8s %-44s %14s %14s %7s\n", "engine", "versus "+p.title, "alkstore", "peer", "ratio")
		for _, f := range []struct{ what, ours, their string }{
			{"enqueue, 1 producer (jobs/s)", "enqueue, 1 producer(s) (jobs/s)", "insert"},
			{"EnqueueMany of 1,000 (jobs/s)", "EnqueueMany of 1,000 (jobs/s)", "insert_many_1000"},
			{fmt.Sprintf("burn-down of %d, no-op worker (jobs/s)", *burnN), fmt.Sprintf("burn-down of %d via Work (jobs/s)", *burnN), "burndown"},
		} {
			a, b := results[p.engine+" "+f.ours], theirs[p.peer+" "+f.their]
			fmt.Printf("%-8s %-44s %14.0f %14.0f %7.2f\n", p.engine, f.what, a, b, a/b)
		}
	}
}
