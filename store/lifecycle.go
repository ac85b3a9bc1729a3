package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A store shuts down in phases, so that work in flight finishes on a store
// that still works:
//
//	open     everything works
//	closing  loops (Work, Outbox.Run, Scheduler.Run, RunLoop) stop claiming,
//	         firing and renewing; receivers and listeners end; handlers
//	         still running finish and are settled; starting a loop,
//	         receiver or listener fails with ErrClosed
//	draining every loop returned; new operations fail with ErrClosed, while
//	         operations already running outside a transaction or in an
//	         adopted one and transactions already open may finish (Commit
//	         included)
//	closed   transactions still open were rolled back; every operation
//	         fails with ErrClosed; the connections are released
type phase int32

const (
	phaseOpen phase = iota
	phaseClosing
	phaseDraining
	phaseClosed
)

type lifecycle struct {
	phase   atomic.Int32
	mu      sync.Mutex
	closing chan struct{} // closed when shutdown begins
	hard    chan struct{} // closed when a Shutdown's context ended: cancel handlers now
	hardOne sync.Once
	hardWhy error // that context's error; read only after hard is closed
	loops   sync.WaitGroup
	txs     map[*txState]struct{} // open transactions the store began
	// appTxsEnded: the hard stop ends the application's transactions
	// (stopHard, endAppTxs): it may begin no more (handlers' may, see
	// addTx).
	appTxsEnded bool
	openTxs     atomic.Int64  // len(txs), read without the lock
	txsGone     chan struct{} // closed when txs became empty, while draining waits
	lastGC      atomic.Int64  // unix nanos of the last leak nudge
	cut         atomic.Bool   // the hard stop cancelled a handler still running
	// locksHeld: the hard stop gave up on statements waiting for a lock
	// another connection holds (PostgreSQL: heldAcks.drain; SQLite's
	// lock waits the engine ended: endLockWaits).
	locksHeld atomic.Bool
	// ops counts the auto-commit operations running, and those in adopted
	// transactions (run, Tx.enter: enterOp, leaveOp); the last to leave
	// while the store drains signals opsLeft.
	ops     atomic.Int64
	opsLeft chan struct{} // capacity 1
	// unsettled counts the finished jobs whose settle (a batched ack, a
	// failed handler's retry, a stop's release) failed once the store had
	// begun to close, unsettledWhy the first one's error (under mu): a
	// graceful Shutdown reports them (see settleFailed).
	unsettled    int
	unsettledWhy error
	// giveUp ends the settle contexts (see giveup.go); giveUpNow ends it.
	// settlesEnd: the settle contexts have an end (PostgreSQL's).
	giveUp     context.Context
	giveUpNow  context.CancelCauseFunc
	settlesEnd bool
}

// settleFailed records that the settles of n finished jobs failed with
// why. Once the store began to close, Shutdown returns an error saying so:
// those jobs run again once their claims lapse, a result the application
// closing the store relies on. On SQLite a graceful Close while another
// connection (another process) held the write lock waited out the busy
// timeout, the acks failed, and Close returned nil with a logged warning,
// where PostgreSQL's hard stop said the acks were given up (review59a).
// Before the close, a failed settle is the log's alone, as it was.
func (l *lifecycle) settleFailed(n int, why error) {
	if n == 0 || l.at() == phaseOpen {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsettled += n
	if l.unsettledWhy == nil {
		l.unsettledWhy = why
	}
}

// unsettledErr is Shutdown's error for the settles that failed as the
// store closed (settleFailed); nil when none did.
func (l *lifecycle) unsettledErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.unsettled {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("the settle of a finished job failed as the store closed; the job runs again once its claim lapses: %w", l.unsettledWhy)
	}
	return fmt.Errorf("the settles of %d finished jobs failed as the store closed; they run again once their claims lapse: %w", l.unsettled, l.unsettledWhy)
}

func newLifecycle(settlesEnd bool) *lifecycle {
	l := &lifecycle{closing: make(chan struct{}), hard: make(chan struct{}), txs: map[*txState]struct{}{},
		opsLeft: make(chan struct{}, 1), settlesEnd: settlesEnd}
	l.giveUp, l.giveUpNow = context.WithCancelCause(context.Background())
	return l
}

// enterOp counts an auto-commit operation (or one in an adopted
// transaction) that begins, or refuses it with
// ErrClosed once the store drains. It counts before it looks at the phase,
// so a shutdown that moved to draining either sees the operation and waits
// for it or the operation sees the phase and backs out.
func (l *lifecycle) enterOp() error {
	l.ops.Add(1)
	if l.at() >= phaseDraining {
		l.leaveOp()
		return ErrClosed
	}
	return nil
}

