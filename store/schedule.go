package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Schedule is the handle of one named schedule: at every boundary of its
// spec it enqueues a job (see Scheduler, which fires them). Creating one
// does no I/O; a bad name is reported by every operation.
type Schedule struct {
	handle
}

// Schedule returns the handle of the schedule called name.
func (s *Store) Schedule(name string) *Schedule {
	return &Schedule{newHandle(s, name)}
}

// Name returns the schedule's name.
func (sc *Schedule) Name() string { return sc.name }

// ScheduleSpec describes a schedule: at every boundary of Spec, in time
// zone TZ, a job with Payload, Priority and MaxAttempts is enqueued into
// Queue.
type ScheduleSpec struct {
	// Spec is a 5-field cron line ("30 4 * * 1-5"), a 6-field one with
	// seconds first ("*/10 * * * * *"), @every <Go duration> in whole
	// seconds ("@every 90s"), or @hourly, @daily, @weekly, @monthly, @yearly.
	Spec        string
	TZ          string // IANA time zone name cron fields are read in; "" is UTC
	Queue       string // validated like any queue name: the reserved prefix is refused
	Payload     []byte
	Priority    int // as EnqueueOpts.Priority: -2^30 to 2^30, or Set refuses the spec
	MaxAttempts int // 0: DefaultMaxAttempts; at most 2^30
	// Headers are given to every job the schedule enqueues (see
	// EnqueueOpts.Headers; the same bound).
	Headers map[string]string
}

// ScheduleInfo is a registered schedule as Schedule.Info and
// Store.Schedules report it.
type ScheduleInfo struct {
	Name        string
	Spec        string
	TZ          string
	Queue       string
	Payload     []byte
	Priority    int
	MaxAttempts int
	NextFireAt  time.Time // the next boundary to fire; in the past while overdue
	Paused      bool
	LastFiredAt *time.Time // nil before the first fire
	CreatedAt   time.Time
	UpdatedAt   time.Time
	Headers     map[string]string // nil when none
}

// schedulerTopic wakes schedulers when a schedule is added, replaced or
// resumed, or when the lease is given up.
const schedulerTopic = "x:scheduler"

// Set registers the schedule, or replaces it. Every field is checked
// before anything is stored: a bad Spec or TZ fails with ErrInvalidArgument
// naming the field, an empty Queue with ErrInvalidName and a Queue in the
// reserved namespace with ErrReservedName. Setting an unchanged Spec and TZ
// again keeps the pending boundary and the paused flag, so applications can
// set their schedules at every start.
func (sc *Schedule) Set(ctx context.Context, spec ScheduleSpec) error {
	return sc.set(ctx, autoWrite(ctx), spec)
}

// SetTx is Set inside tx: the schedule exists, and schedulers hear of it,
// only if tx commits.
func (sc *Schedule) SetTx(ctx context.Context, tx Tx, spec ScheduleSpec) error {
	return sc.set(ctx, tx.via(ctx), spec)
}

func (sc *Schedule) set(ctx context.Context, v via, spec ScheduleSpec) error {
	s := sc.s
	return run0(sc.handle, "set schedule", v, func(o target) error {
		c, err := parseSpec(spec.Spec, spec.TZ)
		if err != nil {
			return err
		}
		if err := validateName(spec.Queue); err != nil {
			return fmt.Errorf("Queue %q: %w", spec.Queue, err)
		}
		if err := s.checkPayload("payload", spec.Payload); err != nil {
			return err
		}
		now := s.now()
		j, err := resolveJob("", now, spec.Payload, EnqueueOpts{Priority: spec.Priority, MaxAttempts: spec.MaxAttempts,
			Headers: spec.Headers})
		if err != nil {
			return err
		}
		// The parsed zone's name: "" is stored as "UTC".
		info := ScheduleInfo{Name: sc.name, Spec: spec.Spec, TZ: c.loc.String(), Queue: spec.Queue, Payload: spec.Payload,
			Priority: int(j.priority), MaxAttempts: int(j.maxAttempts), NextFireAt: c.first(now), UpdatedAt: now,
			Headers: spec.Headers}
		if err := o.upsertSchedule(ctx, info); err != nil {
			return err
		}
		s.wakeSchedulers(o)
		return nil
	})
}

