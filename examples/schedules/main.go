// Command schedules registers two schedules, runs two schedulers (one leads,
// one stands by) and a worker, stops the leader half way and shows the
// standby taking over without losing or doubling a tick.
//
//	go run ./examples/schedules            # embedded SQLite
//	go run ./examples/schedules postgres://user@host/db
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

func run(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()

	// Registering at every start is safe: an unchanged spec keeps its
	// pending boundary (and a pause an operator set).
	for name, spec := range map[string]store.ScheduleSpec{
		"tick":           {Spec: "@every 1s", Queue: "ticks", Payload: []byte("tick")},
		"nightly-report": {Spec: "30 2 * * *", TZ: "America/New_York", Queue: "reports", Payload: []byte("report")},
	} {
		if err := s.Schedule(name).Set(ctx, spec); err != nil {
			return err
		}
	}
	// This program pauses tick at its end, and a pause outlives Set: resume
	// it, so a second run on the same database ticks again.
	if err := s.Schedule("tick").Resume(ctx); err != nil {
		return err
	}
	err = s.Schedule("bad").Set(ctx, store.ScheduleSpec{Spec: "61 * * * *", Queue: "ticks"})
	fmt.Println("a bad spec is refused:", err)
	err = s.Schedule("sneaky").Set(ctx, store.ScheduleSpec{Spec: "@hourly", Queue: store.OutboxQueuePrefix + "x"})
	fmt.Println("so is a reserved queue:", err)

	list, err := s.Schedules(ctx)
	if err != nil {
		return err
	}
	for _, sc := range list {
		loc, err := time.LoadLocation(sc.TZ)
		if err != nil {
			return err
		}
		fmt.Printf("schedule %-15s %-12s next %s\n", sc.Name, sc.Spec, sc.NextFireAt.In(loc).Format("2006-01-02 15:04:05 MST"))
	}

	// A worker prints each tick with the boundary it fired for (its RunAt).
	var mu sync.Mutex
	ticks := 0
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go s.Queue("ticks").Work(workCtx, store.WorkOpts{}, func(ctx context.Context, job *store.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ticks++
		fmt.Printf("  tick for %s\n", job.RunAt.Format("15:04:05"))
		return nil
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return ticks }

	// Two schedulers, as if in two processes: one leads, one stands by.
	start := func(owner string) (*store.Scheduler, context.CancelFunc, <-chan error) {
		sch := s.Scheduler(owner, store.SchedulerOpts{})
		c, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- sch.Run(c) }()
		return sch, cancel, done
	}
	a, stopA, doneA := start("scheduler-a")
	b, stopB, doneB := start("scheduler-b")
	defer stopB()
	for !a.Leading() && !b.Leading() {
		time.Sleep(time.Millisecond)
	}
	stopLeader, leaderDone, standby := stopA, doneA, b
	if b.Leading() {
		stopLeader, leaderDone, standby = stopB, doneB, a
	}
	lease, err := s.SchedulerLeader(ctx)
	if err != nil {
		return err
	}
	fmt.Println("leader:", lease.Owner)

	for count() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	stopLeader() // gives the lease up and wakes the standby
	if err := <-leaderDone; err != nil {
		return err
	}
	for !standby.Leading() {
		time.Sleep(time.Millisecond)
	}
	stopped := lease.Owner
	if lease, err = s.SchedulerLeader(ctx); err != nil {
		return err
	}
	fmt.Printf("%s stopped; the standby %s took over\n", stopped, lease.Owner)

	for count() < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Schedule("tick").Pause(ctx); err != nil {
		return err
	}
	fmt.Println("tick paused after", count(), "ticks; none lost or doubled across the handover")
	return nil
}
