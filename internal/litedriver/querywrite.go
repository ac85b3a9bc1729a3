package litedriver

import (
	"context"
	"sync/atomic"
)

// QueryWrite returns the context to run one write outside a transaction
// (an INSERT, UPDATE or DELETE with RETURNING) with database/sql's
// QueryContext or QueryRowContext on a handle of this driver, in place of
// ctx: the wait for a connection and the write's changes (its first step)
// end with ctx, as with ctx itself, but once the statement began, database/sql
// no longer watches it.
//
// database/sql closes a query's rows from another goroutine the moment its
// context ends, and Next and Scan then report the context's error. For such
// a write the statement decides: its changes are made at its first step
// and committed at its last (see rows.watch), and an ended context makes
// the first step fail and store nothing. A close by database/sql after the
// first step reset the statement, which committed its changes, while the
// caller was told that the call failed: a retry wrote them twice. Without
// the watch the caller is told what the statement did.
//
// Use a new one for each statement: from the statement's start, database/sql
// reads it as a context that never ends (Done is nil), so any later wait
// made with it would not end with ctx.
func QueryWrite(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return &queryWriteCtx{Context: ctx}
}

type queryWriteCtx struct {
	context.Context
	begun atomic.Bool
}

func (c *queryWriteCtx) Done() <-chan struct{} {
	if c.begun.Load() {
		return nil
	}
	return c.Context.Done()
}

// unwatch tells ctx, when it is QueryWrite's, that its statement began.
func unwatch(ctx context.Context) {
	if c, ok := ctx.(*queryWriteCtx); ok {
		c.begun.Store(true)
	}
}
