package tests

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkerStopDoesNotWaitForAHeldRowsAck: a job's handler returns while
// the application's transaction holds the job's row (a CancelTx in a
// transaction it keeps open), and the worker is then stopped hard
// (Worker.Stop, whose context ends after a second; it ends no transaction
// of the application). The lease is a minute long.
//
// On PostgreSQL the ack skips the held row and acks it apart (attack56a
// F2), so nothing of the worker needs the row: Stop must return with Run
// at once, not wait for the transaction, and the job must still be acked
// once the transaction rolls back, well inside its lease (it must not run
// again). Both ways of acking apart are tried: "waiting", one statement
// waiting for the row (CompleteLockedJobs), and "retried", a pool of two
// whose other connection the application's transaction holds, with no
// room for such a statement, so the job is acked again every tenth of
// Visibility. Before the fix both failed: Run waited for the held job's
// ack (ackLoop's heldAcks.drain) for as long as the row was held, or, for
// a job without room to wait, until its lease ran out, and Stop gave up
// after its 5 s saying "the ack of finished jobs still waits for the
// database" (review57).
//
// On SQLite the application's transaction holds the writer, which every
// write of the worker waits for: Stop says so once its 5 s ran out, and
// Run returns once the transaction ended, the job acked, as documented
// (Worker.Stop).
//
// "Shutdown" stops the store hard instead, which rolls the application's
// transaction back itself: on both engines the job must be acked before
// the store closed (it passed before the fix too; it keeps the second
// the fix still waits for such acks honest).
//
// The last two forms close the store after such a Stop: the acks Run left
// running must still end before the store closes, once the row is free (a
// hard Shutdown, which frees it, with the ack's statement made slow on
// PostgreSQL; or the application's rollback, then a graceful Close). Before
// (review58a F4), Run having returned, the store's shutdown did not wait
// for them: the hard one cancelled the ack it had just let through, the
// graceful one closed the store before the next retry, and the job, which
// had run and returned nil, ran again after its lease.
func TestWorkerStopDoesNotWaitForAHeldRowsAck(t *testing.T) {
	forms := []string{"waiting", "retried", "Shutdown", "waiting, then a hard Shutdown", "retried, then Close"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		const visibility = time.Minute
		var counts stmtCounts
		var s *store.Store
		retried := form == 1 || form == 4
		switch {
		case e.name != "pg":
			s = e.open(t)
		case retried:
			s = e.openHookedPool(t, counts.hook, 2)
		default:
			s = e.openWarmTraced(t, pgStartTracer{counts.hook})
		}
		c := ctx(t)
		if form == 3 && e.name == "pg" {
			// The ack's DELETE takes 300 ms once the row is free, so that
			// the store's shutdown is past its rollback while it runs.
			e.execSQL(t, `CREATE FUNCTION public.slow_ack() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN OLD; END $$`)
			e.execSQL(t, `CREATE TRIGGER slow_ack BEFORE DELETE ON alkstore.jobs FOR EACH ROW WHEN (OLD.queue = 'held-stop') EXECUTE FUNCTION public.slow_ack()`)
		}
		q := s.Queue("held-stop")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		var runs atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		var startOnce sync.Once
		w, err := q.NewWorker(store.WorkOpts{Concurrency: 1, Visibility: visibility, Timeout: 2 * time.Minute},
			func(ctx context.Context, j *store.Job) error {
				runs.Add(1)
				startOnce.Do(func() { close(started) })
				<-release
				return nil
			})
		require.NoError(t, err)
		ran := make(chan error, 1)
		go func() { ran <- w.Run(c) }()
		select {
		case <-started:
		case <-c.Done():
			t.Fatal("the handler did not start")
		}

		// The application takes the job's row while its handler runs, and
		// keeps its transaction open over the stop.
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(c, heldRowSQL(e), id)
		require.NoError(t, err)
		close(release)
		if e.name == "pg" {
			// The ack skipped the row and found the claim live (JobClaims);
			// "waiting": the statement that waits for the row has begun.
			apart := "CompleteLockedJobs"
			if retried {
				apart = "JobClaims"
			}
			for counts.count(apart) == 0 && c.Err() == nil {
				time.Sleep(time.Millisecond)
			}
		}

		sc, cancel := context.WithTimeout(c, time.Second)
		defer cancel()
		begun := time.Now()
		if form == 2 {
			shutdownFreesAHeldRow(t, c, e, s, ran, id, sc)
			require.EqualValues(t, 1, runs.Load(), "the job ran again")
			return
		}
		err = w.Stop(sc)
		took := time.Since(begun)
		require.Less(t, took, 20*time.Second, "Stop outlasted its bound (its context, then 5 s)")
		if e.name == "pg" {
			// nil: Run returned (Stop waits for it).
			require.NoError(t, err, "Stop waited for the ack of a job whose row the application holds")
			require.NoError(t, <-ran)
			j, err := q.Job(c, id)
			require.NoError(t, err)
			require.Equal(t, store.JobRunning, j.State, "the job was settled while its row was held")
		} else {
			require.ErrorContains(t, err, "SQLite's writer")
		}
		if form >= 3 {
			if form == 3 {
				hard, hardCancel := context.WithCancel(c)
				hardCancel()
				_ = s.Shutdown(hard) // rolls the transaction back
			} else {
				require.NoError(t, tx.Rollback(c))
				require.NoError(t, s.Close())
			}
			if e.name != "pg" { // pg: Run returned already (above)
				select {
				case <-ran:
				case <-c.Done():
					t.Fatal("Run did not return")
				}
			}
			_, err := e.open(t).Queue("held-stop").Job(c, id)
			require.ErrorIs(t, err, store.ErrNotFound, "the store closed before the ack of a job whose row was free")
			require.EqualValues(t, 1, runs.Load(), "the job ran again")
			return
		}

		// Once the transaction ends, the job is acked: well inside its
		// lease (a job lost to its lease would stay running a minute), and
		// run once.
		require.NoError(t, tx.Rollback(c))
		deadline := time.Now().Add(visibility / 2)
		for {
			_, err := q.Job(c, id)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			require.NoError(t, err)
			require.True(t, time.Now().Before(deadline), "the held job was not acked once its row was free")
			time.Sleep(5 * time.Millisecond)
		}
		if e.name != "pg" {
			select {
			case err := <-ran:
				require.NoError(t, err)
			case <-c.Done():
				t.Fatal("Run did not return once the transaction ended")
			}
		}
		require.EqualValues(t, 1, runs.Load(), "the job ran again")
	})
}

