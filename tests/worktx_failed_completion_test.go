package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestATransactionalHandlerWhoseSettleFailsKeepsTheClaimsItHeld: on
// SQLite a WorkTx handler's transaction extends its own claim and the
// claims of the store's jobs waiting for the writer it holds. Session 56
// kept them when SQLite rolled the transaction back whole (an interrupted
// write), but three other paths still rolled it back whole and lost them
// (attack57 F1): the completion refused (an application's trigger on the
// jobs table), the COMMIT refused (a DEFERRABLE INITIALLY DEFERRED foreign
// key the handler's write broke, SQLite opened with foreign_keys on), and,
// for a handler that failed, its retry refused. The waiting jobs then
// ended dead without their handlers running ("the last claim expired"),
// or ran again, and the failing job's own error was lost. PostgreSQL
// records, and SQLite must now too: the waiting jobs run once and are
// acked; the failing job (MaxAttempts 1) is dead with the completion's or
// commit's error, or, its retry refused, left to its claim's lapse and run
// a second time (MaxAttempts 2, the others keeping one attempt).
//
// Three jobs are claimed together; the handler that gets the writer first
// does the failing thing and then holds its transaction until each other
// job is acked or its claim, as committed (what another connection reads),
// has run out: on SQLite those jobs wait for the writer, so their leases
// lapse under it. Several rounds, each on a queue of its own.
func TestATransactionalHandlerWhoseSettleFailsKeepsTheClaimsItHeld(t *testing.T) {
	const vis = 2 * time.Second
	const rounds = 3
	forms := []string{"refused completion", "deferred foreign key at commit", "refused retry"}
	const (
		refusedAck = iota
		deferredFK
		refusedRetry
	)
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		dsn := e.dsn
		if e.name == "lite" {
			dsn = "file:" + e.dsn + "?_pragma=foreign_keys(1)"
		}
		c := ctx(t)
		s, err := store.Open(c, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			for _, stmt := range []string{
				`CREATE TABLE settle_refused (q text)`,
				`CREATE TABLE settle_parent (id bigint PRIMARY KEY)`,
				`CREATE TABLE settle_child (pid bigint REFERENCES settle_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
			} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			return nil
		}))
		switch {
		case form == refusedAck && e.name == "pg":
			e.execSQL(t, `CREATE FUNCTION public.settle_refuse_fn() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF EXISTS (SELECT 1 FROM public.settle_refused WHERE q = OLD.id::text) THEN
					RAISE EXCEPTION 'completion refused by the trigger'; END IF;
				RETURN OLD; END $$`,
				`CREATE TRIGGER settle_refuse_trg BEFORE DELETE ON alkstore.jobs FOR EACH ROW EXECUTE FUNCTION public.settle_refuse_fn()`)
			t.Cleanup(func() {
				e.execSQL(t, `DROP TRIGGER settle_refuse_trg ON alkstore.jobs`, `DROP FUNCTION public.settle_refuse_fn()`)
			})
		case form == refusedAck:
			e.execSQL(t, `CREATE TRIGGER settle_refuse_trg BEFORE DELETE ON alk_jobs
				WHEN EXISTS (SELECT 1 FROM settle_refused WHERE q = CAST(OLD.id AS TEXT)) BEGIN SELECT RAISE(ABORT, 'completion refused by the trigger'); END`)
		case form == refusedRetry && e.name == "pg":
			e.execSQL(t, `CREATE FUNCTION public.settle_refuse_fn() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF OLD.state = 'running' AND NEW.state = 'pending' AND EXISTS (SELECT 1 FROM public.settle_refused WHERE q = OLD.queue) THEN
					RAISE EXCEPTION 'retry refused by the trigger'; END IF;
				RETURN NEW; END $$`,
				`CREATE TRIGGER settle_refuse_trg BEFORE UPDATE ON alkstore.jobs FOR EACH ROW EXECUTE FUNCTION public.settle_refuse_fn()`)
			t.Cleanup(func() {
				e.execSQL(t, `DROP TRIGGER settle_refuse_trg ON alkstore.jobs`, `DROP FUNCTION public.settle_refuse_fn()`)
			})
		case form == refusedRetry:
			e.execSQL(t, `CREATE TRIGGER settle_refuse_trg BEFORE UPDATE ON alk_jobs
				WHEN OLD.state = 'running' AND NEW.state = 'pending' AND EXISTS (SELECT 1 FROM settle_refused WHERE q = OLD.queue) BEGIN SELECT RAISE(ABORT, 'retry refused by the trigger'); END`)
		}
		for round := range rounds {
			q := s.Queue(fmt.Sprintf("settle-refused-%d", round))
			attempts := 1
			if form == refusedRetry {
				attempts = 2
				require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
				require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO settle_refused VALUES ($1)`, q.Name())
					return err
				}))
			}
			var ids []int64
			for range 3 {
				id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: attempts})
				require.NoError(t, err)
				ids = append(ids, id)
			}
			// othersLapsed tells whether each job but self is acked (or
			// completed) or running with its claim, as committed, run out.
			othersLapsed := func(self int64) bool {
				for _, id := range ids {
					if id == self {
						continue
					}
					j, err := q.Job(c, id)
					switch {
					case errors.Is(err, store.ErrNotFound), err == nil && j.State == store.JobCompleted:
					case err == nil && j.State == store.JobRunning && j.ClaimExpiresAt != nil && time.Now().After(j.ClaimExpiresAt.Add(vis/4)):
					default:
						return false
					}
				}
				return true
			}
			var first atomic.Int64 // the job whose handler got the writer first
			var held atomic.Bool   // it held its transaction past the others' leases
			var mu sync.Mutex
			runs := map[int64]int{}
			handler := func(ctx context.Context, tx store.Tx, j *store.Job) error {
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
				if !first.CompareAndSwap(0, j.ID) {
					return nil
				}
				var err error
				switch form {
				case refusedAck:
					_, err = tx.Exec(ctx, `INSERT INTO settle_refused VALUES ($1)`, fmt.Sprint(j.ID))
				case deferredFK:
					_, err = tx.Exec(ctx, `INSERT INTO settle_child VALUES ($1)`, 1000000+j.ID)
				case refusedRetry:
					err = errors.New("the handler failed")
				}
				// Hold the writer (on SQLite) until the others' leases
				// lapsed under it, or they were acked (PostgreSQL).
				deadline := time.Now().Add(20 * time.Second)
				for !othersLapsed(j.ID) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				held.Store(othersLapsed(j.ID))
				return err
			}
			opts := store.WorkOpts{Visibility: vis, Timeout: 30 * time.Second, Concurrency: 3, Batch: 3,
				Backoff: func(int) time.Duration { return time.Hour }}
			wc, cancel := context.WithCancel(c)
			done := make(chan error, 1)
			go func() { done <- q.WorkTx(wc, opts, handler) }()
			require.Eventually(t, func() bool {
				if first.Load() == 0 {
					return false
				}
				for _, id := range ids {
					j, err := q.Job(c, id)
					switch {
					case errors.Is(err, store.ErrNotFound), err == nil && (j.State == store.JobDead || j.State == store.JobCompleted):
					default:
						return false
					}
				}
				return true
			}, 60*time.Second, 20*time.Millisecond, "round %d: every job was settled", round)
			cancel()
			require.NoError(t, <-done)
			require.True(t, held.Load(), "round %d: the first handler held its transaction until the others' claims ran out or they were acked", round)
			mu.Lock()
			for _, id := range ids {
				j, err := q.Job(c, id)
				if id != first.Load() {
					assert.Equal(t, 1, runs[id], "round %d: job %d, waiting for the writer, ran once", round, id)
					if form == refusedRetry {
						if assert.NoError(t, err) {
							assert.Equal(t, store.JobCompleted, j.State, "round %d: job %d was acked", round, id)
							assert.Equal(t, 1, j.Attempts, "round %d: job %d was claimed once (its claim kept)", round, id)
						}
					} else if !assert.ErrorIs(t, err, store.ErrNotFound, "round %d: job %d, waiting for the writer, was acked", round, id) && err == nil {
						t.Errorf("round %d: job %d ended %s after %d attempts (%q)", round, id, j.State, j.Attempts, j.LastError)
					}
					continue
				}
				if !assert.NoError(t, err, "round %d: the failing job %d is there", round, id) {
					continue
				}
				switch form {
				case refusedRetry:
					// Its retry refused, it was left to its claim's lapse,
					// claimed again and acked.
					assert.Equal(t, 2, runs[id], "round %d: job %d ran again once its claim lapsed", round, id)
					assert.Equal(t, store.JobCompleted, j.State, "round %d: job %d", round, id)
					assert.Equal(t, 2, j.Attempts, "round %d: job %d", round, id)
				default:
					assert.Equal(t, 1, runs[id], "round %d: the failing job %d ran once", round, id)
					assert.Equal(t, store.JobDead, j.State, "round %d: job %d", round, id)
					assert.Equal(t, 1, j.Attempts, "round %d: job %d", round, id)
					assert.NotContains(t, j.LastError, "claim expired", "round %d: job %d was settled by its own error", round, id)
					want := "completion refused by the trigger"
					if form == deferredFK {
						want = "commit"
					}
					assert.Contains(t, j.LastError, want, "round %d: job %d", round, id)
				}
			}
			mu.Unlock()
		}
	})
}
