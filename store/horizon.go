package store

import (
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

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
// drawing that offset, so its id is < next; in any snapshot whose xmin
// reaches next, all of them have ended and head is settled.
//
// A read may use the best candidate its own snapshot proves, so the tracker
// keeps a history: a REPEATABLE READ transaction's snapshot may be older
// than the proof of the newest candidate, and must find the newest one its
// xmin proves.
//
// Besides the snapshots' candidates, a Tx the store began offers one at its
// first publish (offer): the newest offset the store knew drawn before the
// Tx began, with the Tx's own transaction id as next. Every transaction
// that could own an offset <= that head drew it before the head was drawn,
// so it took its id before the Tx took its own, which is therefore a next
// for that head: the candidate settles in a snapshot whose xmin is the
// Tx's id, that is while the Tx itself still runs, once every transaction
// older than it has ended. Without it, an event committed just before the
// Tx took its id, with no read between, waited for the Tx's end (the stop
// 35 review): every snapshot taken meanwhile has an xmin at most the Tx's
// id and a next above it.
type horizon struct {
	mu sync.Mutex
	// cands holds no candidate another makes useless (one with a next no
	// greater and a head no smaller), so it ascends in next and in head.
	cands []candidate
	// xmin is the newest xmin observed: candidates with next <= xmin are
	// settled for every later snapshot; the others are pending.
	xmin int64
	// drawn is the newest offset the store knows was drawn: offsets its
	// publishes returned and heads its snapshots saw. A Tx reads it when it
	// begins (pgEngine.begin), as the head of the candidate it offers.
	drawn atomic.Int64
	// proven is the head of the newest candidate proven settled (next <=
	// xmin), and stored the greatest head the store knows the database's
	// settled_candidate row holds (it wrote it, or a read returned it):
	// when proven passes stored, the store writes its candidate there for
	// stores that have never read (persister, step 6 of the design).
	proven, stored atomic.Int64
}

type candidate struct {
	head, next int64
	offered    bool // by a Tx (offer), not learned from a snapshot
}

// saw records that offset off was drawn (a publish returned it, or a
// snapshot saw it committed).
func (h *horizon) saw(off int64) { atomicMax(&h.drawn, off) }

// atomicMax raises a to v unless it is at least v already.
func atomicMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// offer adds the candidate of a Tx the store began (see horizon): head is
// drawn as the Tx began, before it could take its id, and next the id. It
// says whether the candidate was kept (no kept one made it useless), so
// held readers have something new to read with.
func (h *horizon) offer(head, next int64) bool {
	if head <= 0 || next <= 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.add(candidate{head: head, next: next, offered: true})
}

// Bounds on the candidates kept. Pending ones beyond maxPending (while a
// long transaction holds the horizon back) are thinned, the newest kept,
// which only delays the horizon. Settled ones beyond maxSettled are thinned,
// older ones more (every thinning halves those older than the newest), so
// the history reaches far back at a coarser grain: an old snapshot may then
// use an older candidate than the best it could prove, never a wrong one.
const (
	maxPending = 64
	maxSettled = 64
	maxOffers  = 16 // pending offers a thinning keeps, the newest
)

// observe folds one snapshot in and returns the horizon that reads in that
// snapshot may use: the newest head among the candidates its xmin proves.
// learn says whether its candidate may be recorded: whether xmax +
// age(xmax) is the next unassigned transaction id as of a moment after the
// snapshot (see pgOps.mayLearn; not so in a transaction holding an id).
func (h *horizon) observe(snap pgdb.SettledSnapshotRow, learn bool) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()

	// age() answers INT_MAX for the special ids around an epoch boundary;
	// such a snapshot yields no candidate.
	h.saw(snap.VisibleHead)
	fresh := candidate{head: snap.VisibleHead, next: snap.Xmax + snap.XmaxAge}
	if learn && snap.XmaxAge >= 0 && snap.XmaxAge < math.MaxInt32 {
		h.xmin = max(h.xmin, snap.Xmin)
		h.add(fresh)
	}
	// The candidate some store proved and stored (settled_candidate): every
	// transaction with an id below its next had ended when it was proven,
	// so every later snapshot's xmin reaches next. The row is visible in
	// this snapshot, so it was proven before it: the test below always
	// holds, except for a row from another cluster (a restored dump),
	// which is ignored.
	h.adoptLocked(snap.ProvenHead, snap.ProvenNext, snap.Xmin)
	if j := sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > h.xmin }); j > 0 {
		atomicMax(&h.proven, h.cands[j-1].head)
	}
	// The last candidate with next <= xmin has the greatest head of those.
	i := sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > snap.Xmin })
	if i == 0 {
		return 0
	}
	return h.cands[i-1].head
}

