package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultLeaseTTL is how long a scheduler's leadership lasts without renewal.
const DefaultLeaseTTL = 15 * time.Second

const schedulerLease = "scheduler"

// Scheduler fires due schedules. Run as many as you like, in any processes
// sharing the database: one at a time leads, through a lease row, and the
// others stand by to take over.
type Scheduler struct {
	s     *Store
	owner string
	opts  SchedulerOpts

	running atomic.Bool
	leading atomic.Bool
}

// SchedulerOpts configure a Scheduler. Zero values take the defaults.
type SchedulerOpts struct {
	// LeaseTTL is how long leadership lasts unless renewed (the leader renews
	// every third of it). A standby takes over at most this long after a
	// leader dies; a leader that stops gives the lease up at once. Default
	// DefaultLeaseTTL; at least 100ms.
	LeaseTTL time.Duration
}

// Scheduler returns a scheduler that leads under the name owner (shown by
// SchedulerLeader). Owners need not be unique: each Run is told apart.
func (s *Store) Scheduler(owner string, opts SchedulerOpts) *Scheduler {
	return &Scheduler{s: s, owner: owner, opts: opts}
}

// Leading reports whether this scheduler held the lease when it last looked.
func (sc *Scheduler) Leading() bool { return sc.leading.Load() }

// SchedulerLease is who leads the schedulers, as SchedulerLeader reports it.
type SchedulerLease struct {
	Owner     string    // the leader's owner name; "" when no scheduler leads
	RenewedAt time.Time // when the leader took or last renewed the lease
	ExpiresAt time.Time // when a standby may take over unless it is renewed
}

// SchedulerLeader returns the scheduler lease, or a zero SchedulerLease when
// no scheduler holds an unexpired one.
func (s *Store) SchedulerLeader(ctx context.Context) (SchedulerLease, error) {
	return run(handle{s: s}, "scheduler leader", autoRead, func(o target) (SchedulerLease, error) {
		l, err := o.getLease(ctx, schedulerLease)
		if errors.Is(noRows(err), ErrNotFound) || (err == nil && !l.expiresAt.After(s.now())) {
			return SchedulerLease{}, nil
		}
		return SchedulerLease{Owner: l.owner, RenewedAt: l.renewedAt, ExpiresAt: l.expiresAt}, err
	})
}

// lease is a row of the leases table.
type lease struct {
	name, owner          string
	token                int64
	renewedAt, expiresAt time.Time
}

// Run leads or stands by until ctx is cancelled or the store shuts down;
// then it gives the lease up (so a standby elsewhere takes over at once) and
// returns: nil after ctx was cancelled, an error matching ErrClosed when the
// store's shutdown stopped it (or had begun before Run started). While leading it fires every due
// schedule: the job's enqueue and the advance to the next boundary commit in
// one transaction, and the advance only applies if the boundary is still
// pending, so each boundary fires once even across a change of leader. A
// schedule that missed several boundaries (downtime, a long pause between
// leaders) fires once for all of them; that job's RunAt is the first missed
// boundary. Between fires it sleeps until the next boundary, its lease
// renewal or a wake; a standby sleeps until the lease expires or is given up.
func (sc *Scheduler) Run(ctx context.Context) error {
	keep, err := sc.newKeeper(ctx)
	if err != nil {
		return err
	}
	if !sc.running.CompareAndSwap(false, true) {
		return opErr("scheduler", sc.owner, fmt.Errorf("%w: this scheduler is already running", ErrInvalidArgument))
	}
	defer sc.running.Store(false)
	leave, err := sc.s.life.enterLoop()
	if err != nil {
		return opErr("scheduler", sc.owner, err)
	}
	defer leave()

	sub := sc.s.subscribe(schedulerTopic)
	defer sub.Close()
	parent := ctx
	ctx, stop := sc.s.life.loopContext(ctx)
	defer stop()
	keep.ctx = ctx
	// The store is still usable while its loops stop: resigning frees the
	// lease for a standby at once instead of after a TTL.
	defer sc.resign(sc.s.life.settleCtx(ctx), keep.l)
	for ctx.Err() == nil {
		wait := sc.step(ctx, keep)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-sub.C():
		case <-t.C:
		}
		t.Stop()
	}
	if sc.s.life.stoppedByClose() && parent.Err() == nil {
		return opErr("scheduler", sc.owner, ErrClosed)
	}
	return nil
}

