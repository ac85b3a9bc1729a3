package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/store"
)

// groupWork is the simulated work per event in the groups section.
const groupWork = time.Millisecond

// benchGroups measures consumer groups: a keyed stream (1,000 keys) drained
// by 1, 2 and 4 members, each on a store of its own (as a process of its
// own would be), each event taking groupWork of simulated work; plain
// (Consume: the offset committed after each event) and transactional
// (ConsumeTx: a business row and the offset in one transaction), and plain
// with a CommitInterval of 100ms (one offset write per partition per
// interval instead of one per event). Each
// figure is events/s from the members' start until every event was handled,
// beside the one-member figure: the speed-up members give. On SQLite a
// transactional handler holds the writer slot for its whole run, so
// ConsumeTx members take turns.
func benchGroups(ctx context.Context, engine string, s *store.Store, open func(...store.Option) *store.Store) {
	must0(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_group_effects (id BIGINT PRIMARY KEY)`)
		return err
	}))
	// The ceiling: the same sleeps with no store at all, 1,500 per goroutine
	// (on a loaded machine a 1ms sleep takes longer, and so does each
	// member's).
	for _, n := range []int{1, 2, 4} {
		if what := fmt.Sprintf("groups: 1ms sleeps alone, %d goroutine(s) (sleeps/s)", n); want(engine, what) {
			start := time.Now()
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					for range 1500 {
						time.Sleep(groupWork)
					}
				})
			}
			wg.Wait()
			plain(engine, what, float64(1500*n)/time.Since(start).Seconds())
		}
	}
	for _, form := range []string{"Consume", "Consume+CommitInterval", "ConsumeTx"} {
		tx := form == "ConsumeTx"
		var opts store.GroupOpts
		if form == "Consume+CommitInterval" {
			opts.CommitInterval = 100 * time.Millisecond
		}
		var one float64
		for _, members := range []int{1, 2, 4} {
			what := fmt.Sprintf("groups: %s, %d member(s), 1ms/event (events/s)", form, members)
			if !want(engine, what) && !(members == 1 && *figure != "") {
				continue
			}
			r := groupRate(ctx, s, open, members, tx, opts)
			if members == 1 {
				one = r
				if want(engine, what) {
					plain(engine, what, r)
				}
				continue
			}
			cmp(engine, what, r, one, "1 member")
		}
	}
}

// groupRate publishes 1,500 events per member (1.5 s of work each) to a
// fresh stream and returns how fast members drain it.
func groupRate(ctx context.Context, s *store.Store, open func(...store.Option) *store.Store, members int, tx bool, opts store.GroupOpts) float64 {
	stream := fmt.Sprintf("bench-group-%d-%d", members, time.Now().UnixNano())
	events := 1500 * members
	msgs := make([]store.Message, events)
	for i := range msgs {
		k := fmt.Sprint("customer-", i%1000)
		msgs[i] = store.Message{Key: &k, Payload: []byte(`{"order":1}`)}
	}
	for i := 0; i < events; i += 1000 {
		must(s.Stream(stream).PublishMany(ctx, msgs[i:min(i+1000, events)]))
	}
	var handled atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	count := func() {
		if handled.Add(1) == int64(events) {
			once.Do(func() { close(done) })
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stores := make([]*store.Store, members)
	for i := range stores {
		stores[i] = open()
	}
	start := time.Now()
	for _, ms := range stores {
		g := ms.Stream(stream).Group("bench")
		wg.Go(func() {
			var err error
			if tx {
				err = g.ConsumeTx(cctx, opts, func(ctx context.Context, tx store.Tx, ev store.Event) error {
					time.Sleep(groupWork)
					if _, err := tx.Exec(ctx, `INSERT INTO bench_group_effects (id) VALUES ($1)`, ev.Offset); err != nil {
						return err
					}
					count()
					return nil
				})
			} else {
				err = g.Consume(cctx, opts, func(ctx context.Context, ev store.Event) error {
					time.Sleep(groupWork)
					count()
					return nil
				})
			}
			must0(err)
		})
	}
	<-done
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	for _, ms := range stores {
		ms.Close()
	}
	return float64(events) / elapsed.Seconds()
}
