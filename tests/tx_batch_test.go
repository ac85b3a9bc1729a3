package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// failRowsTrigger installs an application's BEFORE INSERT trigger on the
// store's table (jobs or events) that fails every row whose payload is
// "fail": a PostgreSQL RAISE EXCEPTION, SQLite's RAISE(FAIL), which ends the
// statement with an error but keeps the rows it inserted before that one.
func failRowsTrigger(t *testing.T, e *engineEnv, table string) {
	t.Helper()
	if e.name == "pg" {
		e.execSQL(t, `CREATE FUNCTION public.test_fail_`+table+`() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.payload = 'fail'::bytea THEN RAISE EXCEPTION 'test trigger refuses the row'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER test_fail_`+table+` BEFORE INSERT ON alkstore.`+table+` FOR EACH ROW EXECUTE FUNCTION public.test_fail_`+table+`()`)
		return
	}
	e.execSQL(t, `CREATE TRIGGER test_fail_`+table+` BEFORE INSERT ON alk_`+table+` WHEN NEW.payload = CAST('fail' AS BLOB)
			BEGIN SELECT RAISE(FAIL, 'test trigger refuses the row'); END`)
}

// The Tx batch forms are all or none inside the caller's transaction too: a
// batch whose k-th row an application's trigger fails or skips leaves
// nothing of itself in the caller's transaction, which the caller then
// commits with its own earlier write (fresh-eyes review of wave 30, finding
// 2: on SQLite any failed EnqueueManyTx or PublishManyTx kept the rows
// before the failing one, and so did a unique batch on PostgreSQL, whose
// first round's statement had stored the other jobs).
//
// What the caller gets afterwards: on SQLite the transaction goes on, and so
// does PostgreSQL's after a batch with unique jobs (several statements,
// rolled back to their savepoint). A one-statement batch on PostgreSQL (the
// plain EnqueueManyTx, PublishManyTx) fails whole, and like any failed
// statement it aborts the caller's transaction: the next statement and the
// commit fail, and nothing of the transaction is stored.
func TestTxBatchFailingHalfWayStoresNoneOfItself(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		skipRowsTrigger(t, e, "jobs")
		skipRowsTrigger(t, e, "events")
		failRowsTrigger(t, e, "jobs")
		failRowsTrigger(t, e, "events")
		k := "k"
		jobsWith := func(bad string, unique bool) []store.NewJob {
			jobs := make([]store.NewJob, 20)
			for i := range jobs {
				jobs[i] = store.NewJob{Payload: []byte("batch")}
				if unique && i%2 == 0 {
					jobs[i].Opts.Unique = store.UniqueOpts{Key: "key-" + string(rune('a'+i))}
				}
			}
			jobs[7].Payload = []byte(bad) // keyless: a unique batch cannot take it for a held key
			return jobs
		}
		msgsWith := func(bad string, keyed bool) []store.Message {
			msgs := make([]store.Message, 20)
			for i := range msgs {
				msgs[i] = store.Message{Payload: []byte("batch")}
				if keyed && i%2 == 0 {
					msgs[i].Key = &k
				}
			}
			msgs[7].Payload = []byte(bad)
			return msgs
		}
		type batchCase struct {
			name  string
			jobs  bool
			multi bool // several statements: rolled back to a savepoint on PostgreSQL too
			run   func(q *store.Queue, st *store.Stream, tx store.Tx) error
		}
		var cases []batchCase
		for _, bad := range []string{"fail", "skip"} {
			cases = append(cases,
				batchCase{name: "EnqueueManyTx/" + bad, jobs: true, run: func(q *store.Queue, _ *store.Stream, tx store.Tx) error {
					_, err := q.EnqueueManyTx(c, tx, jobsWith(bad, false))
					return err
				}},
				batchCase{name: "EnqueueManyTx unique/" + bad, jobs: true, multi: true, run: func(q *store.Queue, _ *store.Stream, tx store.Tx) error {
					_, err := q.EnqueueManyTx(c, tx, jobsWith(bad, true))
					return err
				}},
				batchCase{name: "EnqueueManyUniqueTx/" + bad, jobs: true, multi: true, run: func(q *store.Queue, _ *store.Stream, tx store.Tx) error {
					jobs := jobsWith(bad, true)
					for i := range jobs {
						jobs[i].Opts.Unique = store.UniqueOpts{Key: "key-" + string(rune('a'+i))}
					}
					_, err := q.EnqueueManyUniqueTx(c, tx, jobs)
					return err
				}},
				batchCase{name: "PublishManyTx/" + bad, run: func(_ *store.Queue, st *store.Stream, tx store.Tx) error {
					_, err := st.PublishManyTx(c, tx, msgsWith(bad, false))
					return err
				}},
				batchCase{name: "PublishManyTx keyed/" + bad, run: func(_ *store.Queue, st *store.Stream, tx store.Tx) error {
					_, err := st.PublishManyTx(c, tx, msgsWith(bad, true))
					return err
				}},
			)
		}
		for i, bc := range cases {
			t.Run(bc.name, func(t *testing.T) {
				name := "txbatch-" + string(rune('a'+i))
				q, st := s.Queue(name), s.Stream(name)
				tx, err := s.Begin(c)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(c) }()
				// The caller's own earlier write, in the same transaction.
				if bc.jobs {
					_, err = q.EnqueueTx(c, tx, []byte("mine"), store.EnqueueOpts{})
				} else {
					_, err = st.PublishTx(c, tx, []byte("mine"))
				}
				require.NoError(t, err)

				err = bc.run(q, st, tx)
				require.Error(t, err, "the batch has a row the trigger refuses")

				if e.name == "pg" && !bc.multi {
					// One statement failed whole; PostgreSQL aborted tx.
					_, err = q.EnqueueTx(c, tx, []byte("after"), store.EnqueueOpts{})
					require.Error(t, err, "PostgreSQL aborts a transaction at a failed statement")
					require.Error(t, tx.Commit(c), "an aborted transaction does not commit")
					requireStored(t, q, st, bc.jobs, nil)
					return
				}
				// The transaction goes on: the caller writes again and commits.
				if bc.jobs {
					_, err = q.EnqueueTx(c, tx, []byte("after"), store.EnqueueOpts{})
				} else {
					_, err = st.PublishTx(c, tx, []byte("after"))
				}
				require.NoError(t, err, "the caller's transaction is usable after the failed batch")
				require.NoError(t, tx.Commit(c))
				requireStored(t, q, st, bc.jobs, []string{"mine", "after"})
				if !bc.jobs {
					heads, err := st.Heads(c, "", 10)
					require.NoError(t, err)
					assert.Empty(t, heads, "no key's head moved")
				}
			})
		}
	})
}

