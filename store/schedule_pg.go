package store

import (
	"context"
	"errors"
	"time"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schedule and lease statements on PostgreSQL. Writes that schedulers must
// hear of carry a wake on the scheduler topic (see EnqueueJob).

func (o pgOps) upsertSchedule(ctx context.Context, sc ScheduleInfo) error {
	w := o.wake(schedulerTopic)
	err := o.q.UpsertSchedule(ctx, pgdb.UpsertScheduleParams{Name: sc.Name, Spec: sc.Spec, Tz: sc.TZ, Queue: sc.Queue,
		Payload: sc.Payload, Priority: int32(sc.Priority), MaxAttempts: int32(sc.MaxAttempts),
		NextFireAt: sc.NextFireAt, Now: sc.UpdatedAt, Headers: pgJSON(encodeHeaders(sc.Headers)), Wake: w})
	o.sent(schedulerTopic, w)
	return err
}

func (o pgOps) deleteSchedule(ctx context.Context, name string) (bool, error) {
	w := o.wake(schedulerTopic)
	n, err := o.q.DeleteSchedule(ctx, pgdb.DeleteScheduleParams{Name: name, Wake: w})
	o.sent(schedulerTopic, w)
	return n == 1, err
}

func (o pgOps) pauseSchedule(ctx context.Context, name string, now time.Time) (bool, error) {
	w := o.wake(schedulerTopic)
	n, err := o.q.PauseSchedule(ctx, pgdb.PauseScheduleParams{Name: name, Now: now, Wake: w})
	o.sent(schedulerTopic, w)
	return n == 1, err
}

func (o pgOps) resumeSchedule(ctx context.Context, r scheduleResume) (bool, error) {
	w := o.wake(schedulerTopic)
	n, err := o.q.ResumeSchedule(ctx, pgdb.ResumeScheduleParams{Name: r.name, Spec: r.spec, Tz: r.tz, NextFireAt: r.next, Now: r.now,
		Wake: w})
	o.sent(schedulerTopic, w)
	return n == 1, err
}

func (o pgOps) getSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	r, err := o.q.GetSchedule(ctx, name)
	return pgSchedule(r), err
}

func (o pgOps) listSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	rows, err := o.q.ListSchedules(ctx)
	return mapRows(rows, err, pgSchedule)
}

func (o pgOps) dueSchedules(ctx context.Context, now, afterAt time.Time, afterName string, limit int) ([]ScheduleInfo, error) {
	rows, err := o.q.DueSchedules(ctx, pgdb.DueSchedulesParams{Now: now, AfterAt: afterAt, AfterName: afterName, MaxRows: int32(limit)})
	return mapRows(rows, err, pgSchedule)
}

func (o pgOps) fireSchedule(ctx context.Context, f scheduleFire) (bool, error) {
	topic := queueTopic(f.queue)
	w := o.wake(topic)
	ids, err := o.q.FireSchedule(ctx, pgdb.FireScheduleParams{Name: f.name, Spec: f.spec, Tz: f.tz, Queue: f.queue,
		DueAt: f.dueAt, NextFireAt: f.next, Now: f.now, Wake: w})
	o.sent(topic, w)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgSkippedRows {
		err = errFireSkipped(pgErr) // the statement failed whole: the schedule did not move
	}
	return len(ids) == 1 && err == nil, err
}

// fireSchedules fires a batch in one statement (FireSchedules): the names
// that fired. Each queue's wake goes through the gate once.
func (o pgOps) fireSchedules(ctx context.Context, fs []scheduleFire) (map[string]bool, error) {
	p := pgdb.FireSchedulesParams{Now: fs[0].now}
	woke := map[string]bool{}
	var topics []string // p.Wakes' topics
	for _, f := range fs {
		p.Names, p.Specs, p.Tzs, p.Queues = append(p.Names, f.name), append(p.Specs, f.spec), append(p.Tzs, f.tz), append(p.Queues, f.queue)
		p.DueAts, p.NextFireAts = append(p.DueAts, f.dueAt), append(p.NextFireAts, f.next)
		if !woke[f.queue] {
			woke[f.queue] = true
			topics = append(topics, queueTopic(f.queue))
			p.Wakes = append(p.Wakes, o.wake(topics[len(topics)-1]))
		}
	}
	names, err := o.q.FireSchedules(ctx, p)
	for i, topic := range topics {
		o.sent(topic, p.Wakes[i])
	}
	if err != nil {
		return nil, err
	}
	fired := make(map[string]bool, len(names))
	for _, n := range names {
		fired[n] = true
	}
	return fired, nil
}

func (o pgOps) nextScheduleFire(ctx context.Context) (*time.Time, error) {
	return dueTime(o.q.NextScheduleFire(ctx))
}

func (o pgOps) acquireLease(ctx context.Context, l lease, now time.Time) (bool, error) {
	n, err := o.q.AcquireLease(ctx, pgdb.AcquireLeaseParams{Name: l.name, Owner: l.owner, Token: l.token,
		ExpiresAt: l.expiresAt, Now: now})
	return n == 1, err
}

func (o pgOps) getLease(ctx context.Context, name string) (lease, error) {
	r, err := o.q.GetLease(ctx, name)
	return lease{name: r.Name, owner: r.Owner, token: r.Token, renewedAt: r.RenewedAt, expiresAt: r.ExpiresAt}, err
}

func (o pgOps) releaseLease(ctx context.Context, name string, token int64) (bool, error) {
	w := o.wake(schedulerTopic)
	n, err := o.q.ReleaseLease(ctx, pgdb.ReleaseLeaseParams{Name: name, Token: token, Wake: w})
	o.sent(schedulerTopic, w)
	return n == 1, err
}

func pgSchedule(r pgdb.AlkstoreSchedule) ScheduleInfo {
	return ScheduleInfo{Name: r.Name, Spec: r.Spec, TZ: r.Tz, Queue: r.Queue, Payload: r.Payload,
		Priority: int(r.Priority), MaxAttempts: int(r.MaxAttempts), NextFireAt: r.NextFireAt, Paused: r.Paused,
		LastFiredAt: r.LastFiredAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Headers: decodeHeaders(r.Headers)}
}