// leaveOp is the end of an operation enterOp let in.
func (l *lifecycle) leaveOp() {
	if l.ops.Add(-1) == 0 && l.at() >= phaseDraining {
		select {
		case l.opsLeft <- struct{}{}:
		default:
		}
	}
}

// waitOps waits until no auto-commit operation (nor one in an adopted
// transaction) runs (true), or the shutdown turned hard (false).
func waitOps(l *lifecycle) bool {
	for l.ops.Load() > 0 {
		select {
		case <-l.opsLeft:
		case <-l.hard:
			return false
		}
	}
	return true
}

// cutOps is the hard stop's end of the operations still running: the
// engine cancels their statements on its own connections (again every
// leakNudgeAfter, for one that reached the server after a cancel; SQLite's
// interrupt stays on), and they get up to hardStopWait to return. It
// reports whether none is left: an operation on a connection that is not
// the store's (an adopted transaction's, a pool given to OpenPool) may
// outlast it.
func (s *Store) cutOps() bool {
	l := s.life
	if l.ops.Load() == 0 {
		return true
	}
	limit := time.NewTimer(hardStopWait)
	defer limit.Stop()
	again := time.NewTicker(leakNudgeAfter)
	defer again.Stop()
	// The cancel requests run beside the wait, which they must not hold up:
	// a server that stopped answering never answers them, each waited for
	// up to rollbackTimeout (attack60b F0). One round at a time.
	var asking atomic.Bool
	for l.ops.Load() > 0 {
		if asking.CompareAndSwap(false, true) {
			go func() { defer asking.Store(false); s.eng.interrupt() }()
		}
		select {
		case <-l.opsLeft:
		case <-again.C:
		case <-limit.C:
			return l.ops.Load() == 0
		}
	}
	return true
}

func (l *lifecycle) at() phase { return phase(l.phase.Load()) }

// stopHard turns the shutdown into a hard stop, for the reason why. The
// application's transactions still open are marked first (txState.shut),
// so that none of their statements or Commit starts once anything can
// tell the stop began (a handler's context ended): the shutdown rolls
// them back (endAppTxs), and the application begins no more (addTx).
func (l *lifecycle) stopHard(why error) {
	l.hardOne.Do(func() {
		l.hardWhy = why
		l.mu.Lock()
		l.appTxsEnded = true
		for st := range l.txs {
			if !st.handler {
				st.shut.Store(true)
			}
		}
		l.mu.Unlock()
		close(l.hard)
	})
}

// isHard tells whether a hard stop has begun.
func (l *lifecycle) isHard() bool {
	select {
	case <-l.hard:
		return true
	default:
		return false
	}
}

// hardStopWait is how long a hard stop waits for the handlers it cancelled
// to return and be settled (a job whose handler returns goes back to its
// queue with its attempt), before the store closes under any that ignore
// their context.
const hardStopWait = 5 * time.Second

// abandonSettleWait is how much longer than hardStopWait a hard stop
// waits for the loops to return. A Work loop waits hardStopWait for the
// handlers it cancelled, then leaves behind those that ignore their
// context and waits for the settles of the others, which on SQLite may
// have waited for the writer a hung WorkTx or ConsumeTx handler's
// transaction held until that moment (its rollback, as Work or the
// group's loop leaves it behind, keeps their claims: see
// Tx.keepOnAbandon, Group.awaitEvents). Waited for no longer than the loops' own wait, the
// store closed under those settles, and the jobs the stop had cancelled
// behind a hung handler were left running, their attempts spent, never
// released (attack56a F7, the hard form). Loops that return in time end
// the wait at once.
const abandonSettleWait = 2 * time.Second

// enterLoop registers a loop, unless shutdown has begun; the loop calls
// leave when it returned.
func (l *lifecycle) enterLoop() (leave func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at() != phaseOpen {
		return nil, ErrClosed
	}
	l.loops.Add(1)
	return l.loops.Done, nil
}

// addTx tracks a transaction the store began, unless new work is refused,
// or, for the application's (not a handler's), the hard stop rolled its
// transactions back already.
func (l *lifecycle) addTx(st *txState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at() >= phaseDraining || l.appTxsEnded && !st.handler {
		return ErrClosed
	}
	l.txs[st] = struct{}{}
	l.openTxs.Store(int64(len(l.txs)))
	return nil
}

