package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/store"
)

// The console section (`go run ./bench -only console`, PostgreSQL, not in
// the default run): what the web console's overview costs on a store of
// 10^6 jobs and 10^5 keys (issue 20: under 200 ms of server time). The
// overview is drawn from a snapshot one goroutine reads for every viewer
// (Store.Queues, Store.Streams, Store.Schedules, after each change); a page
// request renders that snapshot. Both are measured, with the queue and
// stream pages, whose reads are the viewer's own.
func benchConsole(ctx context.Context, dsn string) {
	t := pgScaleTarget(ctx, dsn)
	defer t.s.Close()
	s := t.s
	counts := scaleCounts{big: 100_000, keys: 100_000, headless: 10_000, delayed: 500_000, dead: 500_000}
	start := time.Now()
	must0(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return t.load(ctx, tx, scaleCounts{}, counts, time.Now())
	}))
	must0(t.after(ctx))
	for i := range 20 { // a few small queues, streams and schedules beside the big ones
		must(s.Queue(fmt.Sprintf("q%02d", i)).Enqueue(ctx, []byte("x"), store.EnqueueOpts{}))
		must(s.Stream(fmt.Sprintf("s%02d", i)).Publish(ctx, []byte("x")))
		must0(s.Stream(fmt.Sprintf("s%02d", i)).SaveOffset(ctx, "reader", 1))
		must0(s.Schedule(fmt.Sprintf("sch%02d", i)).Set(ctx, store.ScheduleSpec{Spec: "@hourly", Queue: "q00"}))
	}
	log.Printf("console: loaded %d jobs, %d keys (%d headless) in %s", counts.delayed+counts.dead, counts.keys, counts.headless,
		time.Since(start).Round(time.Second))

	snapshot := func() {
		must(s.Queues(ctx))
		must(s.Streams(ctx))
		must(s.Schedules(ctx))
	}
	c := console.New(s, console.Options{SampleInterval: time.Hour})
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()
	get := func(path string) func() {
		return func() {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				log.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				log.Fatalf("console: GET %s: %s", path, resp.Status)
			}
		}
	}
	get("/")() // the sampler's first snapshot is in; it reads again only after a write or an hour
	fmt.Printf("%-8s %-44s %14s %14s\n", "engine", "console (10^6 jobs, 10^5 keys)", "median", "max of 20")
	for _, m := range []struct {
		what string
		fn   func()
	}{
		{"Store.Queues", func() { must(s.Queues(ctx)) }},
		{"Store.Streams", func() { must(s.Streams(ctx)) }},
		{"Store.Stats (streams and queues)", func() { must(s.Stats(ctx)) }},
		{"Store.Schedules", func() { must(s.Schedules(ctx)) }},
		{"overview snapshot (the three above)", snapshot},
		{"GET / (overview, from the snapshot)", get("/")},
		{"GET /queues/old?state=dead (a page)", get("/queues/old?state=dead")},
		{"GET /queues/later (pending page)", get("/queues/later")},
		{"GET /streams/kv (events, heads)", get("/streams/kv")},
	} {
		med, worst := timeRuns(20, m.fn)
		fmt.Printf("%-8s %-44s %14s %14s\n", "pg", m.what, med.Round(100*time.Microsecond), worst.Round(100*time.Microsecond))
	}
}

// timeRuns runs fn once to warm up, then n times, and returns the median
// and the slowest.
func timeRuns(n int, fn func()) (time.Duration, time.Duration) {
	fn()
	d := make([]time.Duration, n)
	for i := range d {
		t0 := time.Now()
		fn()
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	return d[n/2], d[n-1]
}