// adopt adds the candidate some store proved and stored
// (settled_candidate), read in a snapshot whose xmin is xmin, and returns
// the newest head proven settled for every later snapshot.
func (h *horizon) adopt(head, next, xmin int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.adoptLocked(head, next, xmin)
	j := sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > h.xmin })
	if j == 0 {
		return 0
	}
	atomicMax(&h.proven, h.cands[j-1].head)
	return h.cands[j-1].head
}

func (h *horizon) adoptLocked(head, next, xmin int64) {
	if next > 0 && head > 0 && next <= xmin {
		h.xmin = max(h.xmin, next)
		h.saw(head)
		h.add(candidate{head: head, next: next})
		atomicMax(&h.stored, head)
	}
}

// newestProven returns the newest candidate proven settled, if any.
func (h *horizon) newestProven() (candidate, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > h.xmin })
	if j == 0 {
		return candidate{}, false
	}
	return h.cands[j-1], true
}

// proof returns what a statement that computes its horizon in the server
// needs (ReadEvents): floor, a head that statement's snapshot proves
// already, and the other candidates, as parallel slices. Outside a
// transaction floor is the best settled candidate's head: a snapshot taken
// later has an xmin no smaller than any seen (the oldest transaction
// running only moves forward, and new ones take greater ids), so only the
// pending candidates are sent. all (a transaction's snapshot, which may be
// older, or held back by its own id) sends every candidate, floor 0.
func (h *horizon) proof(all bool) (floor int64, nexts, heads []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := 0
	if !all {
		from = sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > h.xmin })
		if from > 0 {
			floor = h.cands[from-1].head
		}
	}
	nexts = make([]int64, len(h.cands)-from)
	heads = make([]int64, len(h.cands)-from)
	for i, c := range h.cands[from:] {
		nexts[i], heads[i] = c.next, c.head
	}
	return floor, nexts, heads
}

// add records c unless a kept candidate is at least as good, drops those c
// is at least as good as, and keeps the bounds; it says whether c was
// recorded.
func (h *horizon) add(c candidate) bool {
	// cands[:i] have next <= c.next, the last of them the greatest head.
	i := sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > c.next })
	if i > 0 && h.cands[i-1].head >= c.head {
		return false
	}
	lo := i // same next, smaller head: c is better
	for lo > 0 && h.cands[lo-1].next == c.next {
		lo--
	}
	hi := i // greater next, head no greater: c is better
	for hi < len(h.cands) && h.cands[hi].head <= c.head {
		hi++
	}
	h.cands = slices.Replace(h.cands, lo, hi, c)

	settled := sort.Search(len(h.cands), func(i int) bool { return h.cands[i].next > h.xmin })
	if pending := len(h.cands) - settled; pending > maxPending {
		// Keep every second of the older pending candidates, the newest,
		// and the newest maxOffers offers. Dropping the newest instead
		// threw away every candidate a long transaction's hold brought, a
		// Tx's offer among them, so an event the offer would have settled
		// waited for that Tx's end too (stop 36 review). An offer's next is
		// the id of a Tx that may still run: once the long transaction
		// ends, xmin stops at the oldest such Tx, and only an offer settles
		// there.
		floor, n := len(h.cands), 0 // the oldest protected offer's index
		for j := len(h.cands) - 1; j >= settled && n < maxOffers; j-- {
			if h.cands[j].offered {
				floor, n = j, n+1
			}
		}
		kept := h.cands[:settled]
		last := len(h.cands) - 1
		for j := settled; j <= last; j++ {
			if (j-settled)%2 == 0 || j == last || (j >= floor && h.cands[j].offered) {
				kept = append(kept, h.cands[j])
			}
		}
		h.cands = kept
	}
	if settled > maxSettled {
		// Keep every second of the older settled candidates and the newest.
		kept := h.cands[:0]
		for j := 0; j < settled-1; j += 2 {
			kept = append(kept, h.cands[j])
		}
		h.cands = append(kept, h.cands[settled-1:]...)
	}
	return true
}