// endTx forgets a transaction that ended.
func (l *lifecycle) endTx(st *txState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.txs, st)
	l.openTxs.Store(int64(len(l.txs)))
	if len(l.txs) == 0 && l.txsGone != nil {
		close(l.txsGone)
		l.txsGone = nil
	}
}

// loopContext is ctx, also cancelled when shutdown begins, holding the
// store's give-up of its settles (giveUpKey). The caller must call cancel
// when the loop returns. A loop's own stop gives up none of its settles:
// on a server that answers they end by themselves, and only the hard stop
// gives them up (giveUpSettles). A bound counted from the loop's
// stop (review60b) gave up a healthy server's ack waiting for a pool
// connection or a row lock, and ended the claims of a detached copy of
// the loop's context once the loop returned.
func (l *lifecycle) loopContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.settlesEnd {
		// The store's statements run for the loop with code that has its
		// context but not the store (uninterrupted) end with the hard stop.
		ctx = context.WithValue(ctx, giveUpKey{}, l.giveUp)
	}
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-l.closing:
			cancel()
		case <-lctx.Done():
		}
	}()
	return lctx, cancel
}

// stoppedByClose reports whether shutdown has begun (so a loop that ended
// reports ErrClosed rather than nil).
func (l *lifecycle) stoppedByClose() bool { return l.at() != phaseOpen }

// leakNudgeAfter is how long an operation waits for a connection or the
// SQLite writer slot, while a transaction the store began is open, before
// the store runs a garbage collection: a transaction dropped without
// Commit or Rollback is rolled back by its cleanup, which only a collection
// runs. A quiet program may not collect for minutes on its own.
const leakNudgeAfter = 100 * time.Millisecond

// whileWaiting arms the leak nudge for an operation about to wait for a
// connection; the returned function disarms it. It costs nothing while no
// transaction is open.
func (l *lifecycle) whileWaiting() func() {
	if l.openTxs.Load() == 0 {
		return func() {}
	}
	t := time.AfterFunc(leakNudgeAfter, l.nudge)
	return func() { t.Stop() }
}

// nudge collects garbage, at most once per leakNudgeAfter, so cleanups of
// dropped transactions run.
func (l *lifecycle) nudge() {
	now := time.Now().UnixNano()
	last := l.lastGC.Load()
	if now-last < int64(leakNudgeAfter) || !l.lastGC.CompareAndSwap(last, now) {
		return
	}
	runtime.GC()
}

