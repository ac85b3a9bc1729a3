package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// endingCtx is a context that ends while a slow statement runs, with err
// (context.Canceled or context.DeadlineExceeded) as its Err, without
// depending on timing: on SQLite at the at-th look at its Err (SQLite's
// progress handler looks every 1,000 VM steps of a statement), on
// PostgreSQL when end is called once the server shows the statement
// sleeping (see slowStatements).
type endingCtx struct {
	context.Context // the test's, which never ends first
	err             error
	at              int64 // end at this look at Err; 0: only end ends it
	looks           atomic.Int64
	done            chan struct{}
	once            sync.Once
}

func newEndingCtx(parent context.Context, err error, at int64) *endingCtx {
	return &endingCtx{Context: parent, err: err, at: at, done: make(chan struct{})}
}

func (c *endingCtx) end() { c.once.Do(func() { close(c.done) }) }

func (c *endingCtx) Done() <-chan struct{} { return c.done }

func (c *endingCtx) Err() error {
	if c.at > 0 && c.looks.Add(1) == c.at {
		c.end()
	}
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// slowStatements sets up, on e's database, a table notes, a business
// statement that runs for a long time (slow), and an application trigger
// that makes every job enqueued on queue "slow" run as long. cut returns a
// context that ends with err in the middle of such a statement.
func slowStatements(t *testing.T, e *engineEnv) (slow string, cut func(err error) context.Context) {
	c := ctx(t)
	e.execSQL(t, "CREATE TABLE notes (tag TEXT NOT NULL)")
	if e.name == "lite" {
		const spin = `SELECT 'slow' FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000000) SELECT i FROM c)`
		e.execSQL(t, `CREATE TRIGGER test_slow_job AFTER INSERT ON alk_jobs WHEN NEW.queue = 'slow' BEGIN `+spin+`; END`)
		// The 100th look is 100,000 VM steps into a statement of about a
		// billion, and after the few looks before it starts.
		return "INSERT INTO notes (tag) " + spin, func(err error) context.Context { return newEndingCtx(c, err, 100) }
	}
	e.execSQL(t, `CREATE FUNCTION public.test_slow_job() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_sleep(60); RETURN NEW; END $$`,
		`CREATE TRIGGER test_slow_job BEFORE INSERT ON alkstore.jobs FOR EACH ROW WHEN (NEW.queue = 'slow') EXECUTE FUNCTION public.test_slow_job()`)
	pool := e.pool(t)
	// Backends whose statement began after since and sleeps now.
	sleeping := "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep' AND query_start > $1"
	t.Cleanup(func() { // the server goes on sleeping after the client closed the connection
		_, _ = pool.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'")
	})
	return "INSERT INTO notes (tag) SELECT 'slow' FROM pg_sleep(60)", func(err error) context.Context {
		z := newEndingCtx(c, err, 0)
		var since time.Time
		require.NoError(t, pool.QueryRow(c, "SELECT clock_timestamp()").Scan(&since))
		go func() {
			defer z.end()
			for c.Err() == nil {
				var n int
				if pool.QueryRow(c, sleeping, since).Scan(&n) == nil && n > 0 {
					return // the statement is under way on the server
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		return z
	}
}

// A statement that its context ends half way returns an error matching
// that context's error (context.Canceled or context.DeadlineExceeded) on
// both engines, naming the operation and its queue; inside a Tx, where the
// interruption ended the transaction (SQLite rolls a transaction back
// whole when a write in it is interrupted; pgx closes the connection), it
// matches ErrTxDone too, and so does every later use of the Tx, whose
// commit stores nothing. Auto-commit, there is no transaction of the
// caller's to speak of: no ErrTxDone. Business SQL (Exec) and store forms
// (EnqueueTx), in a Tx the store began and in an adopted one. (Before: on
// SQLite the error said only "sqlite3: interrupted", matching neither, and
// a WorkTx job's LastError said so; on PostgreSQL it did not match
// ErrTxDone, nor did the later uses, which said "conn closed".)
func TestStatementCutShortByItsContextMatchesItsError(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		slow, cut := slowStatements(t, e)
		db := e.sqlDB(t)
		var pool interface {
			Begin(context.Context) (pgx.Tx, error)
		}
		if e.name == "pg" {
			pool = e.pool(t)
		}
		notesTable, jobsTable := "notes", "alkstore.jobs"
		if e.name == "lite" {
			jobsTable = "alk_jobs"
		}
		stored := func() (notes, jobs int) {
			require.NoError(t, db.QueryRowContext(c, "SELECT count(*) FROM "+notesTable).Scan(&notes))
			require.NoError(t, db.QueryRowContext(c, "SELECT count(*) FROM "+jobsTable+" WHERE queue IN ('slow', 'after')").Scan(&jobs))
			return notes, jobs
		}
		interrupted := func(t *testing.T, err error) {
			t.Helper()
			if e.name == "lite" { // the statement ran and SQLite stopped it, not database/sql before it began
				assert.ErrorIs(t, err, sqlite3.INTERRUPT)
			}
		}
		for _, why := range []error{context.DeadlineExceeded, context.Canceled} {
			t.Run(fmt.Sprint(why), func(t *testing.T) {
				// Auto-commit.
				_, err := s.Queue("slow").Enqueue(cut(why), nil, store.EnqueueOpts{})
				require.Error(t, err)
				require.ErrorIs(t, err, why)
				interrupted(t, err)
				assert.NotErrorIs(t, err, store.ErrTxDone, "no transaction of the caller's")
				assert.Contains(t, err.Error(), `alkstore: enqueue "slow": `)

				for _, adopted := range []bool{false, true} {
					for _, form := range []string{"exec", "enqueue tx", "enqueue many tx"} {
						t.Run(fmt.Sprintf("adopted=%v/%s", adopted, form), func(t *testing.T) {
							var tx store.Tx
							var end func()
							switch {
							case !adopted:
								tx, err = s.Begin(c)
								require.NoError(t, err)
								end = func() { _ = tx.Rollback(c) }
							case e.name == "pg":
								ptx, err := pool.Begin(c)
								require.NoError(t, err)
								tx, err = s.AdoptPgx(ptx)
								require.NoError(t, err)
								end = func() { _ = ptx.Rollback(c) }
							default:
								stx, err := db.BeginTx(c, nil)
								require.NoError(t, err)
								tx, err = s.AdoptSQL(stx)
								require.NoError(t, err)
								end = func() { _ = stx.Rollback() }
							}
							defer end()
							_, err = tx.Exec(c, "INSERT INTO notes (tag) VALUES ('before')")
							require.NoError(t, err)
							switch form {
							case "exec":
								_, err = tx.Exec(cut(why), slow)
							case "enqueue tx":
								_, err = s.Queue("slow").EnqueueTx(cut(why), tx, nil, store.EnqueueOpts{})
							default: // a batch: on SQLite after a savepoint, which went with the transaction
								_, err = s.Queue("slow").EnqueueManyTx(cut(why), tx, make([]store.NewJob, 3))
							}
							require.Error(t, err)
							require.ErrorIs(t, err, why, "the context's error")
							interrupted(t, err)
							require.ErrorIs(t, err, store.ErrTxDone, "the interruption ended the transaction")
							switch form {
							case "exec":
								assert.Contains(t, err.Error(), "alkstore: exec: ")
							case "enqueue tx":
								assert.Contains(t, err.Error(), `alkstore: enqueue "slow": `)
							default:
								assert.Contains(t, err.Error(), `alkstore: enqueue many "slow": `)
							}
							// It says once that the transaction is gone, and
							// nothing else (before: a cut SQLite batch said it
							// three times, once with "no such savepoint").
							msg := err.Error()
							assert.Equal(t, 1, strings.Count(msg, "rolled"), "said once: %s", msg)
							assert.Equal(t, 1, strings.Count(msg, why.Error()), "the cause, once: %s", msg)
							assert.NotContains(t, msg, "savepoint")

							// Every later use is refused, and nothing of the
							// transaction is stored.
							_, err = tx.Exec(c, "INSERT INTO notes (tag) VALUES ('after')")
							require.ErrorIs(t, err, store.ErrTxDone)
							_, err = s.Queue("after").EnqueueTx(c, tx, nil, store.EnqueueOpts{})
							require.ErrorIs(t, err, store.ErrTxDone)
							if !adopted {
								require.ErrorIs(t, tx.Commit(c), store.ErrTxDone)
							}
							end()
							notes, jobs := stored()
							assert.Zero(t, notes, "rows of the interrupted transaction stored")
							assert.Zero(t, jobs, "jobs of the interrupted transaction stored")
						})
					}
				}

				// InTx hands the error on.
				err = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
					_, err := tx.Exec(cut(why), slow)
					return err
				})
				require.ErrorIs(t, err, why)
				require.ErrorIs(t, err, store.ErrTxDone)
			})
		}
	})
}

