package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Job history (issue 14, item 7): distinct final states, every attempt's
// error, and per-queue retention of finished jobs applied by the janitor.

// claimOne claims the queue's next job, which must exist.
func claimOne(t *testing.T, q *store.Queue) *store.Job {
	t.Helper()
	jobs, err := q.Claim(ctx(t), "w", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

func jobState(t *testing.T, q *store.Queue, id int64) store.JobState {
	t.Helper()
	j, err := q.Job(ctx(t), id)
	require.NoError(t, err)
	return j.State
}

// TestJobsEndInDistinctStates: an acked job is deleted by default and kept
// as completed when its queue keeps completed jobs (Ack and AckMany); a job
// past its ExpiresAt ends expired (through Claim and SweepExpired alike);
// a job out of attempts or failed for good ends dead. Each final job has
// its FinishedAt.
func TestJobsEndInDistinctStates(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)

		plain := s.Queue("plain")
		id, err := plain.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, claimOne(t, plain).Ack(c))
		_, err = plain.Job(c, id)
		require.ErrorIs(t, err, store.ErrNotFound, "by default an acked job is deleted")

		kept := s.Queue("kept")
		require.NoError(t, kept.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
		id, err = kept.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		j := claimOne(t, kept)
		clk.Advance(time.Second)
		require.NoError(t, j.Ack(c))
		j, err = kept.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobCompleted, j.State)
		require.NotNil(t, j.FinishedAt)
		assert.True(t, j.FinishedAt.Equal(clk.Now()))
		assert.Nil(t, j.ClaimExpiresAt)
		require.ErrorIs(t, j.Ack(c), store.ErrInvalidArgument, "a completed job is settled")

		// AckMany: the kept queue's jobs end completed, the plain queue's go.
		many, err := kept.EnqueueMany(c, []store.NewJob{{}, {}, {}})
		require.NoError(t, err)
		claimed, err := kept.Claim(c, "w", 3, time.Minute)
		require.NoError(t, err)
		n, err := kept.AckMany(c, claimed)
		require.NoError(t, err)
		assert.EqualValues(t, 3, n)
		for _, id := range many {
			assert.Equal(t, store.JobCompleted, jobState(t, kept, id))
		}
		plainMany, err := plain.EnqueueMany(c, []store.NewJob{{}, {}})
		require.NoError(t, err)
		claimed, err = plain.Claim(c, "w", 2, time.Minute)
		require.NoError(t, err)
		n, err = plain.AckMany(c, claimed)
		require.NoError(t, err)
		assert.EqualValues(t, 2, n)
		for _, id := range plainMany {
			_, err = plain.Job(c, id)
			require.ErrorIs(t, err, store.ErrNotFound)
		}

		// Expired: a pending one swept, a lapsed claim buried by Claim.
		exp := s.Queue("exp")
		pending, err := exp.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Minute)})
		require.NoError(t, err)
		running, err := exp.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Minute), Priority: 1})
		require.NoError(t, err)
		assert.Equal(t, running, claimOne(t, exp).ID)
		clk.Advance(2 * time.Minute)
		none, err := exp.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, none)
		assert.Equal(t, store.JobExpired, jobState(t, exp, running), "a lapsed claim past ExpiresAt")
		swept, err := exp.SweepExpired(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, swept)
		j, err = exp.Job(c, pending)
		require.NoError(t, err)
		assert.Equal(t, store.JobExpired, j.State)
		assert.Equal(t, "expired", j.LastError)
		assert.NotNil(t, j.FinishedAt)
		assert.Empty(t, j.Errors, "expiry is no attempt's error")

		// Dead: Fail, Retry out of attempts, a last claim that lapsed.
		dead := s.Queue("dead")
		failed, err := dead.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, claimOne(t, dead).Fail(c, "permanent"))
		assert.Equal(t, store.JobDead, jobState(t, dead, failed))
		spent, err := dead.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		ok, err := claimOne(t, dead).Retry(c, 0, "again?")
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Equal(t, store.JobDead, jobState(t, dead, spent))
		lapsed, err := dead.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		claimOne(t, dead)
		clk.Advance(2 * time.Minute)
		none, err = dead.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, none)
		assert.Equal(t, store.JobDead, jobState(t, dead, lapsed))

		// Back and forth: a requeued job is pending again, a cancelled one
		// final. A job is finished (finished_at set) exactly while its state
		// is final: SQLite's finished-jobs and expiring indexes read
		// finished_at for that (schema 00025), and Jobs lists a final state
		// through them.
		require.NoError(t, dead.Requeue(c, failed))
		require.NoError(t, dead.Cancel(c, failed))
		require.NoError(t, dead.Requeue(c, failed))
		running, err = dead.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Hour), Priority: 1})
		require.NoError(t, err)
		assert.Equal(t, running, claimOne(t, dead).ID)
		n, err = dead.RequeueDead(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, n)
		table := map[string]string{"pg": "alkstore.jobs", "lite": "alk_jobs"}[e.name]
		var wrong int
		require.NoError(t, e.sqlDB(t).QueryRowContext(c, "SELECT count(*) FROM "+table+
			" WHERE (state IN ('pending', 'running')) <> (finished_at IS NULL)").Scan(&wrong))
		assert.Zero(t, wrong, "jobs whose finished_at disagrees with their state")
		for state, want := range map[store.JobState]int{store.JobExpired: 2, store.JobCompleted: 4} {
			var all []*store.Job
			for _, q := range []*store.Queue{exp, kept} {
				got, err := q.Jobs(c, store.JobsOpts{State: state})
				require.NoError(t, err)
				all = append(all, got...)
			}
			assert.Len(t, all, want, "%s jobs listed", state)
		}
	})
}