// Shutdown stops the store gracefully, bounded by ctx:
//
//  1. Work, Outbox.Run, Scheduler.Run and loops started with RunLoop stop
//     claiming and firing; receivers and listeners end (Recv returns
//     ErrClosed); starting any of them now fails with ErrClosed.
//  2. Handlers in flight finish, within each Work's Grace, and are settled;
//     schedulers give their lease up. Every loop then returns an error
//     matching ErrClosed.
//  3. Operations outside a transaction that start now fail with ErrClosed;
//     those already running finish (an EnqueueMany stores its batch and
//     returns its ids), and transactions already open may still finish and
//     commit. A transaction adopted with AdoptPgx or AdoptSQL is yours, not
//     the store's: Shutdown neither waits for it nor rolls it back, and
//     treats each operation in it (the Tx forms, Exec, Query, QueryRow)
//     like one outside a transaction: those running finish, those that
//     start now fail with ErrClosed (as AdoptPgx and AdoptSQL do). What the
//     store wrote in it before commits or rolls back with it, as you end it.
//  4. Transactions still open are rolled back, every operation fails with
//     ErrClosed, and the connections are released.
//
// When ctx ends first, Shutdown stops hard: handlers still running have
// their context cancelled (a job whose handler then returns an error goes
// back to its queue without losing an attempt) and get up to 5 seconds to
// return; transactions the application began still open are rolled back
// at once, before the wait for the handlers (a handler's own transaction
// is left to its worker; see endAppTxs) (their later
// operations and Commit fail with ErrClosed; on PostgreSQL a statement one
// is running is cancelled first, and the rollback waits up to 5 seconds for
// it to end: it fails with ErrClosed too, and one that outlasts the wait
// keeps its connection until it ends, when the store rolls back), and
// operations still running
// outside a transaction are cancelled: on PostgreSQL, with a pool Open
// made, the server cancels their statements, and on SQLite the store
// interrupts them, even one waiting on a lock (SQLite: another process's
// write lock, whatever the busy timeout); they fail with ErrClosed and
// store nothing, unless one finished first and keeps its result (on
// PostgreSQL, as for any call cut in flight, a commit the cancel reached
// too late may have stored its work though the call fails: see "Names
// and errors" in the README). They get
// up to 5 seconds to return. A pool passed to OpenPool and an adopted
// transaction's connection are the application's, which the store does
// not cancel: an operation on them waiting on a lock runs until it gets
// the lock, its own context ends or (SQLite) its busy timeout. The
// store's own writes waiting for a lock such a connection or another
// process holds (SQLite's write lock; on PostgreSQL a finished job's row,
// acked apart) are given up as the stop begins, and store nothing: a
// finished job whose ack was one of them runs again after its lease, and
// Shutdown says so. A wait for the writer slot behind the store's own
// transaction (a WorkTx handler's, a Begin) is not such a wait. Shutdown
// then returns an error matching ctx's, saying "operations still running"
// only when some outlived that wait. A handler that ignores its context is
// left running on a closed store: its job comes back after its visibility;
// a group member's event (Consume, ConsumeTx), never committed, goes to
// its partition's next owner. Work and the group's loop leave such a
// handler behind 5 seconds after they cancelled it, in a graceful
// shutdown too (after its Grace), rolling its transaction back.
// A hard stop right away is Shutdown with a context that is already done.
// On PostgreSQL the store's own statements that a server which stopped
// answering has not answered (a finished job's ack, a stop's release, a
// claim, a group member's leave, a scheduler's resignation) are given up
// when the hard stop stops waiting for the loops (7 seconds in): the loops
// then return, Shutdown says so, and a job whose ack was given up runs
// again after its lease.
//
// A finished job's settle (its ack, a failed handler's retry, a stop's
// release) that fails once the shutdown began (on SQLite, gracefully, a
// write that waited out the busy timeout behind another process's write
// lock) makes Shutdown return an error saying so, wrapping the settle's
// error: that job runs again once its claim lapses.
//
// Shutdown and Close may be called more than once, and concurrently; every
// call waits for the first to finish, and any caller's ctx ending turns a
// graceful shutdown in progress into a hard one (a second SIGINT). Do not
// call them from a handler or a RunLoop function: shutdown waits for those
// to return. Cancel the loop's context instead, or close the store from
// another goroutine.
func (s *Store) Shutdown(ctx context.Context) error {
	if s == nil {
		return opErr("shutdown", "", errNoStore)
	}
	stop := context.AfterFunc(ctx, func() { s.life.stopHard(context.Cause(ctx)) })
	defer stop()
	s.closeOnce.Do(func() { s.closeErr = s.shutdown() })
	if s.closeErr != nil {
		return opErr("shutdown", "", s.closeErr)
	}
	return nil
}

// DefaultCloseTimeout bounds Close: it is Shutdown with this deadline.
const DefaultCloseTimeout = time.Minute

// Close shuts the store down gracefully: Shutdown with a deadline of
// DefaultCloseTimeout. `defer s.Close()` in main lets handlers in flight
// finish within their Grace and settles them before the connections close.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
	defer cancel()
	return s.Shutdown(ctx)
}

