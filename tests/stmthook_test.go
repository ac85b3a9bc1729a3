package tests

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Statement hooks force an interleaving between two statements the store
// runs: the hook runs on the goroutine that ran a statement, right after it
// finished (an auto-commit statement has committed by then), before the
// store runs its next one. On Postgres it is a pgx tracer on the store's
// pool; on SQLite a trace callback on the store's connections (installed by
// an auto extension on connections to the test's file only).

// stmtHook is called with the statement's sqlc name ("AckJob").
type stmtHook func(name string)

// openHooked opens a store on e whose statements call hook.
func (e *engineEnv) openHooked(t *testing.T, hook stmtHook, opts ...store.Option) *store.Store {
	t.Helper()
	if e.name == "pg" {
		cfg, err := pgxpool.ParseConfig(e.dsn)
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = pgHookTracer{hook}
		pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
		require.NoError(t, err)
		s, err := store.OpenPool(ctx(t), pool, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(); pool.Close() })
		return s
	}
	liteHooks.set(e.dsn, hook)
	t.Cleanup(func() { liteHooks.set(e.dsn, nil) })
	return e.open(t, opts...)
}

// stmtName is the sqlc name a generated statement's text starts with.
func stmtName(sql string) string {
	rest, ok := strings.CutPrefix(sql, "-- name: ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

type pgHookTracer struct{ hook stmtHook }

type pgHookSQL struct{}

func (h pgHookTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, pgHookSQL{}, d.SQL)
}

func (h pgHookTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(pgHookSQL{}).(string); d.Err == nil {
		if name := stmtName(sql); name != "" {
			h.hook(name)
		}
	}
}

// liteHooks maps a database file to its hook.
var liteHooks = &liteHookSet{hooks: map[string]stmtHook{}}

type liteHookSet struct {
	once  sync.Once
	mu    sync.Mutex
	hooks map[string]stmtHook
}

func (l *liteHookSet) set(path string, hook stmtHook) {
	l.once.Do(func() { sqlite3.AutoExtension(l.install) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if hook == nil {
		delete(l.hooks, path)
	} else {
		l.hooks[path] = hook
	}
}

func (l *liteHookSet) get(path string) stmtHook {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hooks[path]
}

// install traces a new connection when its file has a hook.
func (l *liteHookSet) install(c *sqlite3.Conn) error {
	path := c.Filename("main").String()
	if l.get(path) == nil {
		return nil
	}
	return c.Trace(sqlite3.TRACE_PROFILE, func(_ sqlite3.TraceEvent, stmt, _ any) error {
		if s, ok := stmt.(*sqlite3.Stmt); ok {
			if name := stmtName(s.SQL()); name != "" {
				if hook := l.get(path); hook != nil {
					hook(name)
				}
			}
		}
		return nil
	})
}