// Delete removes the schedule; ErrNotFound when there is none.
func (sc *Schedule) Delete(ctx context.Context) error {
	return sc.delete(ctx, autoWrite(ctx))
}

// DeleteTx is Delete inside tx: the schedule is gone only if tx commits.
func (sc *Schedule) DeleteTx(ctx context.Context, tx Tx) error {
	return sc.delete(ctx, tx.via(ctx))
}

func (sc *Schedule) delete(ctx context.Context, v via) error {
	return run0(sc.handle, "delete schedule", v, func(o target) error {
		return found(o.deleteSchedule(ctx, sc.name))
	})
}

// Pause stops the schedule's fires until Resume; ErrNotFound when there is
// none.
func (sc *Schedule) Pause(ctx context.Context) error {
	return run0(sc.handle, "pause schedule", autoWrite(ctx), func(o target) error {
		return found(o.pauseSchedule(ctx, sc.name, sc.s.now()))
	})
}

// resumeTries is how many times Resume reads the schedule again after a
// replace changed its spec or time zone between its read and its update.
const resumeTries = 5

// Resume restarts a paused schedule from its next boundary after now:
// boundaries that passed while it was paused never fire, and @every keeps
// the phase it had from registration. Resuming a running
// schedule does nothing; ErrNotFound when there is none. Should the
// schedule be replaced with another spec or time zone between each of
// Resume's 5 reads and its update (Sets racing it), it fails with
// ErrNotStored: nothing was stored, the schedule stays paused, and
// calling Resume again retries.
func (sc *Schedule) Resume(ctx context.Context) error {
	s := sc.s
	return run0(sc.handle, "resume schedule", autoWrite(ctx), func(o target) error {
		// The next boundary depends on the spec; a replace in between is
		// caught by the update's check and read again.
		for range resumeTries {
			cur, err := o.getSchedule(ctx, sc.name)
			if err != nil || !cur.Paused {
				return noRows(err)
			}
			c, err := parseSpec(cur.Spec, cur.TZ)
			if err != nil {
				return err
			}
			now := s.now()
			resumed, err := o.resumeSchedule(ctx, scheduleResume{name: cur.Name, spec: cur.Spec, tz: cur.TZ, next: c.resumeAt(cur.NextFireAt, now), now: now})
			if err != nil || resumed {
				if resumed {
					s.wakeSchedulers(o)
				}
				return err
			}
		}
		// The same sentinel as a unique job whose key kept changing hands:
		// an optimistic write that lost every race, stored nothing, and
		// that the caller may retry.
		return notStored("the schedule was replaced %d times while it was being resumed (its spec or time zone changed each time between the read and the update): nothing was stored; try again", resumeTries)
	})
}

// Trigger enqueues the schedule's job now, as a fire would (its queue,
// payload, priority, max attempts and headers), without moving its next boundary,
// paused or not, and returns the job's id; ErrNotFound when there is none.
func (sc *Schedule) Trigger(ctx context.Context) (int64, error) {
	info, err := sc.Info(ctx)
	if err != nil {
		return 0, opErr("trigger schedule", sc.name, errors.Unwrap(err))
	}
	id, err := sc.s.Queue(info.Queue).Enqueue(ctx, info.Payload, EnqueueOpts{Priority: info.Priority, MaxAttempts: info.MaxAttempts,
		Headers: info.Headers})
	if err != nil {
		return 0, opErr("trigger schedule", sc.name, errors.Unwrap(err))
	}
	return id, nil
}

// Info reads the schedule as registered; ErrNotFound when there is none.
func (sc *Schedule) Info(ctx context.Context) (ScheduleInfo, error) {
	return run(sc.handle, "schedule info", autoRead, func(o target) (ScheduleInfo, error) {
		info, err := o.getSchedule(ctx, sc.name)
		return info, noRows(err)
	})
}

// Schedules lists every schedule by name.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	return run(handle{s: s}, "schedules", autoRead, func(o target) ([]ScheduleInfo, error) {
		return o.listSchedules(ctx)
	})
}

// wakeSchedulers wakes schedulers in this process once o's writes commit;
// the write itself carried the wake to other processes.
func (s *Store) wakeSchedulers(o target) {
	o.afterCommit(s.wake(schedulerTopic))
}

// found turns "no row was affected" into ErrNotFound.
func found(ok bool, err error) error {
	if err == nil && !ok {
		return ErrNotFound
	}
	return err
}