// Commit with a context that has already ended rolls the transaction back
// and stores nothing, with an error matching the context's error, on both
// engines; the Tx is finished after it, and the store goes on (SQLite's
// writer slot is free, later reads are not held back). InTx whose ctx ends
// while its function runs does the same. (Before: SQLite committed and
// returned nil, PostgreSQL stored nothing and failed: fresh-eyes review,
// pg item 7.)
func TestCommitWithAnEndedContextStoresNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		e.execSQL(t, "CREATE TABLE notes (tag TEXT NOT NULL)")
		db := e.sqlDB(t)
		notes := func() (n int) {
			require.NoError(t, db.QueryRowContext(c, "SELECT count(*) FROM notes").Scan(&n))
			return n
		}
		ended := map[string]func() context.Context{
			"cancelled": func() context.Context { cc, cancel := context.WithCancel(c); cancel(); return cc },
			"past its deadline": func() context.Context {
				cc, cancel := context.WithDeadline(c, time.Now().Add(-time.Second))
				t.Cleanup(cancel)
				return cc
			},
		}
		for name, endedCtx := range ended {
			t.Run(name, func(t *testing.T) {
				st, q := s.Stream("s-"+name), s.Queue("q-"+name)
				cc := endedCtx()
				tx, err := s.Begin(c)
				require.NoError(t, err)
				_, err = st.PublishTx(c, tx, []byte("in tx"))
				require.NoError(t, err)
				_, err = q.EnqueueTx(c, tx, nil, store.EnqueueOpts{})
				require.NoError(t, err)
				_, err = tx.Exec(c, "INSERT INTO notes (tag) VALUES ('in tx')")
				require.NoError(t, err)

				err = tx.Commit(cc)
				require.Error(t, err, "a commit with an ended context")
				require.ErrorIs(t, err, cc.Err())
				assert.Contains(t, err.Error(), "alkstore: commit: ")
				assert.ErrorIs(t, tx.Commit(c), store.ErrTxDone, "the Tx is finished")
				assert.NoError(t, tx.Rollback(c))

				wc, cancel := context.WithTimeout(c, 10*time.Second) // SQLite: the writer slot is free
				defer cancel()
				after, err := st.Publish(wc, []byte("after"))
				require.NoError(t, err)
				evs, err := st.ReadSince(wc, 0, 10) // not held back by the rolled-back transaction
				require.NoError(t, err)
				assert.Equal(t, []int64{after}, offsets(evs), "only the event published after")
				stats, err := q.Stats(c)
				require.NoError(t, err)
				assert.Zero(t, stats.Ready, "no job of the transaction")
				assert.Zero(t, notes(), "no row of the transaction")
			})
		}

		t.Run("InTx", func(t *testing.T) {
			st := s.Stream("intx")
			cc, cancel := context.WithCancel(c)
			err := s.InTx(cc, func(ctx context.Context, tx store.Tx) error {
				if _, err := st.PublishTx(ctx, tx, []byte("x")); err != nil {
					return err
				}
				cancel()
				return nil
			})
			require.ErrorIs(t, err, context.Canceled)
			evs, err := st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			assert.Empty(t, evs)
		})
	})
}

