package store

import (
	"math"
	"sync"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// horizon tracks the settled horizon of Postgres streams: an offset at or
// below which every event is either committed or permanently gone, so a
// reader that stops there never skips an event that commits later. See
// docs/design/stream-horizon.md for the argument.
//
// A candidate (head, next) pairs the newest offset a snapshot saw with the
// next unassigned transaction id, read after that snapshot. Every
// transaction that could still own an offset <= head took its id before
// drawing that offset, so its id is < next; once a later snapshot's xmin
// reaches next, all of them have ended and head is settled.
type horizon struct {
	mu      sync.Mutex
	settled candidate   // the newest candidate proven settled
	pending []candidate // ascending in head
}

type candidate struct{ head, next int64 }

// maxPending bounds the candidates kept while a long transaction holds the
// horizon back; dropping newer ones only delays the horizon.
const maxPending = 64

// observe folds one snapshot in and returns the horizon that reads in that
// snapshot (or any later one) may use. learn is false for snapshots taken
// inside a caller's transaction: those may be older than the newest settled
// candidate (REPEATABLE READ), and a transaction with an id of its own
// cannot read the next unassigned id (age() measures from its own id), so
// they only consult candidates their xmin proves and record nothing.
func (h *horizon) observe(snap pgdb.SettledSnapshotRow, learn bool) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()

	best := candidate{}
	proven := func(c candidate) {
		if c.next <= snap.Xmin && c.head >= best.head {
			best = c
		}
	}
	proven(h.settled)
	for _, c := range h.pending {
		proven(c)
	}
	// age() answers INT_MAX for the special ids around an epoch boundary;
	// such a snapshot yields no candidate.
	fresh := candidate{head: snap.VisibleHead, next: snap.Xmax + snap.XmaxAge}
	freshOK := learn && snap.XmaxAge >= 0 && snap.XmaxAge < math.MaxInt32
	if freshOK {
		proven(fresh) // nothing that could own an offset <= head still runs
	}
	if !learn {
		return best.head
	}

	if best.head > h.settled.head || (best.head == h.settled.head && best.next > h.settled.next) {
		h.settled = best
	}
	kept := h.pending[:0]
	for _, c := range h.pending {
		if c.head > h.settled.head {
			kept = append(kept, c)
		}
	}
	h.pending = kept
	if freshOK && fresh.head > h.settled.head && len(h.pending) < maxPending &&
		(len(h.pending) == 0 || fresh.head > h.pending[len(h.pending)-1].head) {
		h.pending = append(h.pending, fresh)
	}
	return best.head
}
