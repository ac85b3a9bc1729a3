// Command live-feed shows push delivery: a subscriber replays a consumer's
// backlog from its saved offset, then receives new events as they commit
// (no polling), saving its position as it goes; a listener receives a
// notification sent inside a transaction only once that transaction commits.
//
//	go run ./examples/live-feed            # embedded SQLite
//	go run ./examples/live-feed postgres://user@host/db
package main

import (
	"context"
	"errors"
	"fmt"
	"log"

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
	prices := s.Stream("prices")

	// A backlog from before the subscriber existed.
	for _, p := range []string{"AAPL 190", "MSFT 410"} {
		if _, err := prices.Publish(ctx, []byte(p)); err != nil {
			return err
		}
	}

	rx, err := prices.Subscribe(ctx, "ticker", store.SubscribeOpts{AutoSaveEvery: 2})
	if err != nil {
		return err
	}
	defer rx.Close()

	// Live events, published from another goroutine while we receive.
	go func() {
		for _, p := range []string{"AAPL 191", "NVDA 950"} {
			if _, err := prices.Publish(ctx, []byte(p)); err != nil {
				log.Print(err)
			}
		}
	}()
	for i := 0; i < 4; i++ {
		ev, err := rx.Recv(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("ticker got offset %d: %s\n", ev.Offset, ev.Payload)
	}
	saved, err := prices.Offset(ctx, "ticker")
	if err != nil {
		return err
	}
	fmt.Printf("ticker position %d, saved offset %d (auto-save every 2 events)\n", rx.Position(), saved)

	// Notifications: ephemeral, delivered only when the transaction commits.
	alerts, err := s.Listen(ctx, "alerts")
	if err != nil {
		return err
	}
	defer alerts.Close()
	_ = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := s.NotifyTx(ctx, tx, "alerts", []byte("this one is rolled back")); err != nil {
			return err
		}
		return errors.New("changed my mind")
	})
	if err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return s.NotifyTx(ctx, tx, "alerts", []byte("NVDA crossed 900"))
	}); err != nil {
		return err
	}
	n, err := alerts.Recv(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("alert on %q: %s (the rolled-back one never arrived)\n", n.Channel, n.Payload)

	s.Close()
	if _, err := rx.Recv(ctx); errors.Is(err, store.ErrClosed) {
		fmt.Println("store closed: the receiver reports ErrClosed")
	}
	return nil
}