// TestEveryAttemptErrorIsKept: each attempt's error is kept with its
// attempt number and time, oldest first, the lapsed last claim included;
// a job failing more often keeps the last MaxAttemptErrors.
func TestEveryAttemptErrorIsKept(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("errs")
		c := ctx(t)

		id, err := q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 3})
		require.NoError(t, err)
		var times []time.Time
		for _, cause := range []string{"first", "second"} {
			ok, err := claimOne(t, q).Retry(c, 0, cause)
			require.NoError(t, err)
			require.True(t, ok)
			times = append(times, clk.Now())
			clk.Advance(time.Second)
		}
		claimOne(t, q)
		clk.Advance(2 * time.Minute) // the last claim lapses
		none, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Empty(t, none)
		times = append(times, clk.Now())
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State)
		require.Len(t, j.Errors, 3)
		for i, want := range []string{"first", "second", "attempts exhausted: the last claim expired"} {
			assert.Equal(t, i+1, j.Errors[i].Attempt)
			assert.Equal(t, want, j.Errors[i].Error)
			assert.True(t, j.Errors[i].At.Equal(times[i]), "error %d at %s, want %s", i, j.Errors[i].At, times[i])
		}
		assert.Equal(t, j.LastError, j.Errors[2].Error)

		// Bounded: 25 failures keep the last 20, the Fail included.
		const failures = store.MaxAttemptErrors + 5
		id, err = q.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 100})
		require.NoError(t, err)
		for i := 1; i < failures; i++ {
			ok, err := claimOne(t, q).Retry(c, 0, fmt.Sprintf("failure %d", i))
			require.NoError(t, err)
			require.True(t, ok)
		}
		require.NoError(t, claimOne(t, q).Fail(c, "given up"))
		j, err = q.Job(c, id)
		require.NoError(t, err)
		require.Len(t, j.Errors, store.MaxAttemptErrors)
		assert.Equal(t, failures-store.MaxAttemptErrors+1, j.Errors[0].Attempt)
		assert.Equal(t, fmt.Sprintf("failure %d", failures-store.MaxAttemptErrors+1), j.Errors[0].Error)
		last := j.Errors[len(j.Errors)-1]
		assert.Equal(t, failures, last.Attempt)
		assert.Equal(t, "given up", last.Error)

		// A requeued job keeps its history; its next attempt adds to it.
		require.NoError(t, q.Requeue(c, id))
		_, err = claimOne(t, q).Retry(c, 0, "after requeue")
		require.NoError(t, err)
		j, err = q.Job(c, id)
		require.NoError(t, err)
		require.Len(t, j.Errors, store.MaxAttemptErrors)
		assert.Equal(t, "after requeue", j.Errors[len(j.Errors)-1].Error)
		assert.Equal(t, 1, j.Errors[len(j.Errors)-1].Attempt)
	})
}

// TestJanitorDeletesFinishedJobsPastRetention: completed jobs go once
// older than CompletedRetention, dead, cancelled and expired ones once
// older than DeadRetention, in batches; a queue without settings keeps its
// dead jobs; lowering CompletedRetention to 0 clears the completed ones.
func TestJanitorDeletesFinishedJobsPastRetention(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		jan := countingJanitor(s, janitor.Opts{BatchSize: 2})
		pass := func() int64 {
			t.Helper()
			r, err := jan.RunOnce(c)
			require.NoError(t, err)
			return r.FinishedJobsDeleted
		}
		gone := func(q *store.Queue, ids ...int64) {
			t.Helper()
			for _, id := range ids {
				_, err := q.Job(c, id)
				require.ErrorIs(t, err, store.ErrNotFound, "job %d", id)
			}
		}
		there := func(q *store.Queue, ids ...int64) {
			t.Helper()
			for _, id := range ids {
				_, err := q.Job(c, id)
				require.NoError(t, err, "job %d", id)
			}
		}

		q := s.Queue("hist")
		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour, DeadRetention: 24 * time.Hour}))
		other := s.Queue("forever") // no settings: dead jobs stay
		completed, err := q.EnqueueMany(c, []store.NewJob{{}, {}, {}, {}, {}})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 5, time.Minute)
		require.NoError(t, err)
		_, err = q.AckMany(c, jobs)
		require.NoError(t, err)
		dead, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, claimOne(t, q).Fail(c, "x"))
		cancelled, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Cancel(c, cancelled))
		expired, err := q.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Second)})
		require.NoError(t, err)
		clk.Advance(time.Second)
		_, err = q.SweepExpired(c)
		require.NoError(t, err)
		forever, err := other.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, claimOne(t, other).Fail(c, "x"))

		clk.Advance(30 * time.Minute)
		assert.Zero(t, pass(), "nothing is past retention yet")
		there(q, completed...)

		clk.Advance(time.Hour)
		assert.EqualValues(t, 5, pass(), "the completed jobs, two per batch")
		gone(q, completed...)
		there(q, dead, cancelled, expired)

		clk.Advance(24 * time.Hour)
		assert.EqualValues(t, 3, pass(), "dead, cancelled and expired")
		gone(q, dead, cancelled, expired)
		there(other, forever)

		clk.Advance(1000 * time.Hour)
		assert.Zero(t, pass())
		there(other, forever)

		// Completed jobs kept under a retention go once it is back to 0.
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, claimOne(t, q).Ack(c))
		assert.Equal(t, store.JobCompleted, jobState(t, q, id))
		require.NoError(t, q.Configure(c, store.QueueConfig{}))
		clk.Advance(time.Microsecond)
		assert.EqualValues(t, 1, pass())
		gone(q, id)
	})
}