// A statement that would end or begin a transaction (COMMIT, ROLLBACK,
// END, BEGIN, ...) run through a Tx's Exec, Query or QueryRow is refused
// with ErrInvalidArgument, and the transaction goes on; savepoints work.
// Where one follows another statement in one Exec, it runs, and the Exec
// fails with ErrTxDone, as does every later use of the Tx, so nothing
// after it commits on its own. (Before: Exec("COMMIT") returned nil; on
// PostgreSQL every later statement then committed on its own and
// tx.Commit returned nil, on SQLite the COMMIT stored the transaction and
// tx.Commit said SQLite had rolled it back: fresh-eyes review, SQLite item
// 6.)
func TestTxRefusesStatementsThatEndItsTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		e.execSQL(t, "CREATE TABLE notes (tag TEXT NOT NULL)")
		db := e.sqlDB(t)
		stored := func(tag string) (n int) {
			require.NoError(t, db.QueryRowContext(c, "SELECT count(*) FROM notes WHERE tag = $1", tag).Scan(&n))
			return n
		}
		refused := []string{"COMMIT", " commit;", "END", "END TRANSACTION", "-- done\nROLLBACK", "/* a /* nested */ one */ Rollback Transaction",
			"ROLLBACK WORK", "BEGIN", "BEGIN IMMEDIATE", "START TRANSACTION", "ABORT", "PREPARE TRANSACTION 'x'", "COMMIT; INSERT INTO notes (tag) VALUES ('x')"}

		var tx store.Tx
		check := func(t *testing.T, tx store.Tx) {
			_, err := tx.Exec(c, "INSERT INTO notes (tag) VALUES ('before')")
			require.NoError(t, err)
			for _, stmt := range refused {
				_, err := tx.Exec(c, stmt)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "Exec(%q)", stmt)
				assert.Contains(t, err.Error(), "alkstore: exec: ")
				_, err = tx.Query(c, stmt)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "Query(%q)", stmt)
				var x int
				require.ErrorIs(t, tx.QueryRow(c, stmt).Scan(&x), store.ErrInvalidArgument, "QueryRow(%q)", stmt)
			}
			// Savepoints stay the caller's.
			for _, stmt := range []string{"SAVEPOINT a", "INSERT INTO notes (tag) VALUES ('undone')", "ROLLBACK TO SAVEPOINT a", "RELEASE SAVEPOINT a",
				"SAVEPOINT b", "INSERT INTO notes (tag) VALUES ('undone')", "ROLLBACK TRANSACTION TO b", "RELEASE b"} {
				if e.name == "pg" && stmt == "ROLLBACK TRANSACTION TO b" {
					stmt = "ROLLBACK TO b" // SQLite's form
				}
				_, err := tx.Exec(c, stmt)
				require.NoError(t, err, stmt)
			}
			_, err = tx.Exec(c, "INSERT INTO notes (tag) VALUES ('kept')")
			require.NoError(t, err, "the transaction goes on")
		}

		t.Run("begun", func(t *testing.T) {
			var err error
			tx, err = s.Begin(c)
			require.NoError(t, err)
			check(t, tx)
			require.NoError(t, tx.Commit(c))
			assert.Equal(t, 1, stored("before"))
			assert.Equal(t, 1, stored("kept"))
			assert.Zero(t, stored("undone"))
			assert.Zero(t, stored("x"))
		})
		t.Run("adopted", func(t *testing.T) {
			var commit func() error
			if e.name == "pg" {
				ptx, err := e.pool(t).Begin(c)
				require.NoError(t, err)
				tx, err = s.AdoptPgx(ptx)
				require.NoError(t, err)
				commit = func() error { return ptx.Commit(c) }
			} else {
				stx, err := db.BeginTx(c, nil)
				require.NoError(t, err)
				tx, err = s.AdoptSQL(stx)
				require.NoError(t, err)
				commit = stx.Commit
			}
			check(t, tx)
			require.NoError(t, commit())
			assert.Equal(t, 2, stored("kept"))
		})

		// A COMMIT after another statement of one Exec: refused before
		// anything of the text runs (before w33's review it ran, and the
		// end was found afterwards, which missed an end followed by a
		// BEGIN).
		t.Run("after another statement", func(t *testing.T) {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			defer tx.Rollback(c)
			for _, stmt := range []string{"INSERT INTO notes (tag) VALUES ('multi'); COMMIT", "INSERT INTO notes (tag) VALUES ('multi');\n-- done\n rollback work"} {
				_, err = tx.Exec(c, stmt)
				require.ErrorIs(t, err, store.ErrInvalidArgument, stmt)
			}
			_, err = tx.Exec(c, "INSERT INTO notes (tag) VALUES ('later')")
			require.NoError(t, err, "the transaction goes on")
			require.NoError(t, tx.Commit(c))
			assert.Zero(t, stored("multi"), "nothing of a refused text ran")
			assert.Equal(t, 1, stored("later"))
		})
	})
}