// RunOnce fires what is due now, if no other scheduler leads, and returns
// how many schedules fired: it takes the lease, fires, and gives the lease
// up. Use it to drive schedules from an external tick (a cron job, a test)
// instead of Run.
func (sc *Scheduler) RunOnce(ctx context.Context) (int, error) {
	keep, err := sc.newKeeper(ctx)
	if err != nil {
		return 0, err
	}
	held, err := keep.held()
	if err != nil || !held {
		return 0, err
	}
	defer sc.resign(sc.s.life.settleCtx(ctx), keep.l)
	fired, err := sc.fireDue(ctx, sc.s.now(), keep)
	if err == nil {
		err = ctx.Err()
	}
	return fired, err
}

// newKeeper checks the scheduler's settings and prepares the lease of one
// run, with its own random token, so runs sharing an owner name are told
// apart.
func (sc *Scheduler) newKeeper(ctx context.Context) (*leaseKeeper, error) {
	if sc.s == nil {
		return nil, opErr("scheduler", sc.owner, errNoStore)
	}
	ttl := cmp.Or(sc.opts.LeaseTTL, DefaultLeaseTTL)
	err := validateLocalName("scheduler owner", sc.owner)
	if err == nil && ttl < 100*time.Millisecond {
		err = fmt.Errorf("%w: LeaseTTL %s is under 100ms", ErrInvalidArgument, ttl)
	}
	var token int64
	if err == nil {
		token, err = newClaimToken()
	}
	if err != nil {
		return nil, opErr("scheduler", sc.owner, err)
	}
	l := lease{name: schedulerLease, owner: sc.owner, token: token}
	return &leaseKeeper{sc: sc, ctx: ctx, l: l, ttl: ttl}, nil
}

// step leads or stands by once, and returns how long to sleep. Wakes come
// often (on SQLite every commit anywhere wakes everyone), so a step writes
// only when it must: a leader renews its lease once a third of the TTL has
// passed, and a standby tries to take the lease only once it is free.
func (sc *Scheduler) step(ctx context.Context, keep *leaseKeeper) time.Duration {
	const retry = time.Second // after an error
	ttl := keep.ttl
	now := sc.s.now()
	if !sc.leading.Load() {
		if wait, free := sc.standBy(ctx, now, keep); !free {
			return wait
		}
	}
	held, err := keep.held()
	switch {
	case err != nil:
		sc.logErr(ctx, "could not take or renew the scheduler lease", err)
		return min(retry, ttl/3)
	case !held:
		wait, _ := sc.standBy(ctx, now, keep)
		return wait
	}
	_, fireErr := sc.fireDue(ctx, now, keep)
	failed := fireErr != nil
	next, err := run(handle{s: sc.s}, "next schedule", autoRead, func(o target) (*time.Time, error) {
		return o.nextScheduleFire(ctx)
	})
	wait := keep.renewedAt.Add(ttl / 3).Sub(sc.s.now())
	if err != nil {
		sc.logErr(ctx, "could not read the next fire time", err)
		failed = true
	} else if next != nil {
		wait = min(wait, next.Sub(sc.s.now()))
	}
	if failed {
		// Something due could not fire; do not spin on it.
		wait = max(wait, min(retry, ttl/3))
	}
	return max(wait, 0)
}

