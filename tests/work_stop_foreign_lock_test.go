package tests

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkerStopDoesNotWaitOutAForeignLock: a job's handler takes, on a
// connection that is not the store's (another process's, as far as the
// store knows), what the job's settle needs, and keeps that transaction
// open: on SQLite the write lock, on PostgreSQL the job's row. Then
// Worker.Stop with a done context, a hard stop at once: "ack", the handler
// returned nil before, its ack waits; "release", the handler still runs,
// the stop cancels it, and its release waits.
//
// Stop ends no transaction of another connection, and must not wait for
// one: on SQLite it returns as soon as no handler runs and a write of the
// loop waits for that lock (in SQLite's busy handler), with an error that
// matches its context's and says so. Before, it waited its whole 5 s and
// blamed "SQLite's writer, which a transaction holds". On PostgreSQL the
// held row's ack is acked apart (Stop returns nil once Run did, a second
// into the hard stop); a release waiting for the row has no such signal,
// and Stop gives up on it after its 5 s, naming the database.
//
// Either way the job is not lost: once the lock is free, the ack or the
// release goes on (Run returns then), well inside the job's lease: the
// job acked and run once, or back in its queue with its attempt.
func TestWorkerStopDoesNotWaitOutAForeignLock(t *testing.T) {
	eachEngineEachForm(t, []string{"ack", "release"}, func(t *testing.T, e *engineEnv, form int) {
		const visibility = time.Minute
		release := form == 1
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("stop-foreign-lock")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		foreign := e.sqlDB(t)
		var ftx atomic.Pointer[sql.Tx]
		defer func() {
			if tx := ftx.Load(); tx != nil {
				_ = tx.Rollback()
			}
		}()
		var runs atomic.Int32
		w, err := q.NewWorker(store.WorkOpts{Concurrency: 1, Visibility: visibility, Timeout: 2 * time.Minute},
			func(ctx context.Context, j *store.Job) error {
				runs.Add(1)
				tx, err := foreign.BeginTx(c, nil)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(c, heldRowSQL(e), j.ID); err != nil {
					_ = tx.Rollback()
					return err
				}
				ftx.Store(tx)
				if release {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
		require.NoError(t, err)
		ran := make(chan error, 1)
		go func() { ran <- w.Run(c) }()
		waitFor(t, "the handler holds the lock", func() bool { return ftx.Load() != nil })
		if !release {
			if e.name == "pg" {
				waitFor(t, "the ack waits for the row", func() bool {
					var waiting int
					require.NoError(t, foreign.QueryRowContext(c, `SELECT count(*) FROM pg_stat_activity
						WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
					return waiting > 0
				})
			} else {
				waitFor(t, "the ack waits for the file lock", func() bool {
					return goroutineOfWaits(t, "Xgo_busy_")
				})
			}
		}

		done, cancel := context.WithCancel(c)
		cancel()
		err = w.Stop(done)
		switch {
		case e.name == "lite":
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorContains(t, err, "waits for a lock another connection holds")
		case release:
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorContains(t, err, "a lock another transaction holds?")
		default:
			require.NoError(t, err, "Run waited for the ack of a row another transaction holds")
		}
		select {
		case err := <-ran:
			require.True(t, e.name == "pg", "Run returned while its write waited for the lock: %v", err)
			require.NoError(t, err)
		default:
		}

		// The lock freed, the ack or the release goes on, within the lease.
		require.NoError(t, ftx.Load().Rollback())
		deadline := time.Now().Add(visibility / 2)
		for ; ; time.Sleep(5 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "the job was not settled once the lock was free")
			j, err := q.Job(c, id)
			if !release && errors.Is(err, store.ErrNotFound) {
				break
			}
			require.NoError(t, err)
			if release && j.State == store.JobPending {
				require.Zero(t, j.Attempts, "the release spent the job's attempt")
				break
			}
		}
		if e.name == "lite" || release {
			select {
			case err := <-ran:
				require.NoError(t, err)
			case <-c.Done():
				t.Fatal("Run did not return once the lock was free")
			}
		}
		require.EqualValues(t, 1, runs.Load(), "the job ran again")
	})
}