func (s *Store) shutdown() error {
	l := s.life
	l.mu.Lock()
	l.phase.Store(int32(phaseClosing))
	close(l.closing)
	l.mu.Unlock()
	s.hub.Close(nil) // receivers, listeners and idle loops hear it at once
	// Joined group members leave (release their partitions); a leave may
	// wait for a transaction of the application's that holds what it
	// writes (a partition row a pending CommitTx locked; SQLite's writer),
	// which a hard stop rolls back (endAppTxs): it must not wait for the
	// leaves first (attack58 F5: Shutdown waited until the application
	// ended it, for ever when that was Shutdown's own goroutine).
	leftGroups := make(chan struct{})
	go func() { s.bg.closeAll(); close(leftGroups) }()
	select {
	case <-leftGroups:
	case <-l.hard:
	}
	loopsDone := make(chan struct{})
	go func() { l.loops.Wait(); close(loopsDone) }()
	var err error
	loopsLeft := false
	stuck := 0       // transactions whose rollback did not end in time
	if !l.isHard() { // a hard stop already begun takes its path, loops done or not
		select {
		case <-loopsDone:
		case <-l.hard:
		}
	}
	if l.isHard() {
		s.eng.endLockWaits()
		wait, cancel := context.WithTimeout(context.Background(), hardStopWait+abandonSettleWait)
		appTxs := s.endAppTxs()
		select {
		case <-loopsDone:
		case <-wait.Done():
			loopsLeft, err = s.giveUpLoops(loopsDone)
		}
		// The leaves, free once the rollback ended what they waited for,
		// get the rest of the same wait; one waiting for a lock another
		// connection holds gives up (SQLite: endLockWaits) or fails as the
		// store closes under it (PostgreSQL), and its partitions come back
		// once their leases run out. One the database does not answer is
		// given up with the settles (giveUpSettles).
		select {
		case <-leftGroups:
		case <-wait.Done():
			if l.settlesEnd {
				l.giveUpSettles()
				t := time.NewTimer(giveUpWait)
				select {
				case <-leftGroups:
				case <-t.C:
				}
				t.Stop()
			}
		}
		cancel()
		ended := <-appTxs
		stuck += ended.stuck
		if ended.open > 0 && err == nil {
			err = fmt.Errorf("transactions still open: %w", l.hardWhy)
		}
	}
	if err == nil && l.cut.Load() {
		err = fmt.Errorf("handlers cancelled: %w", l.hardWhy)
	}

	l.mu.Lock()
	l.phase.Store(int32(phaseDraining))
	var gone chan struct{}
	if len(l.txs) > 0 {
		gone = make(chan struct{})
		l.txsGone = gone
	}
	l.mu.Unlock()
	if gone != nil {
		err = cmp.Or(waitTxs(l, gone), err)
	}
	opsDone := waitOps(l)

	l.mu.Lock()
	l.phase.Store(int32(phaseClosed))
	open := make([]*txState, 0, len(l.txs))
	for st := range l.txs {
		open = append(open, st)
	}
	l.mu.Unlock()
	for _, st := range open {
		if !st.abandon(true) {
			stuck++
		}
	}
	if len(open) > 0 {
		s.log.Warn("alkstore: store closed with transactions still open; rolled them back", "open", len(open), "failed", stuck)
	}
	// A hard stop cancels the operations still running (after the rollback
	// above, which may be what they waited for); only those that outlast
	// that are reported.
	if !opsDone && !s.cutOps() {
		err = fmt.Errorf("operations still running: %w", l.hardWhy)
	} else if writes, reads := s.locksCut(); err == nil && (writes || reads) {
		err = fmt.Errorf("%s: %w", locksCutMsg(writes, reads), l.hardWhy)
	} else if !opsDone && err == nil {
		err = fmt.Errorf("hard stop; every operation running returned (cancelled or finished; each one's error says which): %w", l.hardWhy)
	}
	if err == nil {
		err = l.unsettledErr() // the loops and operations returned: their settles are done
	}
	s.feed.once.Do(func() {}) // no feed may start from now on
	if s.feed.stop != nil {
		s.feed.stop()
	}
	// Abandoned: something still runs on the connections, or the database
	// did not answer the store's own statements (given up): the close
	// waits for neither.
	s.eng.close(stuck > 0 || loopsLeft || !opsDone && l.ops.Load() > 0 || l.giveUp.Err() != nil)
	return err
}

// giveUpLoops is the hard stop's end of the loops still running once it
// waited hardStopWait plus abandonSettleWait: it gives up their settles
// (a statement the database has not answered: giveUpSettles) and waits
// up to giveUpWait more. It reports whether some loop is still running,
// and Shutdown's error: loops still running are a handler's (a RunLoop
// function's) that ignores the stop; loops that returned once their
// settles were given up had waited for the database.
func (s *Store) giveUpLoops(loopsDone <-chan struct{}) (left bool, err error) {
	l := s.life
	if !l.settlesEnd { // SQLite: nothing to give up
		return true, fmt.Errorf("handlers ignored the hard stop: %w", l.hardWhy)
	}
	l.giveUpSettles()
	t := time.NewTimer(giveUpWait)
	defer t.Stop()
	select {
	case <-loopsDone:
		s.log.Warn("alkstore: hard stop: "+errSettlesGivenUp.Error(), "waited", hardStopWait+abandonSettleWait)
		return false, fmt.Errorf("%w: %w", errSettlesGivenUp, l.hardWhy)
	case <-t.C:
		return true, fmt.Errorf("handlers ignored the hard stop: %w", l.hardWhy)
	}
}

// locksCut reports whether the hard stop gave up on statements of the
// store's waiting for a lock another connection holds: writes, and reads.
func (s *Store) locksCut() (writes, reads bool) {
	writes, reads = s.eng.lockWaitsEnded()
	return writes || s.life.locksHeld.Load(), reads
}

