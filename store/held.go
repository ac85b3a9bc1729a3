package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Receivers held back by the settled horizon (PostgreSQL): a read stops
// below committed events while a write transaction runs, anywhere on the
// server, that no candidate the store learned shows to have begun after
// them (it may own a lower offset; it may also own only higher ones). A
// Tx this store began shows it at its first publish (pgOps.offer): what
// the store knew drawn before the Tx began settles once the transactions
// older than the Tx end, while the Tx still runs. Other transactions (an
// adopted one, a Tx that never publishes, another process's) hold such
// events until they end. Nothing wakes a receiver when that
// transaction ends unless it published itself: a rollback, a transaction
// that wrote no event, or a killed session announce nothing. So a read
// reports whether it was held back (heldReport), and a held receiver
// re-reads on a short backoff, doubling from heldRecheckMin to
// heldRecheckMax, until the horizon passes what it saw; a Tx of this store
// that ends, or offers its candidate, wakes held receivers at once
// (horizonRelease).

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
// ends that may have been what held them: one that began before the hold
// was seen. A transaction that began after a receiver's read cannot own an
// offset below what that read's snapshot saw, nor hold back its xmin, so
// its end is no news to that receiver; waking every held receiver at every
// end made an application's unrelated transactions run 20-30x slower while
// another connection held the horizon (week 33's review).
//
// Each owned Tx takes a begin number (begin) before its BEGIN. A receiver
// takes a mark before each read; a held run of reads (held, none
// delivering) waits with the begin number of its first read's mark (the
// run's hold), which after registers as the newest hold. An end wakes the
// waiters when its begin number is at most the newest hold. The first read
// of a run is not registered before it, so an end of any transaction
// between its mark and its wait makes the wait ready at once (a re-read,
// once per run); later reads of the run are covered by the hold already
// registered, through the generation of wakes. A transaction that begins
// during a run, whose end the run then ignores, is waited for on the
// recheck backoff (at most heldRecheckMax) should it become the holder.
type horizonRelease struct {
	begins atomic.Uint64 // begin numbers handed out
	mu     sync.Mutex
	gen    atomic.Uint64 // ends that woke the waiters (changed under mu)
	ends   atomic.Uint64 // every end (changed under mu)
	hold   uint64        // the newest hold registered by after
	ch     chan struct{} // closed by the next wake; nil while no one waits
}

// heldMark is what a receiver takes before a read.
type heldMark struct{ gen, ends, begins uint64 }

func (r *horizonRelease) mark() heldMark {
	// The ends before the begins: an end not counted in ends came after
	// the read began, and one counted came before it, when the
	// transaction could hold nothing the read sees.
	m := heldMark{gen: r.gen.Load(), ends: r.ends.Load()}
	m.begins = r.begins.Load()
	return m
}

// begin returns the begin number of a transaction about to begin.
func (r *horizonRelease) begin() uint64 { return r.begins.Add(1) }

// after returns a channel closed once a transaction that may hold a run
// whose hold is hold ends after m was taken (ready at once if one did).
// first: m is the mark of the run's first read, so hold was not yet
// registered when that read ran.
func (r *horizonRelease) after(m heldMark, hold uint64, first bool) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = max(r.hold, hold)
	if r.gen.Load() != m.gen || (first && r.ends.Load() != m.ends) {
		return closedChan
	}
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// release runs when a transaction of the store with begin number begin
// ended (commit or rollback), or offered a horizon candidate at its first
// publish (pgOps.offer), which may settle what it held back as its end
// would.
func (r *horizonRelease) release(begin uint64) {
	r.mu.Lock()
	r.ends.Add(1)
	var ch chan struct{}
	if begin <= r.hold {
		r.gen.Add(1)
		ch, r.ch = r.ch, nil
	}
	r.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// heldRun follows a reader's runs of held reads: after each read, track
// returns the hold to wait with and whether the read began a run. A read
// not held ends the run; restart (the read delivered events: the horizon
// moved) begins a new one.
type heldRun struct {
	in   bool   // the last read was held
	hold uint64 // the run's hold: the begin number in its first read's mark
}

func (h *heldRun) track(m heldMark, held, restart bool) (hold uint64, first bool) {
	if !held {
		h.in = false
		return 0, false
	}
	if !h.in || restart {
		h.in, h.hold, first = true, m.begins, true
	}
	return h.hold, first
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
