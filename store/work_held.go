package store

import (
	"context"
	"sync"
	"time"
)

// heldAcks acks, apart from a PostgreSQL worker's ack loop, the finished
// jobs whose rows another transaction held when their batch's ack ran
// (the application's CancelTx, or any statement on the finished job, in a
// transaction still open): AckJobs and CompleteJobs skipped them (SKIP
// LOCKED), so that a held row holds up neither the batch's other jobs nor
// the worker's later batches (attack56a F2: the ack loop waited on the
// lock, the finished jobs behind it were no longer heartbeat, their leases
// ran out, and they were claimed and run again, 1-3 extra runs each).
//
// The jobs held are acked by a statement that waits for their rows'
// locks (CompleteLockedJobs, see ackLocked): one for all the jobs held
// when it starts, which it does only with room for it (below); the jobs
// handed over while there is none join the next. A lock wait that fails
// (lock_timeout) fails the jobs of that statement once, as the batch's
// single statement did before. The claims are fenced at the time the
// statement began, while their leases held; while it waits, PostgreSQL
// has it hold the rows' tuple locks, so no claim (SKIP LOCKED) takes the
// jobs meanwhile: when the holder rolls back the jobs are acked, when it
// committed a Cancel (or a settle) their claims are found gone.
// The wait parks a pooled connection, so it starts only with room for it
// (reserveLockWait, as a heartbeat's lock wait: a quarter of the pool, at
// least one, for the store's lock waits).
//
// The jobs not in such a statement (there was no room for one) are acked
// again, by the batch's skipping statements, every tenth of Visibility
// (10 ms to 1 s): those whose rows are free then are acked, those whose
// leases ran out meanwhile are lost (they run again, as a heartbeat's
// claim whose row stayed held), the others wait for room again.
//
// Bounded: the jobs held here count with the ack loop's batch (room), so
// the finished jobs not yet acked stay within ten rounds of Concurrency in
// the ack queue and as many in the ack loop or here, as when one stuck
// AckMany held them.
type heldAcks struct {
	w       *worker
	skipper lockSkipper
	limit   int           // the jobs held here and the ack loop's batch, at most
	retry   time.Duration // between two acks of the jobs left aside

	mu      sync.Mutex
	pending []*Job    // held, not in a statement that waits
	n       int       // held: pending, and in statements that wait
	pollAt  time.Time // when pending is acked again (zero: none pending)
	started bool      // the loop runs
	closed  bool      // the ack loop ended: the loop ends once n is 0
	// giveUp ends the loop's context (set as it starts): the store's hard
	// stop gives up the statements that wait for rows, which it cancels
	// (see ackLocked).
	giveUp context.CancelFunc

	wake  chan struct{} // to the loop: pending grew, a statement that waited ended, closed
	freed chan struct{} // to the ack loop: n fell
	done  chan struct{} // the loop ended
}

func newHeldAcks(w *worker, s lockSkipper, limit int) *heldAcks {
	return &heldAcks{w: w, skipper: s, limit: limit,
		retry: min(max(w.opts.Visibility/10, 10*time.Millisecond), time.Second),
		wake:  make(chan struct{}, 1), freed: make(chan struct{}, 1), done: make(chan struct{})}
}

// room is how many jobs the ack loop may take into its next batch: every
// batch's when none is held here (maxAckBatch); otherwise what the jobs
// held here leave of limit, and the ack loop waits while they leave none,
// until a hard stop (see drain): the loop then takes every job its
// handlers finished, so that none of them waits to hand its job over.
func (h *heldAcks) room() int {
	for {
		h.mu.Lock()
		n := h.n
		h.mu.Unlock()
		switch {
		case n == 0:
			return maxAckBatch
		case n < h.limit:
			return h.limit - n
		}
		select {
		case <-h.freed:
		case <-h.w.q.s.life.hard:
			return maxAckBatch
		case <-h.w.handle.hard:
			return maxAckBatch
		}
	}
}