// TestQueueConfigure: settings round-trip through Store.Queues; a negative
// retention is refused; configuring keeps a paused queue paused.
func TestQueueConfigure(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("conf")
		require.ErrorIs(t, q.Configure(c, store.QueueConfig{DeadRetention: -time.Second}), store.ErrInvalidArgument)
		want := store.QueueConfig{CompletedRetention: 90 * time.Minute, DeadRetention: 7 * 24 * time.Hour}
		require.NoError(t, q.Configure(c, want))
		table := "alkstore.queues"
		paused := "true"
		if e.name == "lite" {
			table, paused = "alk_queues", "1"
		}
		e.execSQL(t, "UPDATE "+table+" SET paused = "+paused+" WHERE name = 'conf'") // what Pause will write
		require.NoError(t, q.Configure(c, want))
		qs, err := s.Queues(c)
		require.NoError(t, err)
		require.Len(t, qs, 1)
		assert.Equal(t, "conf", qs[0].Name)
		assert.Equal(t, want, qs[0].Config)
		assert.True(t, qs[0].Paused, "Configure leaves the paused flag alone")
		require.ErrorIs(t, s.Queue("").Configure(c, want), store.ErrInvalidName)
	})
}

// TestQueueConfigureRefusesRetentionsBelowAMicrosecond: retentions are
// stored in microseconds, so one under 1µs is refused with
// ErrInvalidArgument naming its field before any I/O, as
// Stream.Configure's durations are, and the settings stored before stay.
// Before session 60 a DeadRetention of 1-999ns failed on the table's CHECK
// with the driver's error, and a CompletedRetention that small was stored
// as 0, turning the retention off: the next acked job was deleted
// (attack60 F2). A remainder below 1µs is dropped, as Stream.Configure
// drops it: 1.5µs reads back as 1µs.
func TestQueueConfigureRefusesRetentionsBelowAMicrosecond(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("conf-us")
		config := func() (store.QueueConfig, bool) {
			qs, err := s.Queues(c)
			require.NoError(t, err)
			for _, qi := range qs {
				if qi.Name == q.Name() {
					return qi.Config, true
				}
			}
			return store.QueueConfig{}, false
		}
		refused := map[string][]store.QueueConfig{
			"CompletedRetention": {{CompletedRetention: time.Nanosecond}, {CompletedRetention: 500 * time.Nanosecond},
				{CompletedRetention: 999 * time.Nanosecond, DeadRetention: time.Hour}, {CompletedRetention: -time.Nanosecond}},
			"DeadRetention": {{DeadRetention: time.Nanosecond}, {DeadRetention: 999 * time.Nanosecond, CompletedRetention: time.Hour},
				{DeadRetention: -time.Nanosecond}},
		}
		for field, cfgs := range refused {
			for _, cfg := range cfgs {
				err := q.Configure(c, cfg)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", cfg)
				assert.ErrorContains(t, err, "QueueConfig."+field, "the error names the field: %+v", cfg)
			}
		}
		_, stored := config()
		assert.False(t, stored, "nothing was written for a refused configuration")

		kept := store.QueueConfig{CompletedRetention: time.Hour, DeadRetention: 24 * time.Hour}
		require.NoError(t, q.Configure(c, kept))
		for _, cfgs := range refused {
			for _, cfg := range cfgs {
				require.ErrorIs(t, q.Configure(c, cfg), store.ErrInvalidArgument)
			}
		}
		got, _ := config()
		assert.Equal(t, kept, got, "a refused configuration leaves the stored one")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, claimOne(t, q).Ack(c))
		assert.Equal(t, store.JobCompleted, jobState(t, q, id), "the retention still keeps acked jobs")

		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Microsecond, DeadRetention: time.Microsecond}),
			"1µs is the resolution")
		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: 1500 * time.Nanosecond, DeadRetention: 2500 * time.Nanosecond}))
		got, _ = config()
		assert.Equal(t, store.QueueConfig{CompletedRetention: time.Microsecond, DeadRetention: 2 * time.Microsecond}, got,
			"a remainder below 1µs is dropped")
	})
}
