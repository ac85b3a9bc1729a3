// Command compacted-counter keeps a counter as the latest value of a key in
// a compacted stream. Several goroutines increment it at once: each locks
// the key (even before it has a value), reads the current head, and
// produces the next value in the same transaction, so no increment is lost.
//
//	go run ./examples/compacted-counter            # embedded SQLite
//	go run ./examples/compacted-counter postgres://user@host/db
package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Counter is the message; its SchemaVersion is stored in the key's head.
type Counter struct {
	N int `json:"n"`
}

func (Counter) SchemaVersion() int { return 1 }

func main() { example.Main(run) }

func run(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()

	counters := s.Topic[Counter]("counters") // the topic handle, named once
	if err := counters.Stream().Configure(ctx, store.StreamConfig{Compacted: true}); err != nil {
		return err
	}
	visits := counters.Key("page-visits") // the key handle, named once

	increment := func() error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			cur, err := visits.LockCompactionHeadTx(ctx, tx) // nil: no value yet (the row is locked all the same)
			if err != nil {
				return err
			}
			next := Counter{N: 1}
			if cur != nil {
				next.N = cur.N + 1
			}
			_, err = counters.PublishTx(ctx, tx, &next, store.PublishOpts{Key: "page-visits"})
			return err
		})
	}

	before := 0 // the value an earlier run left, if any
	if cur, err := visits.CompactionHead(ctx); err == nil {
		before = cur.N
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}

	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := increment(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	final, err := visits.CompactionHead(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%d goroutines × %d increments → page-visits = %d (from %d)\n", workers, each, final.N, before)

	// Compaction: every superseded value can go; the head stays.
	report, err := janitor.New(s, janitor.Opts{}).RunOnce(ctx)
	if err != nil {
		return err
	}
	heads, err := counters.Heads(ctx, "", 10)
	if err != nil {
		return err
	}
	fmt.Printf("janitor compacted %d superseded events; heads now: %s = %d\n", report.Compacted, heads[0].Key, heads[0].Value.N)
	return nil
}
