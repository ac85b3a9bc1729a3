// Command demo publishes to a stream on an embedded SQLite file, reads it
// back from a consumer's offset, and prints what happened. No setup needed:
//
//	make demo
package main

import (
	"context"
	"fmt"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

func run(ctx context.Context, path string) error {
	s, err := store.Open(ctx, path) // SQLite, schema migrated on open
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf("opened %s (engine %s)\n", path, s.Engine())

	events := s.Stream("signups")
	for _, user := range []string{"ada", "grace", "linus"} {
		off, err := events.PublishWithKey(ctx, user, []byte("signed up: "+user))
		if err != nil {
			return err
		}
		fmt.Printf("published offset %d: %s signed up\n", off, user)
	}

	// The mailer consumer reads two events, then records its progress.
	batch, err := example.Settled(ctx, 2, func(ctx context.Context) ([]store.Event, error) {
		return events.ReadFromConsumer(ctx, "mailer", 2)
	})
	if err != nil {
		return err
	}
	for _, ev := range batch {
		fmt.Printf("mailer got offset %d key=%s payload=%q\n", ev.Offset, *ev.Key, ev.Payload)
	}
	if err := events.SaveOffset(ctx, "mailer", batch[len(batch)-1].Offset); err != nil {
		return err
	}
	saved, err := events.Offset(ctx, "mailer")
	if err != nil {
		return err
	}
	fmt.Printf("mailer saved offset %d\n", saved)

	// Resuming from the saved offset yields only what is left.
	rest, err := example.Settled(ctx, 1, func(ctx context.Context) ([]store.Event, error) {
		return events.ReadFromConsumer(ctx, "mailer", 10)
	})
	if err != nil {
		return err
	}
	for _, ev := range rest {
		fmt.Printf("mailer resumed at offset %d key=%s\n", ev.Offset, *ev.Key)
	}
	fmt.Printf("done: %d published, %d read before the save, %d after\n", 3, len(batch), len(rest))
	return nil
}
