package store

import (
	"sync"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// horizon tracks the settled horizon of Postgres streams: an offset at or
// below which every event is either committed or permanently gone, so a
// reader that stops there never skips an event that commits later. See
// docs/design/stream-horizon.md for the argument.
//
// A candidate (head, xmax) pairs the newest offset a snapshot saw with that
// snapshot's xmax. Every transaction that could still own an offset <= head
// has a transaction id < xmax (publishers take their id before drawing an
// offset), so once a later snapshot's xmin reaches xmax all of them have
// ended and head is settled.
type horizon struct {
	mu      sync.Mutex
	settled candidate   // the newest candidate proven settled
	pending []candidate // ascending in head and in xmax
}

type candidate struct{ head, xmax int64 }

// maxPending bounds the candidates kept while a long transaction holds the
// horizon back; dropping newer ones only delays the horizon.
const maxPending = 64

// observe folds one snapshot in and returns the horizon that reads in that
// snapshot (or any later one) may use. learn is false for snapshots taken
// inside a caller's transaction: those may be older than the newest
// settled candidate (REPEATABLE READ), so they only consult the candidates
// their own xmin proves, and never record what they see.
func (h *horizon) observe(snap pgdb.SettledSnapshotRow, learn bool) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()

	var best int64
	if h.settled.xmax <= snap.Xmin {
		best = h.settled.head
	}
	n := 0
	for n < len(h.pending) && h.pending[n].xmax <= snap.Xmin {
		n++
	}
	if n > 0 {
		best = max(best, h.pending[n-1].head)
	}
	quiet := snap.Xmin == snap.Xmax // no transaction is running at all
	if quiet {
		best = max(best, snap.VisibleHead)
	}
	if !learn {
		return best
	}

	switch {
	case quiet:
		h.settled = candidate{head: best, xmax: snap.Xmax}
		h.pending = h.pending[:0]
	case n > 0:
		h.settled = candidate{head: best, xmax: h.pending[n-1].xmax}
		h.pending = append(h.pending[:0], h.pending[n:]...)
	}
	if !quiet && snap.VisibleHead > best && len(h.pending) < maxPending &&
		(len(h.pending) == 0 || snap.VisibleHead > h.pending[len(h.pending)-1].head) {
		h.pending = append(h.pending, candidate{head: snap.VisibleHead, xmax: snap.Xmax})
	}
	return best
}