// Priority runs from -2^30 to 2^30 and MaxAttempts to 2^30 on both
// engines: the edges are stored and claimed in order, a value past them is
// refused at enqueue with ErrInvalidArgument naming the range, by every
// enqueue form and by Schedule.Set, and nothing of a refused call is
// stored (fresh-eyes review, SQLite item 6: the range was undocumented).
func TestPriorityRangeIsRefusedOutside(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("edges")
		for _, p := range []int{-(1 << 30), 0, 1 << 30} {
			_, err := q.Enqueue(c, nil, store.EnqueueOpts{Priority: p, MaxAttempts: 1 << 30})
			require.NoError(t, err, "priority %d", p)
		}
		jobs, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		var got []int
		for _, j := range jobs {
			got = append(got, j.Priority)
			assert.Equal(t, 1<<30, j.MaxAttempts)
		}
		assert.Equal(t, []int{1 << 30, 0, -(1 << 30)}, got, "claimed highest first")

		bad := []store.EnqueueOpts{{Priority: 1<<30 + 1}, {Priority: -(1 << 30) - 1}, {Priority: 1 << 31}, {Priority: -1 << 62}, {MaxAttempts: 1<<30 + 1}}
		r := s.Queue("refused")
		for _, o := range bad {
			_, err := r.Enqueue(c, nil, o)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
			assert.Contains(t, err.Error(), `alkstore: enqueue "refused": `)
			assert.Contains(t, err.Error(), "out of range")
			err = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
				_, err := r.EnqueueTx(ctx, tx, nil, o)
				return err
			})
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
			_, err = r.EnqueueMany(c, []store.NewJob{{}, {Opts: o}})
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
			assert.Contains(t, err.Error(), "job 1")
			u := o
			u.Unique = store.UniqueOpts{Key: "k"}
			_, err = r.EnqueueUnique(c, nil, u)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
			err = s.Schedule("refused").Set(c, store.ScheduleSpec{Spec: "@hourly", Queue: "refused", Priority: o.Priority, MaxAttempts: o.MaxAttempts})
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
		}
		st, err := r.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Ready+st.Scheduled, "nothing of a refused call stored")
		_, err = s.Schedule("refused").Info(c)
		assert.ErrorIs(t, err, store.ErrNotFound)
	})
}

