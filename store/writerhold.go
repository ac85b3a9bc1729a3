package store

import (
	"context"
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
// to run (and those of its latest claims, which may still be on their
// way to either list: recentClaims), and of the jobs of its handlers that
// returned and whose settles have not (worker.settling), whose
// claims as claimed (runningJob.claimedTo, the job's ClaimExpiresAt) run
// out before end and a third of w's Visibility (the time left, once the
// writer is free, for a heartbeat, the job's own transaction or its
// settle to take it). Nothing of w is claimed while that transaction
// holds the writer. A job whose lock is held (a settle in flight, which
// may wait for the writer this transaction holds) is not waited for: its
// claim is the one its run began with (runningJob.token); one spent
// since changes nothing, revivals being fenced by token and state
// running. Before, such a job was found only among the worker's latest
// claims (recentClaims): a worker of Concurrency 8 that claimed its jobs
// one claim each, stopped beside a group member's hung handler, had the
// releases of its 4 oldest jobs refused once that handler's transaction
// was rolled back, the jobs left running with their attempts spent.
// Jobs handed to the batched ack (handlers that returned nil) are found
// only there (recentClaims).
//
// self is nil for a transaction of no job's (a group member's ConsumeTx:
// see Store.keepClaims).
func (w *worker) claimsToHold(self *runningJob, end time.Time, claims []claimRef) []claimRef {
	need := end.Add(w.opts.Visibility / 3)
	add := func(j *Job) {
		if token, ok := j.peekToken(); ok && token != 0 {
			claims = append(claims, claimRef{j.ID, token})
		}
	}
	addRun := func(r *runningJob) {
		if token, ok := r.job.peekToken(); !ok && r.token != 0 {
			claims = append(claims, claimRef{r.job.ID, r.token}) // a settle holds its lock
		} else if ok && token != 0 {
			claims = append(claims, claimRef{r.job.ID, token})
		}
	}
	w.mu.Lock()
	for r := w.first; r != nil; r = r.next {
		if (self == nil || r != self) && r.claimedTo.Before(need) {
			addRun(r)
		}
	}
	for r := range w.settling {
		if r.claimedTo.Before(need) {
			addRun(r)
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
	var selfID int64
	if self != nil {
		selfID = self.job.ID
	}
	return w.recent.hold(need, selfID, claims)
}

// keepClaims revives in tx, a group member's transaction on SQLite's
// writer (Store.inHandlerTx), the claims of the store's workers' jobs,
// running or claimed and about to run, that run out before a third of
// their worker's Visibility from now: they waited for the writer, where
// neither their heartbeats nor their own transactions could extend them,
// for as long as the member's handler ran (it has no Timeout to extend
// them by beforehand, as holdOthers does for a WorkTx handler). They are
// set to a Visibility (their worker's) from now, fenced by their tokens
// and state running only, lapsed or not, as settleAfresh revives them:
// nothing of this process could take them meanwhile (its writes wait for
// the writer this transaction holds), and a job another process took or
// that was settled has another token or state. Before it a plain Work
// handler running past its lease beside a member's handler was told its
// claim was lost and its job ended dead (attack57 F5: 3 of 3 runs). No
// statement runs when no claim needs it.
func (s *Store) keepClaims(ctx context.Context, tx Tx) error {
	held := s.claimsToKeep()
	if held == nil {
		return nil
	}
	return s.reviveHeldIn(ctx, tx, held)
}

// claimsToKeep lists, by worker, the claims keepClaims revives; nil when
// none needs it.
func (s *Store) claimsToKeep() []heldClaims {
	workers := s.holds.list()
	if len(workers) == 0 {
		return nil
	}
	now := s.now()
	var claims []claimRef
	var held []heldClaims
	for _, w := range workers {
		n := len(claims)
		if claims = w.claimsToHold(nil, now, claims); len(claims) > n {
			held = append(held, heldClaims{visibility: w.opts.Visibility, claims: claims[n:len(claims):len(claims)]})
		}
	}
	return held
}

// reviveHeldIn revives held in tx to a Visibility (each worker's) from
// now (Store.reviveHeld).
func (s *Store) reviveHeldIn(ctx context.Context, tx Tx, held []heldClaims) error {
	return run0(handle{s: s}, "heartbeat", tx.via(ctx), func(o target) error {
		h, ok := o.ops.(claimHolder)
		if !ok {
			return nil
		}
		_, err := s.reviveHeld(ctx, h, held)
		return err
	})
}

// recentClaims is a SQLite worker's record of its latest claims (their
// token, jobs and lease), written by each claim inside its transaction
// once it stamped its jobs (claimReq.recent). From its commit to the
// moment its jobs are listed in the worker (handed to the run queue, then
// enlisted as running), they were in neither list that claimsToHold
// walks, and a transactional handler taking the writer as the claim
// committed left them to lapse (the two-worker test lost one in its first
// round that way). A few claims are kept, so that a job on its way from
// the run queue to its run is still found; extending a job that was
// settled since changes nothing (HeartbeatJobs is fenced by the claim's
// token and state). One lock a claim, not a job.
type recentClaims struct {
	mu     sync.Mutex
	next   int
	claims [recentClaimsKept]recentClaim
}

// recentClaimsKept is how many of a worker's latest claims recentClaims
// keeps.
const recentClaimsKept = 4

type recentClaim struct {
	token   int64
	first   int64   // the job of a claim of one (ids nil)
	ids     []int64 // the claim's jobs, when more than one
	expires time.Time
}

// record notes a claim: token, its jobs (first alone, or ids), and when
// its lease runs out.
func (c *recentClaims) record(token, first int64, ids []int64, expires time.Time) {
	c.mu.Lock()
	c.claims[c.next] = recentClaim{token: token, first: first, ids: ids, expires: expires}
	c.next = (c.next + 1) % recentClaimsKept
	c.mu.Unlock()
}

// hold appends the claims of the recorded claims whose lease runs out
// before need, but self's (the holder's own job, extended and settled in
// its transaction).
func (c *recentClaims) hold(need time.Time, self int64, claims []claimRef) []claimRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.claims {
		if r.token == 0 || !r.expires.Before(need) {
			continue
		}
		if r.ids == nil {
			if r.first != self {
				claims = append(claims, claimRef{r.first, r.token})
			}
			continue
		}
		for _, id := range r.ids {
			if id != self {
				claims = append(claims, claimRef{id, r.token})
			}
		}
	}
	return claims
}
