// Command alkstore operates an alkstore database without writing Go:
// migrations, stats, streams, queues, schedules, notifications and the web
// console (alkstore ui). The DSN comes from --dsn, else ALKSTORE_DSN, else
// DATABASE_URL, in any form store.Open takes: an SQLite path, sqlite:path or
// file: URI, or a postgres:// URL or key=value DSN.
//
// Exit codes: 0 success, 1 failure, 2 bad input, 3 not found.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
	"github.com/alkstore/alkstore/store"
)

// Exit codes.
const (
	exitFailure  = 1
	exitBadInput = 2
	exitNotFound = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string) int {
	root, a := newRoot()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if cerr := a.close(); err == nil {
		err = cerr
	}
	if err == nil {
		return 0
	}
	msg := err.Error()
	if d, derr := a.resolveDSN(); derr == nil {
		// The store scrubs its own errors; this covers every other path
		// (migrate's database/sql handle) with the same secrets.
		msg = dsnform.Scrub(msg, dsnform.Secrets(d))
	}
	if !strings.HasPrefix(msg, "alkstore: ") {
		msg = "alkstore: " + msg
	}
	fmt.Fprintln(os.Stderr, msg)
	return exitCode(err)
}

// usageError marks bad input found by the command itself.
type usageError struct{ error }

func badInput(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func exitCode(err error) int {
	var ue usageError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return exitNotFound
	case errors.As(err, &ue), errors.Is(err, store.ErrInvalidArgument), errors.Is(err, store.ErrInvalidName),
		errors.Is(err, store.ErrReservedName), errors.Is(err, store.ErrPayloadTooLarge), isCobraUsage(err):
		return exitBadInput
	}
	return exitFailure
}