// RequeueDead moves the jobs that died at or before its start by its own
// store's clock: a job a process whose clock runs ahead ended stays dead
// until that time has passed for the caller's clock, while Requeue moves it
// by id at once, as documented (fresh-eyes review, SQLite item 6; job times
// are the stores' clocks, WithClock, not the database's).
func TestRequeueDeadGoesByItsOwnClock(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		ahead := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		q, qa := s.Queue("skew"), ahead.Queue("skew")
		ids, err := q.EnqueueMany(c, make([]store.NewJob, 2))
		require.NoError(t, err)
		jobs, err := qa.Claim(c, "ahead", 2, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		for _, j := range jobs {
			require.NoError(t, j.Fail(c, "died ahead"))
		}
		moved, err := q.RequeueDead(c)
		require.NoError(t, err)
		assert.Zero(t, moved, "died after this store's now, by the clock that ended them")
		require.NoError(t, q.Requeue(c, ids[0]), "Requeue moves one at once")
		moved, err = qa.RequeueDead(c) // the same time has passed for this clock
		require.NoError(t, err)
		assert.EqualValues(t, 1, moved)
		for _, id := range ids {
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobPending, j.State, "job %d", id)
		}
	})
}

// A jobs row written by hand that breaks a job rule fails with an error
// naming the table and the rule on both engines; on PostgreSQL, where the
// rules are a domain's constraints since schema 00030, the error the store
// returns (here Tx.Exec's) says alkstore.jobs and its *pgconn.PgError
// carries TableName "jobs" beside the rule's constraint name and SQLSTATE
// 23514, as a table CHECK's did (fresh-eyes review, pg item 5: it named
// only the domain).
func TestBrokenJobRuleNamesItsTable(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		id, err := s.Queue("q").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		table := map[string]string{"pg": "alkstore.jobs", "lite": "alk_jobs"}[e.name]
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)
		_, err = tx.Exec(c, "UPDATE "+table+" SET max_attempts = 0 WHERE id = $1", id)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "alkstore: exec: ")
		if e.name == "lite" {
			assert.ErrorIs(t, err, sqlite3.CONSTRAINT_CHECK)
			assert.Contains(t, err.Error(), "max_attempts > 0")
			return
		}
		assert.Contains(t, err.Error(), "alkstore.jobs")
		assert.Contains(t, err.Error(), "jobs_max_attempts_check")
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "23514", pe.Code)
		assert.Equal(t, "jobs", pe.TableName)
		assert.Equal(t, "alkstore", pe.SchemaName)
		assert.Equal(t, "jobs_max_attempts_check", pe.ConstraintName)
	})
}

