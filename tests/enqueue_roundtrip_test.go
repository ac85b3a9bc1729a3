package tests

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// callerTag marks the contexts whose statements sqlRecorder records.
type callerTag struct{}

// sqlRecorder is a pgx tracer recording every statement run under a
// context carrying callerTag: its sqlc name, or its text when it has none
// (BEGIN, COMMIT, a NOTIFY of its own).
type sqlRecorder struct {
	mu   *sync.Mutex
	seen *[]string
}

func (r sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if ctx.Value(callerTag{}) != nil {
		name := stmtName(d.SQL)
		if name == "" {
			name = strings.TrimSpace(d.SQL)
		}
		r.mu.Lock()
		*r.seen = append(*r.seen, name)
		r.mu.Unlock()
	}
	return ctx
}

func (r sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestEnqueueIsOneStatementPostgres: on PostgreSQL a single Enqueue into a
// queue the store knows, and an EnqueueMany of 1,000 jobs, each send
// exactly one statement: no BEGIN and COMMIT around it, no second statement
// (the wake rides in the statement; the gate's trailing NOTIFY, at most one
// a 5 ms window, runs on its own timer, not in the caller's call).
// PostgreSQL only: round trips are what a network database pays for; an
// SQLite enqueue runs in the process.
func TestEnqueueIsOneStatementPostgres(t *testing.T) {
	e := newEnv(t, "pg")
	var mu sync.Mutex
	var seen []string
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = sqlRecorder{&mu, &seen}
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	require.NoError(t, err)
	s, err := store.OpenPool(ctx(t), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); pool.Close() })
	q := s.Queue("q")
	_, err = q.Enqueue(ctx(t), []byte("first"), store.EnqueueOpts{}) // registers the queue once per store
	require.NoError(t, err)

	took := func(do func(c context.Context) error) []string {
		t.Helper()
		mu.Lock()
		seen = nil
		mu.Unlock()
		require.NoError(t, do(context.WithValue(ctx(t), callerTag{}, true)))
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
	for range 20 {
		// EnqueueJobNotify when the gate gives the enqueue its wake (at most
		// once a window), else EnqueueJob: one statement either way.
		got := took(func(c context.Context) error {
			_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			return err
		})
		if len(got) != 1 || got[0] != "EnqueueJobNotify" {
			assert.Equal(t, []string{"EnqueueJob"}, got)
		}
	}
	alike := make([]store.NewJob, 1000)
	mixed := make([]store.NewJob, 1000)
	for i := range mixed {
		mixed[i].Opts.Priority = i % 3
	}
	for _, b := range []struct {
		jobs []store.NewJob
		stmt string
	}{{alike, "EnqueueJobsAlike"}, {mixed, "EnqueueJobs"}} {
		var ids []int64
		assert.Equal(t, []string{b.stmt}, took(func(c context.Context) error {
			var err error
			ids, err = q.EnqueueMany(c, b.jobs)
			return err
		}))
		require.Len(t, ids, len(b.jobs))
		for i := 1; i < len(ids); i++ {
			require.Greater(t, ids[i], ids[i-1], "ids in input order")
		}
	}
}
