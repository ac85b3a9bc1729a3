package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Every write that an application's trigger skipped, and a unique job not
// placed after its tries, matches ErrNotStored, so that a caller can tell
// "the database took the write and stored none of it" from a failure of the
// database (a driver error) and from a missing row (ErrNotFound) without
// reading the text. The error stays an *OpError naming the operation and the
// mechanism, reads as before, and on PostgreSQL a refused batch and a
// refused fire keep the driver's error (SQLSTATE AKSKP) reachable with
// errors.As. (Noticed in session 50: these errors matched no sentinel,
// though errors.go says every error wraps one or a driver error; and
// PostgreSQL's AKSKP error was dropped from the chain.)
func TestWritesATriggerSkippedMatchErrNotStored(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		start, clk, s, q := skippingScheduleStore(t, e) // skips jobs whose payload is "skip"
		c := ctx(t)
		st := s.Stream("skipped")
		skipRowsTrigger(t, e, "events")
		check := func(err error, op, name, says string, driver bool) {
			t.Helper()
			require.Error(t, err)
			assert.ErrorIs(t, err, store.ErrNotStored)
			assert.NotErrorIs(t, err, store.ErrNotFound)
			var oe *store.OpError
			if assert.True(t, errors.As(err, &oe), "%v", err) {
				assert.Equal(t, op, oe.Op)
				assert.Equal(t, name, oe.Name)
			}
			assert.ErrorContains(t, err, says)
			assert.NotContains(t, err.Error(), "not stored", "the text reads as before")
			var pgErr *pgconn.PgError
			if driver && e.name == "pg" {
				if assert.True(t, errors.As(err, &pgErr), "the driver's error stays reachable: %v", err) {
					assert.Equal(t, "AKSKP", pgErr.Code)
				}
			}
		}
		jobs := func(alike bool) []store.NewJob {
			js := make([]store.NewJob, 5)
			for i := range js {
				js[i] = store.NewJob{Payload: []byte("x")}
				if !alike {
					js[i].Opts.Priority = i % 2
				}
			}
			js[3].Payload = []byte("skip")
			return js
		}

		_, err := q.Enqueue(c, []byte("skip"), store.EnqueueOpts{})
		check(err, "enqueue", q.Name(), "a trigger skipped the job", false)
		for _, alike := range []bool{true, false} {
			_, err = q.EnqueueMany(c, jobs(alike))
			check(err, "enqueue many", q.Name(), "the batch is refused, all or none", true)
		}
		unique := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u"}}
		_, err = q.Enqueue(c, []byte("skip"), unique)
		check(err, "enqueue", q.Name(), "not placed after 8 tries", false)
		_, err = q.EnqueueUnique(c, []byte("skip"), unique)
		check(err, "enqueue", q.Name(), "not placed after 8 tries", false)
		_, err = q.EnqueueManyUnique(c, []store.NewJob{{Payload: []byte("x"), Opts: unique},
			{Payload: []byte("skip"), Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: "v"}}}})
		check(err, "enqueue many", q.Name(), "not placed after 8 tries", false)
		mixed := jobs(false)
		mixed[0].Opts.Unique.Key = "w"
		_, err = q.EnqueueMany(c, mixed)
		check(err, "enqueue many", q.Name(), "a trigger skipped a job without a key", false)

		_, err = st.Publish(c, []byte("skip"))
		check(err, "publish", st.Name(), "a trigger skipped the event", false)
		_, err = st.PublishWithKey(c, "k", []byte("skip"))
		check(err, "publish", st.Name(), "a trigger skipped the event", false)
		k := "k"
		for _, key := range []*string{nil, &k} {
			_, err = st.PublishMany(c, []store.Message{{Payload: []byte("x"), Key: key}, {Payload: []byte("skip"), Key: key}})
			check(err, "publish many", st.Name(), "the batch is refused, all or none", true)
		}

		require.NoError(t, s.Schedule("skipped").Set(c, store.ScheduleSpec{Spec: "@every 1m", Queue: q.Name(), Payload: []byte("skip")}))
		_, err = s.Schedule("skipped").Trigger(c)
		check(err, "trigger schedule", "skipped", "a trigger skipped the job", false)
		clk.Set(start.Add(90 * time.Second))
		_, err = s.Scheduler("skips", store.SchedulerOpts{}).RunOnce(c)
		check(err, "fire schedule", "skipped", "a trigger skipped the schedule's job", true)

		stats, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, stats.Ready+stats.Scheduled, "nothing was stored")
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, evs, "nothing was published")
	})
}
