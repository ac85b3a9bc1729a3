package tests

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// stmtHook is called with the statement's sqlc name ("AckJob"); on SQLite
// also with "COMMIT" and "ROLLBACK" as a transaction of the store's own
// (litedriver's WriteTx, a database/sql transaction) ends.
type stmtHook func(name string)

// stmtCounts counts the statements a hooked store runs, by name: pass its
// hook to openHooked, read with count.
type stmtCounts struct {
	mu  sync.Mutex
	ran map[string]int
}

func (sc *stmtCounts) hook(name string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.ran == nil {
		sc.ran = map[string]int{}
	}
	sc.ran[name]++
}

// count is how many of the named statements have run so far.
func (sc *stmtCounts) count(names ...string) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := 0
	for _, name := range names {
		n += sc.ran[name]
	}
	return n
}

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
			name := stmtName(s.SQL())
			if sql := s.SQL(); sql == "COMMIT" || sql == "ROLLBACK" {
				name = sql
			}
			if name != "" {
				if hook := l.get(path); hook != nil {
					hook(name)
				}
			}
		}
		return nil
	})
}

// openLogged opens a PostgreSQL store on e whose generated statements are
// logged as they end, with their SQLSTATE.
func openLogged(t *testing.T, e *engineEnv, opts ...store.Option) (*store.Store, *stmtLog) {
	t.Helper()
	require.Equal(t, "pg", e.name, "openLogged traces a pgx pool")
	l := &stmtLog{}
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = l
	pool, err := pgxpool.NewWithConfig(ctx(t), cfg)
	require.NoError(t, err)
	s, err := store.OpenPool(ctx(t), pool, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); pool.Close() })
	return s, l
}

// stmtLog records, for each of the store's generated statements that ended,
// its first argument and its SQLSTATE ("" when it succeeded).
type stmtLog struct {
	mu   sync.Mutex
	ends []stmtEnd
}

type stmtEnd struct {
	name, code string
	arg        any
}

type stmtLogStart struct{}

func (l *stmtLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	var arg any
	if len(d.Args) > 0 {
		arg = d.Args[0]
	}
	return context.WithValue(ctx, stmtLogStart{}, stmtEnd{name: stmtName(d.SQL), arg: arg})
}

func (l *stmtLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	end, _ := ctx.Value(stmtLogStart{}).(stmtEnd)
	if end.name == "" {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(d.Err, &pgErr) {
		end.code = pgErr.Code
	} else if d.Err != nil {
		end.code = d.Err.Error()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends = append(l.ends, end)
}

func (l *stmtLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends = nil
}

// arg is the first argument of the last statement name that ended.
func (l *stmtLog) arg(name string) (any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.ends) - 1; i >= 0; i-- {
		if l.ends[i].name == name {
			return l.ends[i].arg, true
		}
	}
	return nil, false
}

// code is the SQLSTATE the last statement name that ended failed with.
func (l *stmtLog) code(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.ends) - 1; i >= 0; i-- {
		if l.ends[i].name == name {
			return l.ends[i].code
		}
	}
	return "(not run)"
}

// all is every ended statement name, in the order they ended.
func (l *stmtLog) all(name string) []stmtEnd {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []stmtEnd
	for _, e := range l.ends {
		if e.name == name {
			out = append(out, e)
		}
	}
	return out
}
