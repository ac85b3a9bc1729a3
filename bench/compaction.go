package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/alkstore/alkstore/store"
)

// benchCompaction measures what compacted keys cost: keyed publishes (each
// upserts its key's head) at 1, 64 and 1,024 keys against unkeyed publishes
// in the same run, and lock → publish cycles, on distinct keys and on one
// hot key, 8 goroutines each.
func benchCompaction(ctx context.Context, engine string, s *store.Store) {
	payload := make([]byte, 128)
	st := s.Stream("keyed")
	for _, keys := range []int{1, 64, 1024} {
		what := fmt.Sprintf("keyed publish, %d keys (vs unkeyed)", keys)
		if !want(engine, what) {
			continue
		}
		keyedOp := func() error {
			_, err := st.PublishWithKey(ctx, fmt.Sprint("k", rand.IntN(keys)), payload)
			return err
		}
		unkeyedOp := func() error { _, err := st.Publish(ctx, payload); return err }
		keyed, unkeyed := pair(8, keyedOp, unkeyedOp)
		cmp(engine, what, keyed, unkeyed, "unkeyed")
		if *cpuPerJob { // one more run of each, metered
			for _, side := range []struct {
				what string
				op   func() error
			}{{fmt.Sprintf("keyed publish ×8, %d keys", keys), keyedOp}, {"unkeyed publish ×8", unkeyedOp}} {
				m := startCPU(side.what, false)
				n := onceN(8, side.op)
				m.stop(engine, int(n))
			}
		}
	}

	topic := s.Topic[struct{ N int }]("locked")
	cycle := func(key string) error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			cur, err := topic.Key(key).LockCompactionHeadTx(ctx, tx)
			if err != nil {
				return err
			}
			next := struct{ N int }{1}
			if cur != nil {
				next.N = cur.N + 1
			}
			_, err = topic.PublishTx(ctx, tx, &next, store.PublishOpts{Key: key})
			return err
		})
	}
	var seq atomic.Int64
	if what := "lock → publish cycles/s, distinct keys"; want(engine, what) {
		plain(engine, what, rate(8, func() error { return cycle(fmt.Sprint("d", seq.Add(1)%4096)) }))
	}
	if what := "lock → publish cycles/s, one hot key"; want(engine, what) {
		plain(engine, what, rate(8, func() error { return cycle("hot") }))
	}
}

// cmp prints a figure beside another of the same run (not raw SQL).
func cmp(engine, what string, a, b float64, bName string) {
	if emit(fig{Engine: engine, Figure: what, Value: a, Unit: "/s", Ceiling: b, Beside: bName}) {
		return
	}
	fmt.Printf("%-8s %-44s %14.0f %14.0f %7.2f  (beside %s)\n", engine, what, a, b, a/b, bName)
}