// requireStored checks the payloads of the queue's jobs (jobs) or the
// stream's events, in order.
func requireStored(t *testing.T, q *store.Queue, st *store.Stream, jobs bool, want []string) {
	t.Helper()
	c := ctx(t)
	var got []string
	if jobs {
		list, err := q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		for _, j := range list {
			got = append(got, string(j.Payload))
		}
	} else {
		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		for _, ev := range evs {
			got = append(got, string(ev.Payload))
		}
	}
	assert.Equal(t, want, got, "nothing of the batch is stored; the caller's own writes are, if it committed")
}

// cancelAtCall is a context that is cancelled at its n-th Done call: a
// search over n stops a call at each point where it looks at its context,
// including the one between a batch's last insert and its savepoint's
// release, without depending on timing.
type cancelAtCall struct {
	context.Context
	cancel context.CancelFunc
	n      int64
	calls  atomic.Int64
}

func (z *cancelAtCall) Done() <-chan struct{} {
	if z.calls.Add(1) == z.n {
		z.cancel()
	}
	return z.Context.Done()
}

// A Tx batch whose context ends at any point either succeeds whole or
// leaves nothing of itself for the caller's commit. The savepoint's release
// used to run on the caller's context: ended after the batch's last insert,
// the release was refused, the call failed, and the caller's commit stored
// the whole batch it was told had failed (fresh-eyes review of wave 31). A
// unique batch (several statements behind a savepoint on both engines).
func TestTxBatchCancelledAnywhereIsAllOrNone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		done := false
		for n := int64(1); n < 400 && !done; n++ {
			q := s.Queue(fmt.Sprintf("cut%d", n))
			inner, cancel := context.WithCancel(c)
			z := &cancelAtCall{Context: inner, cancel: cancel, n: n}
			tx, err := s.Begin(c)
			require.NoError(t, err)
			jobs := make([]store.NewJob, 3)
			for i := range jobs {
				jobs[i] = store.NewJob{Payload: []byte("batch"), Opts: store.EnqueueOpts{Priority: i,
					Unique: store.UniqueOpts{Key: fmt.Sprintf("k%d-%d", n, i)}}}
			}
			_, berr := q.EnqueueManyTx(z, tx, jobs)
			cancel()
			_ = tx.Commit(c) // may fail: the batch's failure may have ended tx
			st, err := q.Stats(c)
			require.NoError(t, err)
			if berr != nil {
				require.Zero(t, st.Ready, "n=%d: EnqueueManyTx failed (%v), yet the commit stored its jobs", n, berr)
			} else {
				require.EqualValues(t, 3, st.Ready, "n=%d", n)
				done = z.calls.Load() < n // the batch never reached the n-th look: every point was tried
			}
		}
		require.True(t, done, "the search covered every point of the call")
	})
}

