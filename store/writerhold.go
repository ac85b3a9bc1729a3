package store

import (
	"sync"
	"time"
)

// writerHolds is a SQLite store's registry of its running workers (Work
// and WorkTx, every queue's), for a transactional handler's transaction,
// which holds the only writer, to extend the claims of their jobs waiting
// for it meanwhile (runner.holdOthers): their heartbeats, their own
// transactions' extensions and their acks all need the writer. It held
// only its own worker's: the jobs of a second queue's WorkTx worker (a
// Client's HandleTx on two queues runs one worker each) or the running
// handlers of a plain Work worker lapsed while a handler held the writer
// past what was left of their leases, and each ended dead without its
// handler running, or was run again (attack56a F1: 1-2 jobs of 6, 4 of 4
// runs). A worker is added once as it starts and removed as it returns
// (not per job); only a transactional handler on SQLite walks it.
type writerHolds struct {
	mu      sync.Mutex
	workers []*worker
}

// add registers w until remove.
func (h *writerHolds) add(w *worker) {
	h.mu.Lock()
	h.workers = append(h.workers, w)
	h.mu.Unlock()
}

// remove forgets w: the claims of the handlers Work left behind are no
// longer extended (they come back a Visibility after the last commit
// that held them).
func (h *writerHolds) remove(w *worker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.workers {
		if x == w {
			last := len(h.workers) - 1
			h.workers[i] = h.workers[last]
			h.workers[last] = nil
			h.workers = h.workers[:last]
			return
		}
	}
}

// list returns the registered workers (a copy: their claims are listed
// outside h.mu, under each worker's own locks).
func (h *writerHolds) list() []*worker {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.workers) == 0 {
		return nil
	}
	return append([]*worker(nil), h.workers...)
}

// heldClaims are claims of one worker's jobs a transactional handler's
// transaction extended while it holds SQLite's writer (holdOthers), and
// that worker's Visibility, which releaseOthers sets them back to from its
// commit.
type heldClaims struct {
	visibility time.Duration
	claims     []claimRef
}

// claimsToHold appends to claims, for the transaction of self's handler on
// SQLite's writer (see runner.holdOthers), which may hold it until end,
// the claims of w's jobs other than self's, running or claimed and about
// to run, whose claims as claimed (runningJob.claimedTo, the job's
// ClaimExpiresAt) run out before end and a third of w's Visibility (the
// time left, once the writer is free, for a heartbeat or the job's own
// transaction to take it). Nothing of w is claimed while that transaction
// holds the writer. A claim whose settle is in flight (its job's lock
// held) is left out: the settle may wait for the writer this transaction
// holds.
func (w *worker) claimsToHold(self *runningJob, end time.Time, claims []claimRef) []claimRef {
	need := end.Add(w.opts.Visibility / 3)
	add := func(j *Job) {
		if token, ok := j.peekToken(); ok && token != 0 {
			claims = append(claims, claimRef{j.ID, token})
		}
	}
	w.mu.Lock()
	for r := w.first; r != nil; r = r.next {
		if r != self && r.claimedTo.Before(need) {
			add(r.job)
		}
	}
	w.mu.Unlock()
	w.runMu.Lock()
	for _, j := range w.queue {
		if j.ClaimExpiresAt != nil && j.ClaimExpiresAt.Before(need) {
			add(j)
		}
	}
	w.runMu.Unlock()
	return claims
}
