package store

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// On SQLite a transaction begun with Store.Begin holds the writer slot until
// it ends, so an auto-commit write (or another Begin) waits for it. Made on
// the goroutine that holds the transaction, it waits for itself until its
// context ends. InTx's ctx lets writerHeldBy refuse that at once; a Begin'd
// Tx carries no such mark, so the store names the transaction instead: a
// write that has waited writerWaitWarn behind it logs one warning per
// transaction, with where it was begun.

// writerWaitWarn is how long a write waits behind an open transaction
// before the store warns.
const writerWaitWarn = time.Second

// writerHold is an open transaction begun with Store.Begin, holding the
// writer slot.
type writerHold struct {
	// pcs is the stack that began it, read into its site (file:line of
	// the code that began it, outside package store) only for a warning:
	// every transaction on SQLite records one (InTx's, each WorkTx job's,
	// the application's), and reading file and line out of the stack each
	// time, for a warning that almost never comes, was half of an empty
	// InTx (callgrind, the client: 71.0k -> 37.5k instructions).
	pcs    [32]uintptr
	n      int
	since  time.Time
	warned atomic.Bool
	// by: the store's name for a transaction it began itself on a
	// goroutine of its own (a WorkTx handler's), whose stack holds no
	// caller outside the store; nil for the others.
	by *txSite
}

// txSite names a transaction the store began for a WorkTx handler of
// queue: a worker's handler contexts carry it (handlerValues, under
// txSiteKey), so that Begin, called with one, records it for free.
type txSite struct{ queue string }

type txSiteKey struct{}

// hold records that a Begin'd transaction took the writer slot (begun
// with ctx); the returned func releases the record when it ends.
func (e *liteEngine) hold(ctx context.Context) func() {
	h := &writerHold{since: time.Now()}
	h.n = runtime.Callers(2, h.pcs[:])
	h.by, _ = ctx.Value(txSiteKey{}).(*txSite)
	e.held.Store(h)
	return func() { e.held.CompareAndSwap(h, nil) }
}

// site is file:line of the code that began h's transaction, outside
// package store and the runtime; for one the store began on a goroutine
// of its own, which has no such caller (its stack ends in the runtime:
// the warning named runtime/asm_amd64.s, review54a F4), what it began
// it for.
func (h *writerHold) site() string {
	if s := callerOutsideStore(h.pcs[:h.n]); s != "" {
		return s
	}
	if h.by != nil {
		return "the store, for a WorkTx handler of queue " + strconv.Quote(h.by.queue) +
			" (its writes go in its Tx: one outside it waits for it)"
	}
	return "the store, on a goroutine of its own"
}

var noWatch = func() {}

// watchWriterSlot warns once when the write op on name is still waiting
// after writerWaitWarn behind a Begin'd transaction that was open when it
// started; the returned func ends the watch. Nothing is armed when no such
// transaction is open (every write's common case), nor on Postgres.
func (s *Store) watchWriterSlot(op, name string) func() {
	e, ok := s.eng.(*liteEngine)
	if !ok {
		return noWatch
	}
	h := e.held.Load()
	if h == nil {
		return noWatch
	}
	t := time.AfterFunc(writerWaitWarn, func() {
		if e.held.Load() == h && h.warned.CompareAndSwap(false, true) {
			s.log.Warn("alkstore: a write has waited for SQLite's writer slot, which an open transaction holds; "+
				"if the goroutine that began it made this write, it waits for itself until its context ends: "+
				"use the Tx forms (EnqueueTx, PublishTx, ...) inside the transaction, or end it first",
				"op", op, "name", name, "waited", writerWaitWarn, "tx_begun_at", h.site(),
				"tx_open_for", time.Since(h.since).Round(time.Millisecond))
		}
	})
	return func() { t.Stop() }
}

// callerOutsideStore is file:line of the first caller outside this package
// on the stack pcs (runtime.Callers's), or "" when there is none but the
// runtime's (a goroutine the store started: runtime.goexit).
func callerOutsideStore(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "github.com/alkstore/alkstore/store.") &&
			!strings.HasPrefix(f.Function, "runtime.") {
			return f.File + ":" + strconv.Itoa(f.Line)
		}
		if !more {
			return ""
		}
	}
}