// locksCutMsg is what Shutdown says when the hard stop cut the store's
// waits for a lock another connection holds, which the store cannot end:
// no handler is to blame. Waited for, the acks of finished jobs held a
// hard stop on SQLite for the whole busy timeout (10 s), past the wait for
// the loops, which then blamed "handlers ignored the hard stop" (lows58).
// It names what was cut: it said "writes" for a read's wait too.
func locksCutMsg(writes, reads bool) string {
	const (
		holder = " waiting for a lock another connection holds (another process's, an adopted transaction's) were given up"
		lost   = " (a finished job whose ack was one of them runs again after its lease)"
	)
	switch {
	case writes && reads:
		return "hard stop; writes and reads" + holder + ", and the writes stored nothing" + lost
	case reads:
		return "hard stop; reads" + holder + " (they failed with ErrClosed)"
	}
	return "hard stop; writes" + holder + " and stored nothing" + lost
}

// endAppTxs is the hard stop's rollback of the transactions the
// application began (Begin, InTx) still open, which stopHard marked, at
// once (see Shutdown),
// each on a goroutine of its own (st.abandon: on PostgreSQL it waits for
// a statement running in it to end after its cancel, up to
// rollbackTimeout); the channel gets how many there were, and how many
// of them did not end in time. From now on the application begins no more. Before, they were
// rolled back only once the loops returned, up to hardStopWait later:
// meanwhile the application's later statements and Commit still ran and
// committed, and on SQLite the Work loop's release of the handler the stop
// cancelled waited for the writer the application's transaction held, so
// a hard Shutdown took the whole wait and a Commit made meanwhile stored
// its writes (attack56a F6). Handlers' own transactions (txState.handler)
// are left to their runners, which settle their jobs in them as the
// cancelled handlers return (a job keeps its attempt); the store rolls
// back those still open once the loops returned or were given up on.
func (s *Store) endAppTxs() <-chan endedTxs {
	l := s.life
	l.mu.Lock()
	var open []*txState
	for st := range l.txs {
		if !st.handler {
			open = append(open, st)
		}
	}
	l.mu.Unlock()
	res := make(chan endedTxs, 1)
	if len(open) == 0 {
		res <- endedTxs{}
		return res
	}
	go func() {
		var wg sync.WaitGroup
		var n atomic.Int64
		for _, st := range open {
			wg.Go(func() {
				if !st.abandon(true) {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		s.log.Warn("alkstore: hard stop rolled back the application's transactions still open", "open", len(open), "failed", n.Load())
		res <- endedTxs{open: len(open), stuck: int(n.Load())}
	}()
	return res
}

// endedTxs is what endAppTxs did: how many transactions it rolled back,
// and how many of those rollbacks did not end in time.
type endedTxs struct{ open, stuck int }

// waitTxs waits until every open transaction ended or the shutdown turned
// hard. Dropped transactions are rolled back by their cleanups, so it
// collects garbage while it waits.
func waitTxs(l *lifecycle, gone <-chan struct{}) error {
	t := time.NewTicker(leakNudgeAfter)
	defer t.Stop()
	for {
		select {
		case <-gone:
			return nil
		case <-l.hard:
			return fmt.Errorf("transactions still open: %w", l.hardWhy)
		case <-t.C:
			l.nudge()
		}
	}
}

// RunLoop runs fn as one of the store's loops, as Work and Scheduler.Run
// are: fn's context is cancelled when ctx is or when the store begins to
// shut down, and Close waits for fn to return before it releases the
// connections. RunLoop returns fn's error; when the store's shutdown ended
// fn (or had begun before), it returns an error matching ErrClosed. The
// janitor runs this way; so can an application's own loops that use the
// store.
func (s *Store) RunLoop(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	switch {
	case s == nil:
		return opErr("run loop", name, errNoStore)
	case fn == nil:
		return opErr("run loop", name, fmt.Errorf("%w: nil function", ErrInvalidArgument))
	}
	leave, err := s.life.enterLoop()
	if err != nil {
		return opErr("run loop", name, err)
	}
	defer leave()
	lctx, cancel := s.life.loopContext(ctx)
	defer cancel()
	err = fn(lctx)
	if s.life.stoppedByClose() && ctx.Err() == nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = ErrClosed // fn ended because the store shut down (returning nil or ctx.Err())
	}
	return opErr("run loop", name, err)
}