// add takes the runs of batch whose claims are locked (their rows held by
// another transaction when the batch's ack ran; see ackSkipping) and
// returns the others, for the ack loop to report.
func (h *heldAcks) add(ctx context.Context, batch []*Job, locked []claimRef) []*Job {
	var kept []*Job
	rest := splitLocked(batch, locked, &kept)
	h.mu.Lock()
	h.pending = append(h.pending, kept...)
	h.n += len(kept)
	if h.pollAt.IsZero() && len(kept) > 0 {
		h.pollAt = time.Now().Add(h.retry)
	}
	if !h.started {
		h.started = true
		// The loop may outlive Work (see drain): its statements end with
		// the store's settles (settleCtx), not with Work's context.
		lctx, giveUp := context.WithCancel(h.w.q.s.life.settleCtx(ctx))
		h.giveUp = giveUp
		go h.loop(lctx)
	}
	h.mu.Unlock()
	signal(h.wake)
	return rest
}

// drain ends the loop once every job held was acked or lost (the ack loop
// ended), and returns then, or heldAckStopWait into a hard stop, whichever
// comes first.
//
// A hard stop (the store's Shutdown, or Worker.Stop, whose context ended)
// waits no longer for them: a row another transaction holds may stay held
// for as long as that transaction runs, which the stop cannot end when it
// is not the store's (Worker.Stop ends none; an adopted transaction,
// another process's), and waited for, it held Run (and with it
// Worker.Stop and Shutdown) until then, or, for a job with no room to
// wait, until its lease ran out: a Visibility (review57). The loop goes
// on after Run returned, on its own, until each of them was acked (its
// row freed), found cancelled, or lost (its lease ran out while the row
// was held: it runs again), or the store closed (its statement then
// fails, or Shutdown cancels it, and the job runs again once its lease
// ran out): the stop makes none of them run again by itself, unless the
// store closes under them.
func (h *heldAcks) drain() {
	h.mu.Lock()
	h.closed = true
	started := h.started
	h.mu.Unlock()
	if !started {
		return
	}
	signal(h.wake)
	select {
	case <-h.done:
		return
	case <-h.w.q.s.life.hard:
	case <-h.w.handle.hard:
	}
	t := time.NewTimer(heldAckStopWait)
	defer t.Stop()
	select {
	case <-h.done:
		return
	case <-t.C:
	}
	h.mu.Lock()
	n := h.n
	h.mu.Unlock()
	if n > 0 {
		select {
		case <-h.w.q.s.life.hard:
			h.w.q.s.life.locksHeld.Store(true) // for Shutdown to say
			h.giveUp()
		default:
		}
		h.w.q.s.log.Warn("alkstore: the stop leaves the acks of finished jobs whose rows another transaction holds to end on their own (acked once it ends, unless their leases run out first)",
			"queue", h.w.q.name, "jobs", n)
	}
	h.outliveRun()
}

// outliveRun makes the loop, left running after a Worker.Stop's hard stop,
// one of the store's loops, so that the store's shutdown waits for its
// acks as for Work's own: a graceful Close until they end (before,
// review58a F4, Close returned and closed the store under a retry, and
// the finished jobs ran again), a hard Shutdown heldAckStopWait after its
// rollback freed the rows, then no longer (the store closes under the
// rest, which run again after their leases). Nothing to do when the
// store's own shutdown stopped Work: drain waited for those already.
func (h *heldAcks) outliveRun() {
	l := h.w.q.s.life
	leave, err := l.enterLoop()
	if err != nil {
		return
	}
	go func() {
		defer leave()
		select {
		case <-h.done:
			return
		case <-l.hard:
		}
		t := time.NewTimer(heldAckStopWait)
		defer t.Stop()
		select {
		case <-h.done:
		case <-t.C:
			l.locksHeld.Store(true) // for Shutdown to say
			h.giveUp()
		}
	}()
}

