package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestEnqueueManyIDsFollowTheJobs: EnqueueMany returns each job's id in
// batch order, whichever statement stored it: runs of jobs that differ
// only in their payloads (one statement a run, EnqueueJobsAlike) and jobs
// with options of their own
// (each one's row carries them), in one batch, after the queue's newest job
// was deleted (AUTOINCREMENT never hands its id out again), alone and
// inside the caller's transaction.
func TestEnqueueManyIDsFollowTheJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.Queue("ids")
		gone, err := q.EnqueueMany(c, make([]store.NewJob, 3))
		require.NoError(t, err)
		require.NoError(t, q.Delete(c, gone[2]))

		var batch []store.NewJob
		add := func(n int, opts store.EnqueueOpts) {
			for range n {
				batch = append(batch, store.NewJob{Payload: fmt.Appendf(nil, "job %d", len(batch)), Opts: opts})
			}
		}
		add(20, store.EnqueueOpts{})                                                    // a run of alike jobs
		add(1, store.EnqueueOpts{Priority: 5})                                          // one of its own
		add(3, store.EnqueueOpts{Delay: time.Hour})                                     // a run too short for a statement
		add(17, store.EnqueueOpts{Headers: map[string]string{"tenant": "a"}})           // a run again
		add(2, store.EnqueueOpts{MaxAttempts: 3, ExpiresAt: time.Now().Add(time.Hour)}) // the batch's last
		batch[30].Payload = nil                                                         // nil stays nil
		batch[31].Payload = []byte{}                                                    // empty stays empty

		check := func(ids []int64) {
			require.Len(t, ids, len(batch))
			for i, id := range ids {
				if i > 0 {
					assert.Greater(t, id, ids[i-1])
				}
				assert.Greater(t, id, gone[2], "a deleted job's id is never reused")
				j, err := q.Job(c, id)
				require.NoError(t, err)
				assert.Equal(t, batch[i].Payload, j.Payload, "job %d", i)
				assert.Equal(t, batch[i].Opts.Priority, j.Priority, "job %d", i)
				assert.Equal(t, batch[i].Opts.Headers, j.Headers, "job %d", i)
				assert.Equal(t, batch[i].Opts.ExpiresAt.IsZero(), j.ExpiresAt == nil, "job %d", i)
				if batch[i].Opts.MaxAttempts != 0 {
					assert.Equal(t, batch[i].Opts.MaxAttempts, j.MaxAttempts, "job %d", i)
				}
			}
		}
		ids, err := q.EnqueueMany(c, batch)
		require.NoError(t, err)
		check(ids)
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			ids, err = q.EnqueueManyTx(ctx, tx, batch)
			return err
		}))
		check(ids)
	})
}

// An application's trigger that inserts a job of its own for each job of
// a queue (an audit trail, say) takes ids between the batch's: EnqueueMany
// still returns the ids of the caller's jobs, in order, alone and inside
// the caller's transaction, and stores each job and its audit job once;
// Enqueue returns its own job's id. On
// SQLite the ids were once computed back from the statement's last id, and
// 19 of 20 were the audit rows or no row (fresh-eyes review); since the
// batch is inserted without RETURNING and its ids proven contiguous, a
// batch whose ids are not is rolled back and inserted again with
// RETURNING, which a rollback that kept the first try would show here as
// jobs stored twice.
func TestEnqueueManyIDsBesideATriggersJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q, audit := s.Queue("main"), s.Queue("audit")
		_, err := audit.Enqueue(c, []byte("x"), store.EnqueueOpts{}) // registers the queue
		require.NoError(t, err)
		fanoutTrigger(t, e, "AFTER")
		jobs := make([]store.NewJob, 40)
		for i := range jobs {
			jobs[i] = store.NewJob{Payload: fmt.Appendf(nil, "p%d", i)}
		}
		check := func(ids []int64, batches int64) {
			require.Len(t, ids, len(jobs))
			for i, id := range ids {
				j, err := q.Job(c, id)
				require.NoError(t, err, "job %d: id %d", i, id)
				assert.Equal(t, "main", j.Queue, "job %d: id %d", i, id)
				assert.Equal(t, fmt.Sprintf("p%d", i), string(j.Payload), "job %d: id %d", i, id)
			}
			st, err := q.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, batches*int64(len(jobs)), st.Ready, "main's jobs, each stored once")
			st, err = audit.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, 1+batches*int64(len(jobs)), st.Ready, "audit's jobs, one a main job")
		}
		ids, err := q.EnqueueMany(c, jobs)
		require.NoError(t, err)
		check(ids, 1)
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			ids, err = q.EnqueueManyTx(ctx, tx, jobs)
			return err
		}))
		check(ids, 2)
		// One job's id, beside its audit job (on SQLite the statement's
		// last_insert_rowid, which the trigger's insert leaves alone).
		id, err := q.Enqueue(c, []byte("single"), store.EnqueueOpts{})
		require.NoError(t, err)
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, "main", j.Queue)
		assert.Equal(t, "single", string(j.Payload))
	})
}