// shutdownFreesAHeldRow is the test above's "Shutdown" form: a hard
// Shutdown rolls back the application's transaction itself, at once, and
// the job whose row it held must be acked before the store closed, as
// before the fix (which no longer waits for such an ack past a second),
// not left to run again after its lease.
func shutdownFreesAHeldRow(t *testing.T, c context.Context, e *engineEnv, s *store.Store, ran <-chan error, id int64, sc context.Context) {
	begun := time.Now()
	_ = s.Shutdown(sc) // a hard stop: "transactions still open" (rolled back)
	require.Less(t, time.Since(begun), 20*time.Second, "Shutdown outlasted its bound (its context, then 7 s)")
	select {
	case <-ran:
	case <-c.Done():
		t.Fatal("Run did not return")
	}
	_, err := e.open(t).Queue("held-stop").Job(c, id)
	require.ErrorIs(t, err, store.ErrNotFound, "the job whose row the stop freed was not acked")
}

// heldRowSQL takes a job's row in a transaction ($1: its id).
// holdJobRow begins a transaction on foreign, a connection that is not
// the store's (another process's, as far as the store knows), keeps it in
// held, and takes the job's row in it (on SQLite, the write lock), so
// that what the job's settle needs waits for it.
func holdJobRow(ctx context.Context, e *engineEnv, foreign *sql.DB, held *atomic.Pointer[sql.Tx], id int64) error {
	tx, err := foreign.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	held.Store(tx)
	_, err = tx.ExecContext(ctx, heldRowSQL(e), id)
	return err
}

func heldRowSQL(e *engineEnv) string {
	if e.name == "lite" {
		return "UPDATE alk_jobs SET priority = priority WHERE id = $1"
	}
	return "UPDATE alkstore.jobs SET priority = priority WHERE id = $1"
}
