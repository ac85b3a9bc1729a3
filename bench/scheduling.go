package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/store"
)

// benchScheduling measures the outbox's write path (an order row and its
// message in one transaction, 8 writers) and the scheduler's fire path
// (1,000 due schedules fired by one leader, each fire an advance and an
// enqueue in one transaction), beside the same work in raw SQL.
func benchScheduling(ctx context.Context, engine string, s *store.Store, open func(...store.Option) *store.Store, r raw) {
	payload := []byte(`{"event":"order placed"}`)
	must0(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE bench_orders (id BIGINT PRIMARY KEY)`)
		return err
	}))
	ob := s.Outbox("bench")
	var seq atomic.Int64
	if what := "outbox: order + message per tx, 8 writers (tx/s)"; want(engine, what) {
		lib, ceil := pair(8, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO bench_orders (id) VALUES ($1)`, seq.Add(1)); err != nil {
					return err
				}
				_, err := ob.EnqueueTx(ctx, tx, payload, store.EnqueueOpts{})
				return err
			})
		}, func() error { return r.orderWithJob(ctx, seq.Add(1), payload) })
		row(engine, what, lib, ceil)
	}

	// Schedules: a store whose clock jumps two hours before each round finds
	// every @hourly schedule due; the raw side is given the same "now".
	const what = "scheduler: fire 1,000 due schedules (fires/s)"
	if !want(engine, what) {
		return
	}
	const n = 1000
	var hours atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(hours.Load()) * time.Hour) }
	fs := open(store.WithClock(clock))
	defer fs.Close()
	for i := range n {
		must0(fs.Schedule(fmt.Sprint("s", i)).Set(ctx, store.ScheduleSpec{Spec: "@hourly", Queue: "fired", Payload: payload}))
	}
	must0(r.createSchedules(ctx, n, payload, time.Now().Truncate(time.Hour).Add(time.Hour)))
	var a, b float64
	for range 3 {
		hours.Add(2)
		start := time.Now()
		fired := must(fs.Scheduler("bench", store.SchedulerOpts{}).RunOnce(ctx))
		if fired != n {
			log.Fatalf("fired %d of %d schedules", fired, n)
		}
		a = max(a, n/time.Since(start).Seconds())

		start = time.Now()
		if fired := must(r.fireDue(ctx, clock())); fired != n {
			log.Fatalf("raw: fired %d of %d schedules", fired, n)
		}
		b = max(b, n/time.Since(start).Seconds())
	}
	row(engine, what, a, b)
}
