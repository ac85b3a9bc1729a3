package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Receivers held back by the settled horizon (PostgreSQL): a read stops
// below committed events while a transaction that may own a lower offset
// runs, anywhere on the server. Nothing wakes a receiver when that
// transaction ends unless it published itself: a rollback, a transaction
// that wrote no event, or a killed session announce nothing. So a read
// reports whether it was held back (heldReport), and a held receiver
// re-reads on a short backoff, doubling from heldRecheckMin to
// heldRecheckMax, until the horizon passes what it saw; a Tx of this store
// that ends wakes held receivers at once (horizonRelease).

const (
	heldRecheckMin = time.Millisecond
	heldRecheckMax = time.Second
)

// nextRecheck is the wait before a held receiver's next read: the first
// after heldRecheckMin, each later one twice the last, at most
// heldRecheckMax.
func nextRecheck(last time.Duration) time.Duration {
	return min(max(2*last, heldRecheckMin), heldRecheckMax)
}

type heldKey struct{}

// heldReport is where a read made with withHeldReport's ctx says whether
// the settled horizon stopped it below the newest committed event.
type heldReport struct{ held bool }

func withHeldReport(ctx context.Context) (context.Context, *heldReport) {
	h := &heldReport{}
	return context.WithValue(ctx, heldKey{}, h), h
}

// reportHeld is told, by a read outside a transaction, the horizon it used
// and the newest offset its snapshot saw.
func reportHeld(ctx context.Context, settled, head int64) {
	if h, ok := ctx.Value(heldKey{}).(*heldReport); ok {
		h.held = settled < head
	}
}

// horizonRelease wakes held receivers when a transaction of this store
// ends (it may have been what held them). A receiver takes the generation
// before its read and waits on after(gen), which is ready at once when a
// transaction ended since, so an end between the read and the wait is not
// missed.
type horizonRelease struct {
	gen atomic.Uint64
	mu  sync.Mutex
	ch  chan struct{} // closed by the next release; nil while no one waits
}

func (r *horizonRelease) generation() uint64 { return r.gen.Load() }

// after returns a channel closed once a transaction ends after gen.
func (r *horizonRelease) after(gen uint64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen.Load() != gen {
		return closedChan
	}
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// release runs when a transaction of the store ended (commit or rollback).
func (r *horizonRelease) release() {
	r.mu.Lock()
	r.gen.Add(1)
	ch := r.ch
	r.ch = nil
	r.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
