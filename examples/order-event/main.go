// Command order-event commits an order row and its "order placed" event in
// one transaction, then shows that a failed checkout leaves neither behind.
//
//	go run ./examples/order-event            # embedded SQLite
//	go run ./examples/order-event postgres://user@host/db
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

var errPaymentDeclined = errors.New("payment declined")

func run(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	orders := s.Stream("order-event")

	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS order_event_orders (id BIGINT PRIMARY KEY, item TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		return err
	}

	// checkout writes the business row and its event in one transaction:
	// both commit, or neither does.
	var first int64 // this run's first event (a database may hold earlier runs')
	checkout := func(id int64, item string, pay func() error) error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO order_event_orders (id, item) VALUES ($1, $2)`, id, item); err != nil {
				return err
			}
			off, err := orders.PublishWithKeyTx(ctx, tx, fmt.Sprint(id), []byte("order placed: "+item))
			if err != nil {
				return err
			}
			if err := pay(); err != nil {
				return err
			}
			first = cmp.Or(first, off)
			return nil
		})
	}

	order := time.Now().UnixNano() // your order ids
	if err := checkout(order, "teapot", func() error { return nil }); err != nil {
		return err
	}
	fmt.Println("order 1 committed with its event")
	err = checkout(order+1, "kettle", func() error { return errPaymentDeclined })
	fmt.Printf("order 2 failed (%v): rolled back with its event\n", err)

	evs, err := example.Settled(ctx, 1, func(ctx context.Context) ([]store.Event, error) {
		return orders.ReadSince(ctx, first-1, 10)
	})
	if err != nil {
		return err
	}
	var rows int
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM order_event_orders WHERE id IN ($1, $2)`, order, order+1).Scan(&rows)
	})
	if err != nil {
		return err
	}
	fmt.Printf("orders table: %d row(s) of the two orders; stream: %d event(s) since the first\n", rows, len(evs))
	for _, ev := range evs {
		fmt.Printf("  offset %d key=%s %s\n", ev.Offset, *ev.Key, ev.Payload)
	}
	return nil
}
