package tests

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// skipRowsTrigger installs an application's BEFORE INSERT trigger on the
// store's table (jobs or events) that skips every row whose payload is
// "skip": a PostgreSQL row trigger returning NULL, SQLite's RAISE(IGNORE).
// The INSERT then succeeds with fewer rows than it was given.
func skipRowsTrigger(t *testing.T, e *engineEnv, table string) {
	t.Helper()
	if e.name == "pg" {
		e.execSQL(t, `CREATE FUNCTION public.test_skip_`+table+`() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.payload = 'skip'::bytea THEN RETURN NULL; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER test_skip_`+table+` BEFORE INSERT ON alkstore.`+table+` FOR EACH ROW EXECUTE FUNCTION public.test_skip_`+table+`()`)
		return
	}
	e.execSQL(t, `CREATE TRIGGER test_skip_`+table+` BEFORE INSERT ON alk_`+table+` WHEN NEW.payload = CAST('skip' AS BLOB)
			BEGIN SELECT RAISE(IGNORE); END`)
}

// requireBatchRefused checks a batch's error: wrapped with the operation and
// the name, and saying that a trigger skipped rows.
func requireBatchRefused(t *testing.T, err error, op, name string) {
	t.Helper()
	require.Error(t, err)
	var oe *store.OpError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, op, oe.Op)
	assert.Equal(t, name, oe.Name)
	assert.Contains(t, err.Error(), "a trigger skipped ")
	assert.Contains(t, err.Error(), "the batch is refused, all or none")
}

// EnqueueMany is all or none. A batch an application's trigger shortened
// (one row skipped) stores none of its jobs, in either statement form (the
// jobs alike but for their payloads, or not), so that a caller retrying the
// batch does not enqueue the other jobs twice. On PostgreSQL the auto-commit
// statement once committed the other 19 and then failed with "inserted 19
// rows, expected 20" (second fresh-eyes review of wave 29).
func TestEnqueueManySkippedByATriggerStoresNone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("skipped")
		_, err := q.Enqueue(c, []byte("before"), store.EnqueueOpts{})
		require.NoError(t, err)
		skipRowsTrigger(t, e, "jobs")
		for _, alike := range []bool{true, false} {
			jobs := make([]store.NewJob, 20)
			for i := range jobs {
				jobs[i] = store.NewJob{Payload: []byte("x")}
				if !alike {
					jobs[i].Opts.Priority = i % 3
				}
			}
			jobs[7].Payload = []byte("skip")
			ids, err := q.EnqueueMany(c, jobs)
			requireBatchRefused(t, err, "enqueue many", "skipped")
			assert.Nil(t, ids)
			st, err := q.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, int64(1), st.Ready, "alike %v: EnqueueMany stores all or none", alike)
		}
		// The batch without the skipped job goes in whole.
		jobs := make([]store.NewJob, 20)
		for i := range jobs {
			jobs[i] = store.NewJob{Payload: []byte("x")}
		}
		ids, err := q.EnqueueMany(c, jobs)
		require.NoError(t, err)
		assert.Len(t, ids, 20)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(21), st.Ready)
	})
}

// PublishMany is all or none too, keyed events (and their heads) included:
// a batch a trigger shortened stores no event and moves no head.
func TestPublishManySkippedByATriggerStoresNone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("skipped")
		first, err := st.PublishWithKey(c, "k", []byte("before"))
		require.NoError(t, err)
		skipRowsTrigger(t, e, "events")
		k, other := "k", "other"
		for _, keyed := range []bool{false, true} {
			msgs := make([]store.Message, 20)
			for i := range msgs {
				msgs[i] = store.Message{Payload: []byte("x")}
				if keyed && i%2 == 0 {
					msgs[i].Key = &k
				} else if keyed {
					msgs[i].Key = &other
				}
			}
			msgs[7].Payload = []byte("skip")
			offs, err := st.PublishMany(c, msgs)
			requireBatchRefused(t, err, "publish many", "skipped")
			assert.Nil(t, offs)
			evs, err := st.ReadSince(c, 0, 100)
			require.NoError(t, err)
			assert.Equal(t, []int64{first}, offsets(evs), "keyed %v: PublishMany stores all or none", keyed)
			heads, err := st.Heads(c, "", 10)
			require.NoError(t, err)
			require.Len(t, heads, 1, "%+v", heads)
			assert.Equal(t, first, heads[0].Offset, "the key's head stays at the stored event")
		}
	})
}

// A batch with unique jobs is all or none as well: on PostgreSQL its rounds
// (insert, then read the holders of the keys not inserted) once committed
// each on its own, so the jobs the first round stored stayed when a job
// without a key was skipped.
func TestEnqueueManyUniqueSkippedByATriggerStoresNone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("skipped")
		_, err := q.Enqueue(c, []byte("before"), store.EnqueueOpts{})
		require.NoError(t, err)
		skipRowsTrigger(t, e, "jobs")
		jobs := []store.NewJob{
			{Payload: []byte("x"), Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: "k1"}}},
			{Payload: []byte("x")},
			{Payload: []byte("skip")},
			{Payload: []byte("x"), Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: "k2"}}},
		}
		ids, err := q.EnqueueMany(c, jobs)
		require.Error(t, err)
		assert.Nil(t, ids)
		assert.Contains(t, err.Error(), "a trigger skipped ")
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(1), st.Ready, "EnqueueMany with unique jobs stores all or none")
		// The keys were not taken.
		jobs[2].Payload = []byte("x")
		placed, err := q.EnqueueManyUnique(c, []store.NewJob{jobs[0], jobs[3]})
		require.NoError(t, err)
		for _, p := range placed {
			assert.False(t, p.Duplicate)
		}
	})
}

// A single Enqueue, Publish or PublishWithKey that an application's trigger
// skips says so. Its INSERT ... RETURNING gives no row, and the drivers' "no
// rows" once came back as ErrNotFound ("not found: no rows in result set"),
// which reads as a missing job (fresh-eyes review of wave 30). A unique job
// the trigger skips is not placed, and the error names the trigger too.
func TestSingleWriteSkippedByATriggerSaysSo(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q, st := s.Queue("skipped"), s.Stream("skipped")
		skipRowsTrigger(t, e, "jobs")
		skipRowsTrigger(t, e, "events")
		requireSkipped := func(err error, op, what string) {
			t.Helper()
			var oe *store.OpError
			require.True(t, errors.As(err, &oe), "%v", err)
			assert.Equal(t, op, oe.Op)
			assert.Equal(t, "skipped", oe.Name)
			assert.ErrorContains(t, err, "a trigger skipped the "+what+": nothing was stored")
			assert.NotErrorIs(t, err, store.ErrNotFound, "nothing is missing: the write was skipped")
		}
		_, err := q.Enqueue(c, []byte("skip"), store.EnqueueOpts{})
		requireSkipped(err, "enqueue", "job")
		_, err = st.Publish(c, []byte("skip"))
		requireSkipped(err, "publish", "event")
		_, err = st.PublishWithKey(c, "k", []byte("skip"))
		requireSkipped(err, "publish", "event")

		_, err = q.EnqueueUnique(c, []byte("skip"), store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u"}})
		require.Error(t, err)
		assert.ErrorContains(t, err, "a trigger skips them")
		stats, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, stats.Ready+stats.Scheduled, "nothing was stored")
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, evs, "nothing was published")
	})
}