// heldAckStopWait is how long a hard stop still waits for the acks of
// jobs held apart (see drain): long enough for those whose rows the stop
// frees itself (Shutdown rolls back the application's transactions at
// once) to be acked before Run returns and the store closes under their
// statements, short enough to leave Run well inside the 5 s that
// Worker.Stop and Shutdown give it (hardStopWait), after a handler that
// ignored its cancelled context too (hardStopWait + abandonSettleWait).
const heldAckStopWait = time.Second

// loop starts a statement that waits for the rows of the jobs pending when
// there is room for it, and acks them again when their time comes.
func (h *heldAcks) loop(ctx context.Context) {
	defer close(h.done)
	defer h.giveUp() // nothing left to give up
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		h.mu.Lock()
		if h.n == 0 && h.closed {
			h.mu.Unlock()
			return
		}
		if len(h.pending) > 0 {
			if release, err := h.skipper.reserveLockWait(); err == nil {
				group := h.pending
				h.pending, h.pollAt = nil, time.Time{}
				go h.await(ctx, group, release)
			}
		}
		pollAt := h.pollAt
		h.mu.Unlock()
		var poll <-chan time.Time
		if !pollAt.IsZero() {
			t.Reset(time.Until(pollAt))
			poll = t.C
		}
		select {
		case <-h.wake:
		case <-poll:
			h.poll(ctx)
		}
	}
}

// poll acks the jobs left aside again, by the batch's skipping statements:
// it reports those acked, lost or failed, and keeps those still locked.
func (h *heldAcks) poll(ctx context.Context) {
	h.mu.Lock()
	batch := h.pending
	h.pending, h.pollAt = nil, time.Time{}
	h.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	var locked []claimRef
	ids, failed, err := h.w.ackBatch(ctx, &batch, nil, &locked)
	var still []*Job
	if len(locked) > 0 {
		batch = splitLocked(batch, locked, &still)
	}
	h.w.report(batch, ids, failed, err)
	h.mu.Lock()
	h.pending = append(h.pending, still...)
	h.n -= len(batch)
	if len(h.pending) > 0 && h.pollAt.IsZero() {
		h.pollAt = time.Now().Add(h.retry)
	}
	h.mu.Unlock()
	signal(h.freed)
}

// await acks group by one statement that waits for its rows' locks
// (ackLocked), and reports each job; release gives back the room it took.
func (h *heldAcks) await(ctx context.Context, group []*Job, release func()) {
	refs := h.w.q.claimRefs(make([]claimRef, 0, len(group)), group)
	ids, err := run(h.w.q.handle, "ack many", autoWrite(ctx), func(target) ([]int64, error) {
		return h.skipper.ackLocked(ctx, refs, h.w.q.s.now()) // the store's auto-commit writes (writeOps)
	})
	var failed map[*Job]error
	if err != nil {
		// As a batch's ack (ackBatch): split only when refused for its rows.
		failed = map[*Job]error{}
		ids, _ = h.w.ackSplit(ctx, unacked(group, ids), err, ids, failed)
	}
	release()
	h.w.report(group, ids, failed, err)
	h.mu.Lock()
	h.n -= len(group)
	h.mu.Unlock()
	signal(h.freed)
	signal(h.wake)
}

// splitLocked returns the runs of batch whose claims are not in locked,
// and puts the others in *held.
func splitLocked(batch []*Job, locked []claimRef, held *[]*Job) []*Job {
	aside := make(map[claimRef]bool, len(locked))
	for _, c := range locked {
		aside[c] = true
	}
	rest := make([]*Job, 0, len(batch)-len(locked))
	var kept []*Job
	for _, j := range batch {
		if c := (claimRef{id: j.ID, token: j.claimToken()}); aside[c] {
			delete(aside, c)
			kept = append(kept, j)
		} else {
			rest = append(rest, j)
		}
	}
	*held = kept
	return rest
}

// signal sends on c, a channel of one, unless a signal is waiting there.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
