package tests

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// records is a slog handler that keeps every record at Info or above.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *records) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *records) WithGroup(string) slog.Handler                { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

// matching is the records whose message contains msg.
func (h *records) matching(msg string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if strings.Contains(r.Message, msg) {
			out = append(out, r)
		}
	}
	return out
}

func recordAttr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// TestHeartbeatNoConnectionWarnsOnce: while the application holds what a
// worker's heartbeat needs (SQLite's writer slot, with a Begin'd
// transaction; on PostgreSQL every connection of the store's pool) for
// many ticks, the heartbeat's "found no connection" warning is logged
// once, at the first tick; when the beats run again one Info line says
// how many ticks were not warned about (and proves that many ticks
// found no connection). Before (703994a) it was logged every tick
// (Visibility/6): with the rate limit taken out this test saw 14
// warnings on SQLite and 15 on PostgreSQL (review54b F5).
func TestHeartbeatNoConnectionWarnsOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const visibility = 600 * time.Millisecond
		const quietTicks = 8
		logs := &records{}
		c := ctx(t)
		var s *store.Store
		var pool *pgxpool.Pool
		if e.name == "pg" {
			cfg, err := pgxpool.ParseConfig(e.dsn)
			require.NoError(t, err)
			cfg.MaxConns = 3
			pool, err = pgxpool.NewWithConfig(c, cfg)
			require.NoError(t, err)
			s, err = store.OpenPool(c, pool, store.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(); pool.Close() })
		} else {
			s = e.open(t, store.WithLogger(slog.New(logs)))
		}
		q := s.Queue("no-conn")
		_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		started := make(chan struct{})
		wc, stop := context.WithCancel(c)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		wg.Go(func() {
			_ = q.Work(wc, store.WorkOpts{Concurrency: 1, Visibility: visibility, Timeout: time.Minute},
				func(ctx context.Context, j *store.Job) error {
					close(started)
					<-ctx.Done() // the claim is lost once the beats run again
					return context.Cause(ctx)
				})
		})
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the handler did not start")
		}

		// Hold what the heartbeat needs.
		var releaseAll func()
		if e.name == "pg" {
			var held []*pgxpool.Conn
			for {
				ac, cancel := context.WithTimeout(c, 300*time.Millisecond)
				conn, err := pool.Acquire(ac)
				cancel()
				if err != nil {
					break // every connection is held
				}
				held = append(held, conn)
			}
			releaseAll = func() {
				for _, conn := range held {
					conn.Release()
				}
			}
		} else {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			releaseAll = func() { _ = tx.Rollback(c) }
		}
		const msg = "heartbeat found no connection"
		for len(logs.matching(msg)) == 0 && c.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		// Many ticks more (each tick that finds no connection waits a
		// tick, Visibility/6, once the lease ran out); the Info line
		// below counts them. Three times the ticks counted: at load 30
		// a hold of quietTicks + 6 ticks saw only 7 (the goroutines ran
		// late); the count, not this wait, is what the test asserts.
		time.Sleep((3*quietTicks + 6) * visibility / 6)
		releaseAll()
		const back = "heartbeat has a connection again"
		for limit := time.Now().Add(20 * time.Second); len(logs.matching(back)) == 0 && time.Now().Before(limit); {
			time.Sleep(5 * time.Millisecond)
		}
		warned := logs.matching(msg)
		require.Len(t, warned, 1, "the warning was repeated while the connection stayed held")
		resumed := logs.matching(back)
		require.Len(t, resumed, 1, "no line said the beats ran again")
		require.GreaterOrEqual(t, recordAttr(resumed[0], "ticks_not_warned").Int64(), int64(quietTicks),
			"fewer ticks than the test needs found no connection")
	})
}