// leaseKeeper takes the lease and renews it when a third of its TTL has
// passed, between steps and during a long burst of fires (so a standby does
// not take over from a leader that is busy rather than dead).
type leaseKeeper struct {
	sc        *Scheduler
	ctx       context.Context
	l         lease
	ttl       time.Duration
	renewedAt time.Time // zero until taken
}

// held reports whether this run holds the lease, taking or renewing it when
// it is due for that.
func (k *leaseKeeper) held() (bool, error) {
	now := k.sc.s.now()
	if k.sc.leading.Load() && now.Sub(k.renewedAt) < k.ttl/3 {
		return true, nil
	}
	l := k.l
	l.expiresAt = now.Add(k.ttl)
	held, err := run(handle{s: k.sc.s, name: k.sc.owner}, "scheduler lease", autoWrite(k.ctx), func(o target) (bool, error) {
		return o.acquireLease(k.ctx, l, now)
	})
	k.sc.leading.Store(held && err == nil)
	if held && err == nil {
		k.renewedAt = now
	}
	return held, err
}

// standBy reads the lease: free (absent or expired) means try to take it;
// otherwise it returns how long to sleep, until the lease expires, unless a
// wake (the lease given up) comes first.
func (sc *Scheduler) standBy(ctx context.Context, now time.Time, keep *leaseKeeper) (wait time.Duration, free bool) {
	ttl := keep.ttl
	l, err := run(handle{s: sc.s}, "scheduler lease", autoRead, func(o target) (lease, error) {
		return o.getLease(ctx, schedulerLease)
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, true
	case err != nil:
		sc.logErr(ctx, "could not read the scheduler lease", err)
		return min(time.Second, ttl/3), false
	case !l.expiresAt.After(now), l.token == keep.l.token: // expired, or ours after all
		return 0, true
	}
	return min(l.expiresAt.Sub(now)+time.Millisecond, ttl), false
}

// fireDue fires every schedule due at now, a batch at a time, while this run
// holds the lease. It returns how many fired and the first failure (each is
// logged).
func (sc *Scheduler) fireDue(ctx context.Context, now time.Time, keep *leaseKeeper) (fired int, failed error) {
	const batch = 100
	// The round pages through the due schedules in firing order, after
	// the last one it read: a schedule that failed to fire stays at its
	// boundary (and is tried next round), so reading from the start again
	// would give a hundred failing ones and nothing behind them.
	var after ScheduleInfo
	for ctx.Err() == nil {
		if held, _ := keep.held(); !held {
			return fired, failed // another scheduler took over
		}
		due, err := run(handle{s: sc.s}, "due schedules", autoRead, func(o target) ([]ScheduleInfo, error) {
			return o.dueSchedules(ctx, now, after.NextFireAt, after.Name, batch)
		})
		if err != nil {
			sc.logErr(ctx, "could not read due schedules", err)
			return fired, err
		}
		if len(due) > 0 {
			after = due[len(due)-1]
		}
		n, rest := sc.fireBatch(ctx, due, now)
		fired += n
		for _, d := range rest {
			ok, err := sc.fire(ctx, d, now)
			if err != nil {
				sc.logErr(ctx, "schedule did not fire", err, "schedule", d.Name)
				if failed == nil {
					failed = err
				}
			} else if ok {
				fired++
			}
		}
		if len(due) < batch {
			return fired, failed
		}
	}
	return fired, failed
}

// batchFirer is an engine that fires many schedules in one statement
// (PostgreSQL).
type batchFirer interface {
	fireSchedules(ctx context.Context, fs []scheduleFire) (map[string]bool, error)
}

// fireBatch fires the due schedules in one statement where the engine can
// (one round trip for the batch instead of one a fire): it returns how many
// fired and the schedules left to fire one at a time (sc.fire), which are
// all of them on SQLite, when the statement failed (each then fails or
// fires on its own, and is logged with its name), and any whose spec or
// queue does not check out.
func (sc *Scheduler) fireBatch(ctx context.Context, due []ScheduleInfo, now time.Time) (int, []ScheduleInfo) {
	if len(due) < 2 || sc.s.eng.kind() != "pg" {
		return 0, due
	}
	var fs []scheduleFire
	var rest []ScheduleInfo
	for _, d := range due {
		c, err := parseSpecCached(d.Spec, d.TZ)
		if err != nil || validateName(d.Queue) != nil {
			rest = append(rest, d) // sc.fire reports it
			continue
		}
		fs = append(fs, scheduleFire{name: d.Name, spec: d.Spec, tz: d.TZ, queue: d.Queue,
			dueAt: d.NextFireAt, next: c.after(d.NextFireAt, now), now: now})
	}
	if len(fs) == 0 {
		return 0, due
	}
	fired, err := run(handle{s: sc.s, name: sc.owner}, "fire schedules", autoWrite(ctx), func(o target) (map[string]bool, error) {
		b, ok := o.ops.(batchFirer)
		if !ok {
			return nil, nil
		}
		fired, err := b.fireSchedules(ctx, fs)
		if err == nil {
			woke := map[string]bool{}
			for _, f := range fs {
				if fired[f.name] && !woke[f.queue] {
					woke[f.queue] = true
					o.afterCommit(sc.s.wake(queueTopic(f.queue)))
				}
			}
		}
		return fired, err
	})
	if err != nil || fired == nil {
		if err != nil {
			sc.logErr(ctx, "a batch of schedules did not fire; firing them one at a time", err, "schedules", len(fs))
		}
		return 0, due
	}
	return len(fired), rest
}

// fire enqueues the job for boundary d.NextFireAt and advances the schedule
// past now, atomically. Nothing happens if another scheduler fired that
// boundary, or the schedule was paused or replaced, since it was read.
func (sc *Scheduler) fire(ctx context.Context, d ScheduleInfo, now time.Time) (bool, error) {
	return run(handle{s: sc.s, name: d.Name}, "fire schedule", autoWrite(ctx), func(o target) (bool, error) {
		c, err := parseSpecCached(d.Spec, d.TZ)
		if err != nil {
			return false, err
		}
		if err := validateName(d.Queue); err != nil { // only a row written behind Schedule's back
			return false, fmt.Errorf("Queue %q: %w", d.Queue, err)
		}
		fired, err := o.fireSchedule(ctx, scheduleFire{name: d.Name, spec: d.Spec, tz: d.TZ, queue: d.Queue,
			dueAt: d.NextFireAt, next: c.after(d.NextFireAt, now), now: now})
		if fired {
			o.afterCommit(sc.s.wake(queueTopic(d.Queue)))
		}
		return fired, err
	})
}

// resign gives the lease up, if this run holds it, so a standby takes over
// at once, and wakes the standbys.
func (sc *Scheduler) resign(ctx context.Context, l lease) {
	sc.leading.Store(false)
	if sc.s.check() != nil {
		return // closed: the lease expires on its own
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := run0(handle{s: sc.s, name: sc.owner}, "scheduler resign", autoWrite(ctx), func(o target) error {
		released, err := o.releaseLease(ctx, l.name, l.token)
		if released {
			sc.s.wakeSchedulers(o)
		}
		return err
	})
	if err != nil {
		sc.logErr(ctx, "could not give the scheduler lease up; a standby takes over when it expires", err)
	}
}

func (sc *Scheduler) logErr(ctx context.Context, msg string, err error, args ...any) {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return // stopping: not worth a log line
	}
	sc.s.log.Error("alkstore: "+msg, append([]any{"owner", sc.owner, "error", err}, args...)...)
}

// scheduleFire fires a schedule's boundary dueAt and moves it to next, if
// dueAt is still its pending boundary and spec, tz and queue are unchanged.
type scheduleFire struct {
	name, spec, tz, queue string
	dueAt, next, now      time.Time
}
