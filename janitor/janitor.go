// Package janitor runs alkstore's maintenance on a schedule: event
// partitions created ahead and dropped when expired (PostgreSQL), expired
// headless compaction rows, stream retention, log compaction and expired
// tombstones, expired jobs, finished jobs past their queue's retention, and
// SQLite's notification rows. Every task runs
// in bounded batches that skip rows other transactions hold, within a time
// budget per pass, so several janitors can run at once and none ever waits
// on an active key. Nothing it deletes is needed for correctness.
package janitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alkstore/alkstore/store"
)

// Opts configure a janitor. Zero values take the defaults; a negative
// one is refused with store.ErrInvalidArgument (Check) by RunOnce, Run and
// client.Client.Start.
type Opts struct {
	BatchSize          int           // rows per statement; default 500
	Budget             time.Duration // wall time per pass; default 2s
	Interval           time.Duration // between passes in Run; default 30s
	NotificationMaxAge time.Duration // SQLite notifications kept this long; default 1h
	NotificationKeep   int           // and at most this many; default 10,000
	// Event partitions kept ready ahead of the offsets (PostgreSQL; see
	// store.PartitionOpts for the defaults and bounds). Values out of
	// range fail every pass with ErrInvalidArgument, on SQLite too, while
	// its other tasks still run.
	Partitions store.PartitionOpts
	Logger     *slog.Logger // default slog.Default()
}

// Report counts what one pass did.
type Report struct {
	// PostgreSQL event partitions created ahead, and dropped whole because
	// every event in them was past retention (not counted in
	// RetentionDeleted, which counts the rows deleted one by one).
	PartitionsCreated   int64
	PartitionsDropped   int64
	HeadlessDeleted     int64
	RetentionDeleted    int64
	Compacted           int64
	TombstonesDeleted   int64
	JobsExpired         int64
	FinishedJobsDeleted int64 // finished jobs past their queue's retention
	NotificationsPruned int64
	// OutOfBudget is set when the pass stopped at its time budget with work
	// possibly left; the next pass continues.
	OutOfBudget bool
	Elapsed     time.Duration
}

// Janitor runs maintenance passes on one store.
type Janitor struct {
	s    *store.Store
	opts Opts
	bad  error // opts' Check: every RunOnce and Run fail with it
}

// Check refuses a negative BatchSize, Budget, Interval, NotificationMaxAge
// or NotificationKeep with an error matching store.ErrInvalidArgument that
// names the field: they were taken as the defaults, silently (attack56b
// F4). Partitions are checked by each pass (see Opts).
func (o Opts) Check() error {
	for _, f := range []struct {
		name string
		neg  bool
		v    any
	}{
		{"BatchSize", o.BatchSize < 0, o.BatchSize},
		{"Budget", o.Budget < 0, o.Budget},
		{"Interval", o.Interval < 0, o.Interval},
		{"NotificationMaxAge", o.NotificationMaxAge < 0, o.NotificationMaxAge},
		{"NotificationKeep", o.NotificationKeep < 0, o.NotificationKeep},
	} {
		if f.neg {
			return fmt.Errorf("%w: janitor.Opts.%s %v is negative", store.ErrInvalidArgument, f.name, f.v)
		}
	}
	return nil
}

// New returns a janitor for s. Options Check refuses make its RunOnce and
// Run fail at once.
func New(s *store.Store, opts Opts) *Janitor {
	if err := opts.Check(); err != nil {
		return &Janitor{s: s, opts: opts, bad: &store.OpError{Op: "janitor", Err: err}}
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	if opts.Budget <= 0 {
		opts.Budget = 2 * time.Second
	}
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.NotificationMaxAge <= 0 {
		opts.NotificationMaxAge = time.Hour
	}
	if opts.NotificationKeep <= 0 {
		opts.NotificationKeep = 10000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Janitor{s: s, opts: opts}
}

// RunOnce runs every task until it has nothing left or the pass's budget
// is spent, and reports the counts. Running out of budget is not an error
// (on SQLite it is also how a pass gives way to a transaction holding the
// writer slot); a database error is.
func (j *Janitor) RunOnce(ctx context.Context) (Report, error) {
	if j.bad != nil {
		return Report{}, j.bad
	}
	start := time.Now()
	pass, cancel := context.WithTimeout(ctx, j.opts.Budget)
	defer cancel()
	m := j.s.Maintenance()
	var r Report
	tasks := []struct {
		count *int64
		run   func(context.Context, int) (int64, error)
	}{
		{&r.HeadlessDeleted, m.DeleteExpiredHeadless},
		{&r.Compacted, m.CompactSuperseded}, // first: a tombstone goes once compaction walked past it
		{&r.TombstonesDeleted, m.DeleteExpiredTombstones},
		{&r.RetentionDeleted, m.ApplyRetention},
		{&r.JobsExpired, m.SweepExpiredJobs},
		{&r.FinishedJobsDeleted, m.DeleteFinishedJobs},
	}
	// Partitions: created ahead first (a pass short of time still makes
	// room), dropped before the row deletes, which then skip their rows.
	// Opts.Partitions out of range (ErrInvalidArgument) fail the pass
	// without stopping its other tasks: a configuration mistake in one
	// option must not stop every cleanup (it is returned at the end).
	var badOpts error
	r.PartitionsCreated, badOpts = m.CreatePartitions(pass, j.opts.Partitions)
	var err error
	if !errors.Is(badOpts, store.ErrInvalidArgument) {
		err, badOpts = badOpts, nil
	}
	if err == nil {
		r.PartitionsDropped, err = m.DropExpiredPartitions(pass)
	}
	for _, t := range tasks {
		if err != nil {
			break
		}
		if err = drain(pass, t.run, j.opts.BatchSize, t.count); err != nil {
			break
		}
	}
	if err == nil && pass.Err() == nil {
		r.NotificationsPruned, err = m.PruneNotifications(pass, j.opts.NotificationMaxAge, j.opts.NotificationKeep)
	}
	r.Elapsed = time.Since(start)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		r.OutOfBudget, err = true, nil
	}
	if err == nil && pass.Err() != nil && ctx.Err() == nil {
		r.OutOfBudget = true
	}
	return r, errors.Join(badOpts, err)
}

// drain runs one task's batches until a batch comes back short.
func drain(ctx context.Context, run func(context.Context, int) (int64, error), batch int, count *int64) error {
	for ctx.Err() == nil {
		n, err := run(ctx, batch)
		*count += n
		if err != nil {
			return err
		}
		if n < int64(batch) {
			return nil
		}
	}
	return ctx.Err()
}

// Run runs a pass every Interval until ctx is done or the store shuts
// down (it runs as one of the store's loops, so Close waits for a pass in
// flight). Failed passes are logged and retried at the next interval. It
// returns nil after ctx was cancelled, an error matching
// store.ErrClosed when the store's shutdown stopped it, and one matching
// store.ErrInvalidArgument at once, running no pass, when Opts.Check
// refuses its options.
func (j *Janitor) Run(ctx context.Context) error {
	if j.bad != nil {
		return j.bad
	}
	return j.s.RunLoop(ctx, "janitor", func(ctx context.Context) error {
		t := time.NewTicker(j.opts.Interval)
		defer t.Stop()
		for {
			r, err := j.RunOnce(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				j.opts.Logger.Warn("alkstore: janitor pass failed", "error", err)
			default:
				j.opts.Logger.Debug("alkstore: janitor pass", "report", r)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
}