// A PublishManyTx of one keyed message is two statements on SQLite (the
// event, then its head): when the head's write fails, the event does not
// stay in the caller's transaction, which goes on (fresh-eyes review of
// wave 31: a single message ran without the savepoint).
func TestPublishManyTxOfOneKeyedMessageIsAllOrNone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("one")
		// An application's trigger refuses the head of key "bad".
		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION public.test_fail_head() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN IF NEW.key = 'bad' THEN RAISE EXCEPTION 'test trigger refuses the head'; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER test_fail_head BEFORE INSERT OR UPDATE ON alkstore.compaction_heads FOR EACH ROW EXECUTE FUNCTION public.test_fail_head()`)
		} else {
			for _, op := range []string{"INSERT", "UPDATE"} {
				e.execSQL(t, `CREATE TRIGGER test_fail_head_`+op+` BEFORE `+op+` ON alk_compaction_heads WHEN NEW.key = 'bad'
						BEGIN SELECT RAISE(FAIL, 'test trigger refuses the head'); END`)
			}
		}
		k := "bad"
		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = st.PublishManyTx(c, tx, []store.Message{{Key: &k, Payload: []byte("fail")}})
		require.Error(t, err)
		if e.name == "pg" {
			// One statement on PostgreSQL: it failed whole and, as any
			// failed statement, ended the transaction.
			require.NoError(t, tx.Rollback(c))
		} else {
			_, err = st.PublishTx(c, tx, []byte("mine"))
			require.NoError(t, err, "the transaction goes on")
			require.NoError(t, tx.Commit(c))
		}
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		for _, ev := range evs {
			assert.NotEqual(t, "fail", string(ev.Payload), "the failed message's event stayed in the transaction")
		}
	})
}

// A write interrupted inside a transaction (its context ended while the
// statement ran) makes SQLite roll the whole transaction back, and the
// driver would then run each later statement of the Tx on its own,
// committing it at once, although the caller's commit then fails. Every
// later use of the Tx is refused instead, with an error matching ErrTxDone
// that says SQLite rolled the transaction back, so nothing written through
// it after the failure is ever stored; on PostgreSQL the transaction is
// aborted (25P02) or the cancel closed its connection. For a Tx the store
// began and for an adopted one (AdoptSQL, AdoptPgx): the store either
// commits everything each call reported done, or nothing. The context is
// cancelled at its n-th Done call, searched over n, as in
// TestTxBatchCancelledAnywhereIsAllOrNone, its Err calls counted too: no
// timing. On SQLite an application's trigger makes each event's INSERT run
// a few thousand VM steps, so SQLite's progress handler, which looks at
// the context every 1,000, interrupts the statement in the middle. (Before:
// on SQLite the later PublishTx, EnqueueTx and Exec each committed on their
// own.)
func TestTxWritesAfterAnInterruptedOneAreNeverStored(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		e.execSQL(t, "CREATE TABLE notes (tag TEXT NOT NULL)")
		if e.name == "lite" {
			e.execSQL(t, `CREATE TRIGGER test_slow_event AFTER INSERT ON alk_events BEGIN
				SELECT count(*) FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2000) SELECT i FROM c);
				END`)
		}
		db := e.sqlDB(t) // the application's own connections, for adopted transactions
		events, jobsTable := "alkstore.events", "alkstore.jobs"
		if e.name == "lite" {
			events, jobsTable = "alk_events", "alk_jobs"
		}
		var pool *pgxpool.Pool
		if e.name == "pg" {
			pool = e.pool(t)
		}
		begin := func(adopted bool) (tx store.Tx, commit, rollback func() error) {
			switch {
			case !adopted:
				tx, err := s.Begin(c)
				require.NoError(t, err)
				return tx, func() error { return tx.Commit(c) }, func() error { return tx.Rollback(c) }
			case e.name == "pg":
				ptx, err := pool.Begin(c)
				require.NoError(t, err)
				tx, err := s.AdoptPgx(ptx)
				require.NoError(t, err)
				return tx, func() error { return ptx.Commit(c) }, func() error { return ptx.Rollback(c) }
			default:
				stx, err := db.BeginTx(c, nil)
				require.NoError(t, err)
				tx, err := s.AdoptSQL(stx)
				require.NoError(t, err)
				return tx, stx.Commit, stx.Rollback
			}
		}
		for _, adopted := range []bool{false, true} {
			lost, done := 0, false // lost: interruptions that ended the transaction
			for n := int64(1); n < 400 && !done; n++ {
				tag := fmt.Sprintf("%v-%d", adopted, n)
				st, q := s.Stream("s-"+tag), s.Queue("q-"+tag)
				tx, commit, rollback := begin(adopted)
				_, err := st.PublishTx(c, tx, []byte("before"))
				require.NoError(t, err)
				var want []string // what the transaction reported written, in order
				want = append(want, "before")

				inner, cancel := context.WithCancel(c)
				z := &cancelAtLook{cancelAtCall{Context: inner, cancel: cancel, n: n}}
				_, berr := st.PublishManyTx(z, tx, []store.Message{{Payload: []byte("batch")}, {Payload: []byte("batch")}})
				cancel()
				if berr == nil {
					want = append(want, "batch", "batch")
					done = z.calls.Load() < n // the batch never reached the n-th look: every point was tried
				}

				_, perr := st.PublishTx(c, tx, []byte("after"))
				if perr == nil {
					want = append(want, "after")
				}
				_, qerr := q.EnqueueTx(c, tx, []byte("after"), store.EnqueueOpts{})
				_, xerr := tx.Exec(c, "INSERT INTO notes (tag) VALUES ($1)", tag)
				if berr != nil && perr != nil {
					lost++
					for _, err := range []error{perr, qerr, xerr} {
						require.Error(t, err, "n=%d", n)
						if e.name == "lite" {
							require.ErrorIs(t, err, store.ErrTxDone, "n=%d", n)
							assert.Contains(t, err.Error(), "SQLite rolled the transaction back", "n=%d", n)
						}
					}
				}
				cerr := commit()
				if cerr != nil {
					_ = rollback()
				}

				// What is stored, read from the tables: a stream read would
				// wait for the settled horizon, and could show nothing yet.
				var got []string
				rows, err := db.QueryContext(c, fmt.Sprintf("SELECT payload FROM %s WHERE stream = '%s' ORDER BY id", events, st.Name()))
				require.NoError(t, err)
				for rows.Next() {
					var p []byte
					require.NoError(t, rows.Scan(&p))
					got = append(got, string(p))
				}
				require.NoError(t, rows.Err())
				require.NoError(t, rows.Close())
				var jobs, notes int
				require.NoError(t, db.QueryRowContext(c, fmt.Sprintf("SELECT count(*) FROM %s WHERE queue = '%s'", jobsTable, q.Name())).Scan(&jobs))
				require.NoError(t, db.QueryRowContext(c, "SELECT count(*) FROM notes WHERE tag = $1", tag).Scan(&notes))
				if cerr != nil { // the transaction rolled back: none of it is stored
					require.Empty(t, got, "n=%d adopted=%v: the commit failed (%v) after %v, yet events were stored", n, adopted, cerr, berr)
					require.Zero(t, jobs, "n=%d adopted=%v: the commit failed, yet a job was stored", n, adopted)
					require.Zero(t, notes, "n=%d adopted=%v: the commit failed, yet the Exec's row was stored", n, adopted)
					continue
				}
				require.Equal(t, want, got, "n=%d adopted=%v: exactly what the transaction reported written", n, adopted)
				require.Equal(t, boolInt(qerr == nil), jobs, "n=%d adopted=%v", n, adopted)
				require.Equal(t, boolInt(xerr == nil), notes, "n=%d adopted=%v", n, adopted)
			}
			require.True(t, done, "adopted=%v: the search covered every point of the call", adopted)
			if e.name == "lite" {
				assert.Positive(t, lost, "adopted=%v: no interruption rolled the transaction back: the test shows nothing", adopted)
			}
			t.Logf("adopted=%v: %d of the points ended the transaction", adopted, lost)
		}
	})
}

// cancelAtLook is cancelAtCall with its Err calls counted too: SQLite's
// progress handler asks Err in the middle of a statement.
type cancelAtLook struct{ cancelAtCall }

func (z *cancelAtLook) Err() error {
	if z.calls.Add(1) == z.n {
		z.cancel()
	}
	return z.Context.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
