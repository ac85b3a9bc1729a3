package store

import (
	"context"
	"errors"
	"time"
)

// The store's own statements that must outlive their caller's context (a
// finished job's ack, a stop's release, a claim, a group member's leave, a
// scheduler's resignation) run with a settle context: the values of the
// context they serve, without its end, but ended when the store gives
// them up. Without an end of any kind, such a statement sent to a server
// that stopped answering while keeping its sockets open (a frozen host, a
// partition without resets, a black-holed old primary) waited for ever:
// pgx cuts a statement short only when its context ends (the cancel
// request the hard stop sends goes to the same frozen server), so Work
// and Consume never returned, and Shutdown's hard stop waited for them
// and for its cancel requests far past its bound (attack60b F0).
//
// Only on PostgreSQL (lifecycle.settlesEnd), whose statements wait for a
// server that may not answer: SQLite's run in the process and end within
// its busy timeout, and its driver watches a context that can end at a
// cost a statement, so its settle contexts stay without an end.
//
// The hard stop gives them up once it stopped waiting for the loops
// (hardStopWait plus abandonSettleWait after it began): a settle still
// running then fails, its job runs again once its claim lapses, as for any
// failed ack, and the loop returns. On a server that answers, they ended
// long before.

// errSettlesGivenUp is the cause of a settle context the hard stop ended.
// A statement given up may still be carried out by a server that was only
// slow (review60b F2): the job of an ack given up runs again only if not.
var errSettlesGivenUp = errors.New("the hard stop gave up the store's statements the database had not answered (settles, claims, leaves); a finished job whose ack the database does not carry out after all runs again once its claim lapses")

// giveUpWait is how long Shutdown waits for the loops once it gave their
// settles up: a statement whose context ended returns at once (pgx closes
// its connection), so this is a margin, not a wait for the server.
const giveUpWait = time.Second

// giveUpKey is the key under which a settle context answers its base, so
// that code which has a context but not the store keeps a settle
// context's end (uninterrupted).
type giveUpKey struct{}

// settleContext has the values of values and the end of base, a cancel
// context of the store's (settleBase): contexts derived from it attach to
// base as to any cancel context, without a goroutine of their own, since
// it answers the context package's own key with base.
type settleContext struct {
	values context.Context
	base   context.Context
}

func (*settleContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *settleContext) Done() <-chan struct{}     { return c.base.Done() }
func (c *settleContext) Err() error                { return c.base.Err() }

// Value is base's cancel context for the context package's key (base has
// no other values: it descends from context.Background), and values'
// value for every other key.
func (c *settleContext) Value(key any) any {
	if _, ok := key.(giveUpKey); ok {
		return c.base
	}
	if x := c.base.Value(key); x != nil {
		return x
	}
	return c.values.Value(key)
}

// settleBase is the cancel context the settles run for ctx end with: the
// store's, which only the hard stop ends. A loop's stop ends none: a
// bound counted from it gave up a healthy server's ack waiting for a pool
// connection or a row lock (review60b F0, F2).
func (l *lifecycle) settleBase(context.Context) context.Context { return l.giveUp }

// settleCtx is ctx without its end, for the store's own statements that
// must run once the caller's work is done, ended when the store gives
// them up.
func (l *lifecycle) settleCtx(ctx context.Context) context.Context {
	if !l.settlesEnd {
		return context.WithoutCancel(ctx)
	}
	return &settleContext{values: ctx, base: l.settleBase(ctx)}
}

// uninterrupted is settleCtx for code that has a context but not the
// store: a settle context's end when ctx is one (or derived from one),
// else none (context.WithoutCancel).
func uninterrupted(ctx context.Context) context.Context {
	if b, ok := ctx.Value(giveUpKey{}).(context.Context); ok {
		return &settleContext{values: ctx, base: b}
	}
	return context.WithoutCancel(ctx)
}

// giveUpSettles ends every settle context of the store.
func (l *lifecycle) giveUpSettles() { l.giveUpNow(errSettlesGivenUp) }
