package alktest_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

var (
	pgServer *pgtest.Server // nil when ALK_ENGINES leaves out pg
	engines  []string       // the engines ALK_ENGINES selects; both by default
)

func TestMain(m *testing.M) {
	var err error
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !slices.Contains(engines, "pg") {
		code := m.Run()
		templates.remove()
		os.Exit(code)
	}
	srv, err := pgtest.StartForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgServer = srv
	code := m.Run()
	srv.Stop()
	templates.remove()
	os.Exit(code)
}

// needPG skips a PostgreSQL-only test when ALK_ENGINES leaves out pg.
func needPG(t *testing.T) {
	t.Helper()
	if pgServer == nil {
		t.Skip("PostgreSQL left out by " + pgtest.EnginesEnv)
	}
}

// eachEngine runs body on a fresh store of each engine: on a copy of a
// database migrated once for the package (templates), as every Open of an
// application's database after its first finds it. No test here is of
// migrations (TestNewStore's stores are NewStore's own, empty at first);
// migrating each test's database cost the package a third of its CPU.
func eachEngine(t *testing.T, body func(t *testing.T, s *store.Store)) {
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			pgTemplate, liteTemplate := templates.get(t)
			dsn := filepath.Join(t.TempDir(), "alk.db")
			switch {
			case name == "lite":
				for _, suffix := range []string{"", "-wal"} { // a WAL, if Close left one, goes with it
					b, err := os.ReadFile(liteTemplate + suffix)
					if suffix != "" && errors.Is(err, fs.ErrNotExist) {
						continue
					}
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(dsn+suffix, b, 0o600))
				}
			case pgServer.CopiesDatabases():
				var err error
				dsn, err = pgServer.NewDatabaseFrom(ctx, pgTemplate)
				require.NoError(t, err)
			default: // ALK_PG_CREATEDB makes the databases (Citus)
				var err error
				dsn, err = pgServer.NewDatabase(ctx)
				require.NoError(t, err)
			}
			s, err := store.Open(ctx, dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			body(t, s)
		})
	}
}

// templates are the migrated databases eachEngine copies, made on first
// use: a PostgreSQL one (when pg runs) and a SQLite file, removed by
// TestMain.
var templates migrated

type migrated struct {
	once     sync.Once
	pg, lite string
	dir      string
	err      error
}

func (m *migrated) get(t *testing.T) (pg, lite string) {
	t.Helper()
	m.once.Do(func() {
		ctx := context.Background()
		if m.dir, m.err = os.MkdirTemp("", "alktest-template-"); m.err != nil {
			return
		}
		m.lite = filepath.Join(m.dir, "alk.db")
		if m.err = openAndClose(ctx, m.lite); m.err != nil || pgServer == nil {
			return
		}
		if !pgServer.CopiesDatabases() {
			return
		}
		if m.pg, m.err = pgServer.NewDatabase(ctx); m.err == nil {
			m.err = openAndClose(ctx, m.pg) // no session stays: a copy needs the template idle
		}
	})
	require.NoError(t, m.err, "the migrated templates")
	return m.pg, m.lite
}

func (m *migrated) remove() {
	if m.dir != "" {
		_ = os.RemoveAll(m.dir)
	}
}

func openAndClose(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	return s.Close()
}

// recorder is a testing.TB whose Fatalf records the failure and ends the
// goroutine, as testing's does; run a helper under it with failed.
type recorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(r)
}

// failed runs fn with a recorder and returns its failure message ("" when
// fn did not fail).
func failed(fn func(tb testing.TB)) (msg string) {
	r := &recorder{}
	func() {
		defer func() {
			if p := recover(); p != nil && p != any(r) {
				panic(p)
			}
		}()
		fn(r)
	}()
	return r.msg
}

type welcome struct {
	User int    `json:"user"`
	Lang string `json:"lang"`
}

func TestRequireEnqueued(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		mail := s.JobQueue[welcome]("mail")
		other := s.JobQueue[welcome]("other")
		_, err := mail.Enqueue(ctx, welcome{User: 1, Lang: "en"}, store.EnqueueOpts{})
		require.NoError(t, err)
		id, err := mail.Enqueue(ctx, welcome{User: 42, Lang: "fr"}, store.EnqueueOpts{Priority: 3})
		require.NoError(t, err)
		_, err = other.Enqueue(ctx, welcome{User: 7}, store.EnqueueOpts{})
		require.NoError(t, err)

		j := alktest.RequireEnqueued(ctx, t, mail, alktest.Payload(welcome{User: 42, Lang: "fr"}))
		assert.Equal(t, id, j.ID)
		assert.Equal(t, 3, j.Priority)
		assert.Equal(t, store.JobPending, j.State)
		j = alktest.RequireEnqueued(ctx, t, mail, func(_ *store.Job, v welcome) bool { return v.Lang == "fr" })
		assert.Equal(t, id, j.ID)
		alktest.RequireNotEnqueued(ctx, t, mail, alktest.Payload(welcome{User: 7}))

		// And they fail when they should.
		msg := failed(func(tb testing.TB) { alktest.RequireEnqueued(ctx, tb, mail, alktest.Payload(welcome{User: 7})) })
		assert.Contains(t, msg, `no job of queue "mail" matches (2 jobs)`)
		msg = failed(func(tb testing.TB) {
			alktest.RequireNotEnqueued(ctx, tb, mail, alktest.Payload(welcome{User: 1, Lang: "en"}))
		})
		assert.Contains(t, msg, `queue "mail" matches, want none`)
		msg = failed(func(tb testing.TB) { alktest.RequireEnqueued(ctx, tb, s.JobQueue[welcome]("empty"), nil) })
		assert.Contains(t, msg, "(0 jobs)")
	})
}

func TestRequireEnqueuedTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		mail := s.JobQueue[welcome]("mail")
		want := alktest.Payload(welcome{User: 42})

		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		id, err := mail.EnqueueTx(ctx, tx, welcome{User: 42}, store.EnqueueOpts{})
		require.NoError(t, err)
		j := alktest.RequireEnqueuedTx(ctx, t, tx, mail, want)
		assert.Equal(t, id, j.ID)
		require.NoError(t, tx.Rollback(ctx))
		alktest.RequireNotEnqueued(ctx, t, mail, want)

		tx, err = s.Begin(ctx)
		require.NoError(t, err)
		alktest.RequireNotEnqueuedTx(ctx, t, tx, mail, want)
		msg := failed(func(tb testing.TB) { alktest.RequireEnqueuedTx(ctx, tb, tx, mail, want) })
		assert.Contains(t, msg, "in the transaction")
		_, err = mail.EnqueueTx(ctx, tx, welcome{User: 42}, store.EnqueueOpts{})
		require.NoError(t, err)
		msg = failed(func(tb testing.TB) { alktest.RequireNotEnqueuedTx(ctx, tb, tx, mail, want) })
		assert.Contains(t, msg, "want none")
		require.NoError(t, tx.Commit(ctx))
		alktest.RequireEnqueued(ctx, t, mail, want)
	})
}

func TestWork(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("work")
		var seen welcome
		res := alktest.Work(ctx, t, q, welcome{User: 1}, store.EnqueueOpts{},
			func(_ context.Context, j *store.Job, v welcome) error {
				seen = v
				assert.Equal(t, store.JobRunning, j.State)
				return nil
			})
		assert.Equal(t, welcome{User: 1}, seen)
		assert.NoError(t, res.Err)
		assert.Equal(t, alktest.Acked, res.Outcome)
		assert.Nil(t, res.Job, "an acked job is gone")

		boom := errors.New("boom")
		res = alktest.Work(ctx, t, q, welcome{User: 2}, store.EnqueueOpts{MaxAttempts: 2},
			func(context.Context, *store.Job, welcome) error { return boom })
		assert.ErrorIs(t, res.Err, boom)
		assert.Equal(t, alktest.Retried, res.Outcome)
		require.NotNil(t, res.Job)
		assert.Equal(t, store.JobPending, res.Job.State)
		assert.Equal(t, "boom", res.Job.LastError)
		assert.True(t, res.Job.RunAt.After(time.Now()), "retried after a backoff")
		require.NoError(t, q.Queue().Cancel(ctx, res.Job.ID)) // out of the next claims' way

		res = alktest.Work(ctx, t, q, welcome{User: 3}, store.EnqueueOpts{MaxAttempts: 1},
			func(context.Context, *store.Job, welcome) error { return boom })
		assert.Equal(t, alktest.Failed, res.Outcome, "an error on the last attempt")
		assert.Equal(t, store.JobDead, res.Job.State)

		res = alktest.Work(ctx, t, q, welcome{User: 4}, store.EnqueueOpts{},
			func(context.Context, *store.Job, welcome) error { return store.Permanent(boom) })
		assert.Equal(t, alktest.Failed, res.Outcome)
		assert.Equal(t, store.JobDead, res.Job.State)
		assert.Equal(t, "boom", res.Job.LastError)

		res = alktest.Work(ctx, t, q, welcome{User: 5}, store.EnqueueOpts{},
			func(context.Context, *store.Job, welcome) error { panic("oops") })
		assert.ErrorContains(t, res.Err, "handler panicked: oops")
		assert.Equal(t, alktest.Retried, res.Outcome)
		require.NoError(t, q.Queue().Cancel(ctx, res.Job.ID))

		res = alktest.Work(ctx, t, q, welcome{User: 6}, store.EnqueueOpts{},
			func(ctx context.Context, j *store.Job, _ welcome) error {
				_, err := j.Retry(ctx, time.Hour, "not yet")
				return err
			})
		assert.NoError(t, res.Err)
		assert.Equal(t, alktest.SettledByHandler, res.Outcome)
		assert.Equal(t, "not yet", res.Job.LastError)
		require.NoError(t, q.Queue().Cancel(ctx, res.Job.ID))

		res = alktest.Work(ctx, t, q, welcome{User: 8}, store.EnqueueOpts{MaxAttempts: 1},
			func(context.Context, *store.Job, welcome) error {
				return fmt.Errorf("busy: %w", store.Snooze(time.Hour))
			})
		assert.Equal(t, alktest.Snoozed, res.Outcome, "a wrapped Snooze, as Work reads it")
		require.NotNil(t, res.Job)
		assert.Equal(t, store.JobPending, res.Job.State, "snoozed on its only attempt: not dead")
		assert.Equal(t, 0, res.Job.Attempts, "the attempt is given back")
		assert.True(t, res.Job.RunAt.After(time.Now().Add(50*time.Minute)), "runs again after the delay")
		require.NoError(t, q.Queue().Cancel(ctx, res.Job.ID))
	})
}
