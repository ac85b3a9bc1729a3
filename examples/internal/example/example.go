// Package example is what every runnable example does around its own code:
// pick the database and report a failure.
package example

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/alkstore/alkstore/store"
)

// Main runs run on the database named by the first argument (a SQLite path or
// a postgres:// URL), or on a fresh SQLite file in a temporary directory that
// is removed afterwards, and exits non-zero if run fails.
func Main(run func(ctx context.Context, dsn string) error) {
	log.SetFlags(0)
	if len(os.Args) > 1 {
		if err := run(context.Background(), os.Args[1]); err != nil {
			log.Fatal(err)
		}
		return
	}
	dir, err := os.MkdirTemp("", "alkstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	err = run(context.Background(), filepath.Join(dir, "app.db"))
	os.RemoveAll(dir)
	if err != nil {
		log.Fatal(err)
	}
}

// Settled reads until read returns at least n events, and returns them. On
// PostgreSQL a read made right after a commit may stop below it while other
// transactions (of any stream, in any process) that took lower offsets are
// still open: reads stop at the settled horizon (README, "Streams"), which
// passes the commit a moment later. It gives up after ten seconds.
func Settled(ctx context.Context, n int, read func(ctx context.Context) ([]store.Event, error)) ([]store.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		evs, err := read(ctx)
		if err != nil || len(evs) >= n {
			return evs, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d events readable: %w", len(evs), n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