// A compaction_heads row written by hand that breaks the head rule fails
// on both engines, and the error the store returns names the table. On
// SQLite the rule is the table's CHECK (the head's three columns all set
// or all NULL). On PostgreSQL it was the domain alkstore.head_nulls's
// constraint from schema 00033 to 00035, whose error named only the domain
// until the store added the table (fresh-eyes review w33); since 00036 it
// is NOT NULL on schema_version and compaction_rank, whose error is
// SQLSTATE 23502 and names the table and the column itself.
func TestBrokenHeadRuleNamesItsTable(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := s.Stream("k").PublishWithKey(c, "a", []byte("x"))
		require.NoError(t, err)
		table := map[string]string{"pg": "alkstore.compaction_heads", "lite": "alk_compaction_heads"}[e.name]
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)
		_, err = tx.Exec(c, "UPDATE "+table+" SET compaction_rank = NULL")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "alkstore: exec: ")
		if e.name == "lite" {
			assert.ErrorIs(t, err, sqlite3.CONSTRAINT_CHECK)
			return
		}
		assert.Contains(t, err.Error(), `null value in column "compaction_rank" of relation "compaction_heads" violates not-null constraint`)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "23502", pe.Code)
		assert.Equal(t, "compaction_heads", pe.TableName)
		assert.Equal(t, "alkstore", pe.SchemaName)
		assert.Equal(t, "compaction_rank", pe.ColumnName)
	})
}