// TestEnqueueManyIDsBesideABeforeTriggersJobs: an application's BEFORE
// INSERT trigger that inserts a job of its own for each job of a queue
// takes an id between every two of the batch's while the batch is
// inserted (an AFTER trigger's jobs, above, come after the whole batch on
// PostgreSQL). EnqueueMany still returns the ids of the caller's jobs, in
// order, alone and inside the caller's transaction. On PostgreSQL a batch
// of alike jobs gets back its first id alone when its ids are contiguous
// (EnqueueJobsAlike), and all of them when they are not, as here.
func TestEnqueueManyIDsBesideABeforeTriggersJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q, audit := s.Queue("main"), s.Queue("audit")
		_, err := audit.Enqueue(c, []byte("x"), store.EnqueueOpts{}) // registers the queue
		require.NoError(t, err)
		fanoutTrigger(t, e, "BEFORE")
		jobs := make([]store.NewJob, 40)
		for i := range jobs {
			jobs[i] = store.NewJob{Payload: fmt.Appendf(nil, "p%d", i)}
		}
		check := func(ids []int64, batches int64) {
			require.Len(t, ids, len(jobs))
			assert.Greater(t, ids[len(ids)-1]-ids[0]+1, int64(len(ids)), "the audit jobs' ids are between the batch's")
			for i, id := range ids {
				j, err := q.Job(c, id)
				require.NoError(t, err, "job %d: id %d", i, id)
				assert.Equal(t, "main", j.Queue, "job %d: id %d", i, id)
				assert.Equal(t, fmt.Sprintf("p%d", i), string(j.Payload), "job %d: id %d", i, id)
			}
			st, err := q.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, batches*int64(len(jobs)), st.Ready, "main's jobs, each stored once")
			st, err = audit.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, 1+batches*int64(len(jobs)), st.Ready, "audit's jobs, one a main job")
		}
		ids, err := q.EnqueueMany(c, jobs)
		require.NoError(t, err)
		check(ids, 1)
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			ids, err = q.EnqueueManyTx(ctx, tx, jobs)
			return err
		}))
		check(ids, 2)
	})
}

// TestEnqueueManyPayloadsKeepEveryByte: a batch of jobs alike but for their
// payloads (on SQLite one EnqueueJobsAlike, whose payloads travel as a
// JSONB array of raw strings) stores each payload's bytes as they are:
// every byte value, NUL and invalid UTF-8 included; sizes on each side of
// the JSONB header's size classes (11 and 12, 255 and 256, 65,535 and
// 65,536 bytes); empty kept apart from nil (NULL); alone, inside the
// caller's transaction, and in batches so small that SQLite checks their
// JSONB element by element before trusting it (an array header byte of
// '[' or '{', 5 or 7 bytes of payload).
func TestEnqueueManyPayloadsKeepEveryByte(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("bytes")
		every := make([]byte, 256)
		for i := range every {
			every[i] = byte(i)
		}
		var payloads [][]byte
		for _, n := range []int{0, 1, 11, 12, 13, 255, 256, 257, 65_535, 65_536} {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(255 - i) // 0xff first: never UTF-8
			}
			payloads = append(payloads, p)
		}
		payloads = append(payloads, every, nil, []byte{0}, []byte("\xc3\x28"), []byte(`"\`), []byte("[1]"), []byte(`{"a":1}`))
		enqueue := func(batch [][]byte, inTx bool) {
			t.Helper()
			jobs := make([]store.NewJob, len(batch))
			for i, p := range batch {
				jobs[i].Payload = p
			}
			var got []int64
			var err error
			if inTx {
				err = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
					got, err = q.EnqueueManyTx(ctx, tx, jobs)
					return err
				})
			} else {
				got, err = q.EnqueueMany(c, jobs)
			}
			require.NoError(t, err, "a batch of %d payloads", len(batch))
			require.Len(t, got, len(batch))
			for i, id := range got {
				j, err := q.Job(c, id)
				require.NoError(t, err)
				samePayload(t, batch[i], j.Payload, fmt.Sprintf("job %d of %d (%d bytes)", i, len(batch), len(batch[i])))
			}
		}
		enqueue(payloads, false)
		enqueue(payloads, true)
		for _, p := range payloads {
			enqueue([][]byte{p}, false)
		}
		enqueue([][]byte{[]byte("ab"), nil, {}}, false)       // 5 bytes: the array's header is '['
		enqueue([][]byte{[]byte("abc"), []byte("de")}, false) // 7 bytes: '{'
		enqueue([][]byte{[]byte("a"), []byte("1")}, true)
	})
}

// fanoutTrigger makes each job of queue main insert a job of queue audit
// with its payload, from a row trigger that fires timing ("AFTER" or
// "BEFORE") the job's insert. An AFTER trigger's jobs come after the whole
// batch on PostgreSQL, a BEFORE trigger's between the batch's jobs.
func fanoutTrigger(t *testing.T, e *engineEnv, timing string) {
	t.Helper()
	if e.name == "pg" {
		e.execSQL(t, `CREATE FUNCTION public.test_fanout() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.queue = 'main' THEN INSERT INTO alkstore.jobs (queue, payload, max_attempts, created_at, run_at)
			VALUES ('audit', NEW.payload, 3, now(), now()); END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER test_fanout `+timing+` INSERT ON alkstore.jobs FOR EACH ROW EXECUTE FUNCTION public.test_fanout()`)
		return
	}
	e.execSQL(t, `CREATE TRIGGER test_fanout `+timing+` INSERT ON alk_jobs WHEN NEW.queue = 'main' BEGIN
		INSERT INTO alk_jobs (queue, payload, max_attempts, created_at, run_at) VALUES ('audit', NEW.payload, 3, NEW.created_at, NEW.run_at); END`)
}
