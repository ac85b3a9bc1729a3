// Command consumer-group runs a consumer group of three workers on an order
// stream: they share the stream (each customer's orders go to one worker at
// a time, in order), and each order's ledger row commits in the same
// transaction as the group's offset, so every order is booked exactly once,
// even when a worker leaves midway and its orders move to the others.
//
//	go run ./examples/consumer-group            # embedded SQLite
//	go run ./examples/consumer-group postgres://user@host/db
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

type order struct {
	ID       int64 `json:"id"`
	Customer string
	Cents    int64
}

const orders = 300

func run(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		// The primary key would refuse an order booked twice.
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS consumer_group_ledger (order_id BIGINT PRIMARY KEY, customer TEXT NOT NULL, cents BIGINT NOT NULL, worker TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		return err
	}

	stream := s.Stream("consumer-group-orders")
	first := time.Now().UnixNano() // this run's order ids (a database may hold earlier runs')

	// Three workers, each on a store of its own as a process of its own
	// would be, consume the stream as the group "ledger".
	var booked atomic.Int64
	perWorker := make([]atomic.Int64, 3)
	var wg sync.WaitGroup
	stops := make([]context.CancelFunc, 3)
	for w := range 3 {
		ws, err := store.Open(ctx, dsn)
		if err != nil {
			return err
		}
		defer ws.Close()
		wctx, stop := context.WithCancel(ctx)
		stops[w] = stop
		name := fmt.Sprint("worker-", w+1)
		group := ws.Stream("consumer-group-orders").Group("ledger")
		wg.Go(func() {
			err := group.ConsumeTx(wctx, store.GroupOpts{Member: name, Partitions: 8},
				func(ctx context.Context, tx store.Tx, ev store.Event) error {
					var o order
					if err := json.Unmarshal(ev.Payload, &o); err != nil {
						return err
					}
					time.Sleep(time.Millisecond) // the work of booking an order
					// The ledger row and the group's offset commit together.
					_, err := tx.Exec(ctx, `INSERT INTO consumer_group_ledger (order_id, customer, cents, worker) VALUES ($1, $2, $3, $4)`,
						o.ID, o.Customer, o.Cents, name)
					if err == nil && o.ID >= first {
						booked.Add(1)
						perWorker[w].Add(1)
					}
					return err
				})
			if err != nil {
				fmt.Println(name, "stopped:", err)
			}
		})
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	}()

	// Once the three share the partitions (each joined and took its
	// share), the orders come.
	for {
		st, err := stream.Group("ledger").Stats(ctx)
		if err == nil && len(st.Members) == 3 && owned(st) == st.Partitions {
			break
		}
		if err := pause(ctx); err != nil {
			return err
		}
	}
	// Publish this run's orders, keyed by customer: a customer's orders
	// are handled in order, by one worker at a time.
	msgs := make([]store.Message, orders)
	for i := range msgs {
		o := order{ID: first + int64(i), Customer: fmt.Sprint("customer-", i%25), Cents: int64(100 + i)}
		payload, _ := json.Marshal(o)
		msgs[i] = store.Message{Key: &o.Customer, Payload: payload}
	}
	if _, err := stream.PublishMany(ctx, msgs); err != nil {
		return err
	}

	// Worker 2 leaves once a third of the orders are booked: its customers
	// move to the other two at once.
	for booked.Load() < orders/3 {
		if err := pause(ctx); err != nil {
			return err
		}
	}
	stops[1]()
	fmt.Println("worker-2 left the group")
	for {
		st, err := stream.Group("ledger").Stats(ctx)
		if err != nil {
			return err
		}
		if st.Lag == 0 && booked.Load() >= orders {
			fmt.Printf("group %q: %d partitions, %d members, lag %d\n", st.Group, st.Partitions, len(st.Members), st.Lag)
			break
		}
		if err := pause(ctx); err != nil {
			return err
		}
	}
	var rows int
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM consumer_group_ledger WHERE order_id >= $1`, first).Scan(&rows)
	})
	if err != nil {
		return err
	}
	fmt.Printf("booked by worker-1, 2, 3: %d, %d, %d\n", perWorker[0].Load(), perWorker[1].Load(), perWorker[2].Load())
	fmt.Printf("ledger: %d rows for %d orders\n", rows, orders)
	if rows != orders {
		return fmt.Errorf("%d ledger rows for %d orders", rows, orders)
	}
	return nil
}

// owned counts the group's partitions that have an owner.
func owned(st store.GroupStats) int {
	n := 0
	for _, p := range st.Assignment {
		if p.Owner != "" {
			n++
		}
	}
	return n
}

func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Millisecond):
		return nil
	}
}