// Every statement of a text of several run through a Tx is looked at: one
// that ends the transaction is refused with ErrInvalidArgument before any
// of the text runs, also when a BEGIN follows it or it chains (AND CHAIN),
// so the transaction goes on and its Commit or Rollback means what it
// says; semicolons and keywords inside literals, quoted identifiers,
// comments and trigger or function bodies split nothing. (Before,
// fresh-eyes review w33: Exec("SELECT 1; ROLLBACK; BEGIN") after a
// PublishTx returned nil, Commit returned nil and the event was gone;
// "SELECT 1; COMMIT; BEGIN" then Rollback left it committed; on pg
// "SELECT 1; ROLLBACK AND CHAIN" lost it with no BEGIN.)
func TestTxRefusesAnEndAmongSeveralStatements(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		refused := []string{"SELECT 1; ROLLBACK; BEGIN", "SELECT 1; COMMIT; BEGIN", "SELECT 1;END;BEGIN", "SELECT 1; -- x\n/* y */ rollback transaction; begin",
			"SELECT 'a'';b'; COMMIT; BEGIN", "SELECT 1; SAVEPOINT a; ROLLBACK TO a; COMMIT; BEGIN"}
		passed := []string{"SELECT 'a; COMMIT; BEGIN'; SELECT 1", "SELECT 1 /* ; COMMIT; BEGIN */; SELECT 'it''s; ROLLBACK'",
			`SELECT "x; commit" FROM (SELECT 1 AS "x; commit") AS q`, "-- ; COMMIT\nSELECT 1; SAVEPOINT a; ROLLBACK TO a; RELEASE a; SELECT 2"}
		if e.name == "pg" {
			refused = append(refused, "SELECT 1; ROLLBACK AND CHAIN", "SELECT 1; COMMIT AND CHAIN", "SELECT 1; /* a /* nested */ one */ ROLLBACK; BEGIN",
				"SELECT $1::int; ROLLBACK; BEGIN", "SELECT 1 AS a$x$; ROLLBACK; BEGIN; SELECT 2 AS b$x$", "SELECT 'x\\'; COMMIT; BEGIN")
			passed = append(passed, "SELECT $$; COMMIT; BEGIN$$; SELECT $t$ ; ROLLBACK $t$", "SELECT E'\\'; COMMIT; BEGIN'; SELECT 1",
				"SELECT 1 /* /* */ ; COMMIT */; SELECT 2",
				"CREATE FUNCTION alk_f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; SELECT 1")
		} else {
			refused = append(refused, "SELECT 1 /* a /* b */; ROLLBACK; BEGIN", "CREATE TEMP TABLE alk_u (trigger, begin); ROLLBACK; BEGIN")
			passed = append(passed, "SELECT [x; commit] FROM (SELECT 1 AS [x; commit]) AS q", "SELECT `x; commit` FROM (SELECT 1 AS `x; commit`) AS q",
				"CREATE TEMP TABLE alk_t (a); CREATE TEMP TRIGGER alk_tg AFTER INSERT ON alk_t BEGIN SELECT CASE WHEN 1 THEN 1 END; SELECT 2; END; INSERT INTO alk_t VALUES (1)")
		}
		run := func(t *testing.T, stream string, end func(store.Tx) error) {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			defer tx.Rollback(c)
			_, err = s.Stream(stream).PublishTx(c, tx, []byte("x"))
			require.NoError(t, err)
			for _, stmt := range refused {
				_, err := tx.Exec(c, stmt)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "Exec(%q)", stmt)
				assert.Contains(t, err.Error(), "alkstore: exec: ")
				_, err = tx.Query(c, stmt)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "Query(%q)", stmt)
			}
			for _, stmt := range passed {
				_, err := tx.Exec(c, stmt)
				require.NoError(t, err, "Exec(%q)", stmt)
			}
			require.NoError(t, end(tx))
		}
		t.Run("commit", func(t *testing.T) {
			run(t, "kept", func(tx store.Tx) error { return tx.Commit(c) })
			evs, err := s.Stream("kept").ReadSince(c, 0, 10)
			require.NoError(t, err)
			assert.Len(t, evs, 1, "Commit returned nil: the event is stored")
		})
		t.Run("rollback", func(t *testing.T) {
			passed = passed[:4] // the others create things once
			run(t, "gone", func(tx store.Tx) error { return tx.Rollback(c) })
			evs, err := s.Stream("gone").ReadSince(c, 0, 10)
			require.NoError(t, err)
			assert.Empty(t, evs, "Rollback returned nil: nothing is stored")
		})
	})
}
