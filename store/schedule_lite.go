package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
)

// Schedule and lease statements on SQLite. Times are unix microseconds.

func (o liteOps) upsertSchedule(ctx context.Context, sc ScheduleInfo) error {
	return o.q.UpsertSchedule(ctx, litedb.UpsertScheduleParams{Name: sc.Name, Spec: sc.Spec, Tz: sc.TZ, Queue: sc.Queue,
		Payload: sc.Payload, Priority: int64(sc.Priority), MaxAttempts: int64(sc.MaxAttempts),
		NextFireAt: sc.NextFireAt.UnixMicro(), Now: sc.UpdatedAt.UnixMicro(), Headers: liteHeaders(encodeHeaders(sc.Headers))})
}

func (o liteOps) deleteSchedule(ctx context.Context, name string) (bool, error) {
	n, err := o.q.DeleteSchedule(ctx, name)
	return n == 1, err
}

func (o liteOps) pauseSchedule(ctx context.Context, name string, now time.Time) (bool, error) {
	n, err := o.q.PauseSchedule(ctx, litedb.PauseScheduleParams{Name: name, Now: now.UnixMicro()})
	return n == 1, err
}

func (o liteOps) resumeSchedule(ctx context.Context, r scheduleResume) (bool, error) {
	n, err := o.q.ResumeSchedule(ctx, litedb.ResumeScheduleParams{Name: r.name, Spec: r.spec, Tz: r.tz,
		NextFireAt: r.next.UnixMicro(), Now: r.now.UnixMicro()})
	return n == 1, err
}

func (o liteOps) getSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	r, err := o.q.GetSchedule(ctx, name)
	return liteSchedule(r), err
}

func (o liteOps) listSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	rows, err := o.q.ListSchedules(ctx)
	return mapRows(rows, err, liteSchedule)
}

func (o liteOps) dueSchedules(ctx context.Context, now, afterAt time.Time, afterName string, limit int) ([]ScheduleInfo, error) {
	rows, err := o.q.DueSchedules(ctx, litedb.DueSchedulesParams{Now: now.UnixMicro(),
		AfterAt: afterAt.UnixMicro(), AfterName: afterName, MaxRows: int64(limit)})
	return mapRows(rows, err, liteSchedule)
}

func (o liteOps) fireSchedule(ctx context.Context, f scheduleFire) (fired bool, err error) {
	err = o.atomically(ctx, func(q *litedb.Queries) error {
		rows, err := q.FireSchedule(ctx, litedb.FireScheduleParams{Name: f.name, Spec: f.spec, Tz: f.tz, Queue: f.queue,
			DueAt: f.dueAt.UnixMicro(), NextFireAt: f.next.UnixMicro(), Now: f.now.UnixMicro()})
		if err != nil || len(rows) == 0 {
			return err
		}
		r := rows[0]
		_, err = q.EnqueueJob(ctx, litedb.EnqueueJobParams{Queue: r.Queue, Payload: r.Payload, Priority: r.Priority,
			MaxAttempts: r.MaxAttempts, Now: f.now.UnixMicro(), RunAt: f.dueAt.UnixMicro(), Headers: r.Headers})
		if errors.Is(err, sql.ErrNoRows) { // an application's trigger skipped the job: roll the fire back
			err = errFireSkipped(nil)
		}
		fired = err == nil
		return err
	})
	return fired && err == nil, err
}

func (o liteOps) nextScheduleFire(ctx context.Context) (*time.Time, error) {
	return dueTime(o.q.NextScheduleFire(ctx))
}

func (o liteOps) acquireLease(ctx context.Context, l lease, now time.Time) (bool, error) {
	n, err := o.q.AcquireLease(ctx, litedb.AcquireLeaseParams{Name: l.name, Owner: l.owner, Token: l.token,
		ExpiresAt: l.expiresAt.UnixMicro(), Now: now.UnixMicro()})
	return n == 1, err
}

func (o liteOps) getLease(ctx context.Context, name string) (lease, error) {
	r, err := o.q.GetLease(ctx, name)
	return lease{name: r.Name, owner: r.Owner, token: r.Token, renewedAt: time.UnixMicro(r.RenewedAt), expiresAt: time.UnixMicro(r.ExpiresAt)}, err
}

func (o liteOps) releaseLease(ctx context.Context, name string, token int64) (bool, error) {
	n, err := o.q.ReleaseLease(ctx, litedb.ReleaseLeaseParams{Name: name, Token: token})
	return n == 1, err
}

func liteSchedule(r litedb.AlkSchedule) ScheduleInfo {
	return ScheduleInfo{Name: r.Name, Spec: r.Spec, TZ: r.Tz, Queue: r.Queue, Payload: r.Payload,
		Priority: int(r.Priority), MaxAttempts: int(r.MaxAttempts), NextFireAt: time.UnixMicro(r.NextFireAt),
		Paused: r.Paused, LastFiredAt: fromMicros(r.LastFiredAt), CreatedAt: time.UnixMicro(r.CreatedAt),
		UpdatedAt: time.UnixMicro(r.UpdatedAt), Headers: decodeHeadersPtr(r.Headers)}
}
