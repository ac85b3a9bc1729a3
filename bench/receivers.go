package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/alkstore/alkstore/store"
)

// benchReceivers measures push delivery: publish → Recv latency when the
// subscriber shares the publisher's store (an in-process wake) and when it
// has a store of its own (the wake crosses the feed: Postgres NOTIFY or the
// SQLite watcher, as for another process); end-to-end throughput with 8
// publishers and one subscriber; and the idle cost of waiting.
func benchReceivers(ctx context.Context, engine string, s *store.Store, open func(...store.Option) *store.Store, r raw) {
	other := open()
	defer other.Close()
	for _, c := range []struct {
		what string
		sub  *store.Store
	}{{"in-process", s}, {"via the feed (second store)", other}} {
		what := "publish → Recv " + c.what
		if !want(engine, what) {
			continue
		}
		p50, p99 := wakeLatency(ctx, s, c.sub, "lat-"+strconv.Itoa(len(c.what)), 200)
		wakeRow(engine, what, p50, p99)
	}

	// End to end: 8 publishers, one subscriber keeping up; beside the same
	// done in raw SQL (e2eRaw), alternately, the best of two each.
	if what := "8 publishers → 1 subscriber (events/s)"; want(engine, what) {
		payload := make([]byte, 128)
		const per = 2000
		var lib, ceil float64
		for i := range 2 {
			lib = max(lib, e2e(ctx, engine, s.Stream(fmt.Sprint("e2e-", i)), payload, per, probeOf(r)))
			ceil = max(ceil, e2eRaw(ctx, engine, r, payload, per))
		}
		row(engine, what, lib, ceil)
	}

	// Idle: 20 parked receivers and a worker loop with nothing to do; then
	// the same with two schedulers added (a leader, and a standby on a
	// second store as in another process) with nothing scheduled.
	idle1, idle2 := "idle: 20 receivers + 1 worker, CPU of one core", "idle: the same + 2 schedulers, CPU of one core"
	want1, want2 := want(engine, idle1), want(engine, idle2)
	if !want1 && !want2 {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < 20; i++ {
		rr := must(s.Stream(fmt.Sprint("idle-", i)).Subscribe(ctx, "c", store.SubscribeOpts{}))
		defer rr.Close()
	}
	go s.Queue("idle").Work(wctx, store.WorkOpts{}, func(context.Context, *store.Job) error { return nil })
	if want1 {
		idle(engine, idle1)
	}
	if want2 {
		go s.Scheduler("idle-leader", store.SchedulerOpts{}).Run(wctx)
		go other.Scheduler("idle-standby", store.SchedulerOpts{}).Run(wctx)
		idle(engine, idle2)
	}
}

// e2e publishes 8×per events from 8 goroutines to st while one subscriber
// receives them, and returns events/s until the subscriber has them all.
func e2e(ctx context.Context, engine string, st *store.Stream, payload []byte, per int, p serverProbe) float64 {
	rcv := must(st.Subscribe(ctx, "e2e", store.SubscribeOpts{Buffer: 1024, PageSize: 1000}))
	defer rcv.Close()
	var wg sync.WaitGroup
	m := startCPU("8 publishers → 1 subscriber", false).withProbe(p)
	defer m.stop(engine, 8*per)
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				must(st.Publish(ctx, payload))
			}
		}()
	}
	for i := 0; i < 8*per; i++ {
		must(rcv.Recv(ctx))
	}
	rate := float64(8*per) / time.Since(start).Seconds()
	wg.Wait()
	return rate
}

// e2eRaw is e2e's ceiling: 8 raw INSERT loops of per rows each and one raw
// reader reading them by id in pages of 1000 (the subscriber's PageSize),
// on the same database and settings, until it has read up to the last
// row; events/s. The reader does the least a subscriber can: after a short
// page it waits for an in-process signal that an insert returned (as the
// store's in-process wake), and it reads no horizon, so on PostgreSQL it
// may step over a row that commits out of order, which only raises the
// ceiling.
func e2eRaw(ctx context.Context, engine string, r raw, payload []byte, per int) float64 {
	from := must(r.eventHead(ctx))
	inserted := make(chan struct{}, 1)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				must0(r.insert(ctx, payload))
				select {
				case inserted <- struct{}{}:
				default:
				}
			}
		}()
	}
	m := startCPU("raw 8 inserters → 1 reader", false).withProbe(probeOf(r))
	defer m.stop(engine, 8*per)
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	last, end := from, int64(-1) // end: the last row's id, once every insert returned
	var page []rawEvent
	for end < 0 || last < end {
		var err error
		page, err = r.readPage(ctx, last, 1000, page)
		must0(err)
		n := len(page)
		if n > 0 {
			last = lastOf(page)
		}
		if n == 1000 || end >= 0 && last < end {
			continue
		}
		select {
		case <-inserted:
		case <-all:
			if end < 0 {
				end = must(r.eventHead(ctx))
			}
		}
	}
	return float64(8*per) / time.Since(start).Seconds()
}

// idle measures this process's CPU share while what runs is parked. The
// garbage of the sections before is collected first, so the figure is the
// cost of waiting, not of cleaning up after the last measurement.
func idle(engine, what string) {
	time.Sleep(time.Second) // let them park, and the watchers slow down
	runtime.GC()
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(*idleFor)
	share := (cpuTime() - cpu0).Seconds() / time.Since(t0).Seconds() * 100
	if emit(fig{Engine: engine, Figure: what, Value: share, Unit: "% of a core", Lower: true}) {
		return
	}
	fmt.Printf("%-8s %-44s %13.2f%% %14s\n", engine, what, share, "limit 5%")
}

func wakeLatency(ctx context.Context, pub, sub *store.Store, stream string, n int) (p50, p99 time.Duration) {
	rcv := must(sub.Stream(stream).Subscribe(ctx, "lat", store.SubscribeOpts{}))
	defer rcv.Close()
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		must(pub.Stream(stream).Publish(ctx, nil))
		must(rcv.Recv(ctx))
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	return lat[n/2], lat[n*99/100]
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
