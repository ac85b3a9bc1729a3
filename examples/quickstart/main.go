// Command quickstart is README.md's quick start, which shows this file from
// its package clause on (tests/readme_test.go keeps the two equal):
//
//	go run ./examples/quickstart   # writes app.db in the current directory
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alkstore/alkstore/store"
)

func main() {
	ctx := context.Background()
	s, err := store.Open(ctx, "app.db") // or "postgres://user@host/db"
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// Your own table, beside alkstore's (your migrations would create it).
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS shop_orders (id bigint PRIMARY KEY, item text NOT NULL)`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	orders := s.Stream("orders")
	id := time.Now().UnixNano() // your order id
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shop_orders (id, item) VALUES ($1, $2)`, id, "teapot"); err != nil {
			return err
		}
		_, err := orders.PublishWithKeyTx(ctx, tx, fmt.Sprint(id), []byte("order placed"))
		return err // nil commits both; an error, a panic or a cancelled ctx rolls both back
	})
	if err != nil {
		log.Fatal(err)
	}

	evs, err := orders.ReadFromConsumer(ctx, "billing", 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs {
		fmt.Println(ev.Offset, *ev.Key, string(ev.Payload))
	}
	if len(evs) > 0 {
		err = orders.SaveOffset(ctx, "billing", evs[len(evs)-1].Offset)
		if err != nil {
			log.Fatal(err)
		}
	}
}
