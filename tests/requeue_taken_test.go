package tests

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// requireKeyTaken checks an error of Requeue or RequeueDead (op) whose
// job's unique key another job took while it moved: wrapped as the
// operation's, matching ErrInvalidArgument as Requeue into a held key
// does, with the driver's unique violation still reachable.
func requireKeyTaken(t *testing.T, e *engineEnv, err error, op, queue string) {
	t.Helper()
	require.Error(t, err)
	var oe *store.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, op, oe.Op)
	assert.Equal(t, queue, oe.Name)
	assert.ErrorContains(t, err, fmt.Sprintf(`alkstore: %s %q: `, op, queue))
	assert.ErrorIs(t, err, store.ErrInvalidArgument)
	if e.name == "pg" {
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "23505", pe.Code)
	} else {
		assert.ErrorIs(t, err, sqlite3.CONSTRAINT_UNIQUE)
	}
}

// TestRequeueIntoAKeyTakenMeanwhile: a job takes the unique key of a dead
// job while Requeue or RequeueDead moves it (on PostgreSQL, an enqueue
// that commits while the update runs; here an application's trigger takes
// the key in the update itself, on both engines, every time). Requeue and
// RequeueTx fail with ErrInvalidArgument, as into a key held before they
// started; RequeueDead tries its batch again, and once the key has been
// taken on each of its tries fails with ErrInvalidArgument too, still
// counting the jobs of the batch it moved before. Before, both returned the driver's
// bare unique violation (no sentinel to match), and RequeueDead 0.
func TestRequeueIntoAKeyTakenMeanwhile(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		c := ctx(t)
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("taken")
		// A full batch of plain dead jobs that died first, moved by
		// RequeueDead's first batch, then the unique one.
		_, err := q.EnqueueMany(c, make([]store.NewJob, 1000))
		require.NoError(t, err)
		killAll(t, q)
		clk.Advance(time.Second)
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{Unique: store.UniqueOpts{Key: "k"}})
		require.NoError(t, err)
		killJob(t, q, id)

		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION public.test_take_key() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO alkstore.jobs (queue, max_attempts, created_at, run_at, unique_key, unique_states)
				VALUES (NEW.queue, 3, now(), now(), NEW.unique_key, NEW.unique_states); RETURN NEW; END $$`,
				`CREATE TRIGGER test_take_key BEFORE UPDATE ON alkstore.jobs FOR EACH ROW
				WHEN (OLD.state = 'dead' AND NEW.state = 'pending' AND NEW.unique_key IS NOT NULL) EXECUTE FUNCTION public.test_take_key()`)
		} else {
			e.execSQL(t, `CREATE TRIGGER test_take_key BEFORE UPDATE ON alk_jobs
				WHEN OLD.state = 'dead' AND NEW.state = 'pending' AND NEW.unique_key IS NOT NULL BEGIN
				INSERT INTO alk_jobs (queue, max_attempts, created_at, run_at, unique_key, unique_states)
				VALUES (NEW.queue, 3, NEW.run_at, NEW.run_at, NEW.unique_key, NEW.unique_states); END`)
		}

		moved, err := q.RequeueDead(c)
		requireKeyTaken(t, e, err, "requeue dead", q.Name())
		assert.EqualValues(t, 1000, moved, "the first batch committed before the unique job's")
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1000, st.Ready, "the plain jobs moved, the taker's insert rolled back")
		assert.EqualValues(t, 1, st.Dead)

		for round := range 5 {
			moved, err := q.RequeueDead(c)
			requireKeyTaken(t, e, err, "requeue dead", q.Name())
			assert.Zero(t, moved, "round %d", round)
			requireKeyTaken(t, e, q.Requeue(c, id), "requeue", q.Name())
			tx, err := s.Begin(c)
			require.NoError(t, err)
			requireKeyTaken(t, e, q.RequeueTx(c, tx, id), "requeue", q.Name()) // on PostgreSQL the violation aborts tx: no holder to read
			require.NoError(t, tx.Rollback(c))
			assert.Equal(t, store.JobDead, jobState(t, q, id), "round %d", round)
		}
	})
}

// TestRequeueDeadRacedByOpenEnqueues: on PostgreSQL, jobs enqueued in
// transactions open while RequeueDead runs take the unique keys of its
// dead jobs: its statement, which did not see them, waits for each such
// transaction on the unique index and fails with a unique violation when
// it commits. RequeueDead tries the batch again (it then skips the job
// whose key is held); when a new transaction takes a key on each of its 9
// tries it fails, wrapped as its own error and matching
// ErrInvalidArgument (before: the driver's bare unique violation). Each
// commit waits for the statement to be blocked on that transaction's key
// (pg_blocking_pids), over several rounds. SQLite cannot meet this: the
// writer slot serializes the enqueues with RequeueDead's statement.
func TestRequeueDeadRacedByOpenEnqueues(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	const tries = 9 // RequeueDead's first try and its 8 retries
	s := e.open(t, store.WithMaxConns(tries+4))
	pool := e.pool(t)
	c := ctx(t)
	for round := range 3 {
		q := s.Queue(fmt.Sprint("taken-", round)) // the last round's holders are pending in theirs
		key := func(i int) store.EnqueueOpts {
			return store.EnqueueOpts{Unique: store.UniqueOpts{Key: fmt.Sprintf("r%d-%d", round, i)}}
		}
		dead := make([]int64, tries)
		for i := range dead {
			id, err := q.Enqueue(c, nil, key(i))
			require.NoError(t, err)
			killJob(t, q, id)
			dead[i] = id
		}
		// One open transaction per key, each holding a new job with it.
		byPid := map[int]store.Tx{}
		for i := range tries {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(c) }()
			r, err := q.EnqueueUniqueTx(c, tx, nil, key(i))
			require.NoError(t, err)
			require.False(t, r.Duplicate)
			var pid int
			require.NoError(t, tx.QueryRow(c, "SELECT pg_backend_pid()").Scan(&pid))
			byPid[pid] = tx
		}
		type result struct {
			n   int64
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := q.RequeueDead(c)
			done <- result{n, err}
		}()
		for committed := 0; committed < tries; committed++ {
			// Wait for the statement to wait on one of the transactions.
			var blocker int
			require.Eventually(t, func() bool {
				err := pool.QueryRow(c, `SELECT (pg_blocking_pids(pid))[1] FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%RequeueDeadJobs%'`).Scan(&blocker)
				return err == nil
			}, 30*time.Second, time.Millisecond, "round %d: RequeueDead's try %d never waited on a key", round, committed+1)
			tx := byPid[blocker]
			require.NotNil(t, tx, "round %d: blocked by %d, not a key's transaction", round, blocker)
			select {
			case r := <-done:
				t.Fatalf("round %d: RequeueDead returned while blocked: %d, %v", round, r.n, r.err)
			default:
			}
			require.NoError(t, tx.Commit(c))
			delete(byPid, blocker)
		}
		r := <-done
		requireKeyTaken(t, e, r.err, "requeue dead", q.Name())
		assert.Zero(t, r.n)
		assert.True(t, errors.Is(r.err, store.ErrInvalidArgument))
		for _, id := range dead {
			assert.Equal(t, store.JobDead, jobState(t, q, id), "round %d: its key is held now", round)
		}
		moved, err := q.RequeueDead(c)
		require.NoError(t, err, "round %d: no race now: the held keys' jobs are skipped", round)
		assert.Zero(t, moved)
	}
}
