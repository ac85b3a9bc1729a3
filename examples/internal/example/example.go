// Package example is what every runnable example does around its own code:
// pick the database and report a failure.
package example

import (
	"context"
	"log"
	"os"
	"path/filepath"
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
