package tests

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// holdHeldAck holds the held rows' ack (the statement CompleteLockedJobs)
// in the application's query tracer, which pgx calls before it sends the
// statement, until a cancel request for the ack's backend was delivered:
// the server then dropped it, the backend being idle (reading its next
// command). A SELECT 1 on the same backend first makes sure the backend
// took the cancel's signal before the statement arrives. It stands in for
// the ack's goroutine descheduled between taking its connection and
// sending the statement, while the hard stop gives the ack up.
type holdHeldAck struct {
	ctx       context.Context
	once      sync.Once
	pid       atomic.Uint32 // the ack's backend, once held
	holding   chan struct{} // the ack holds its connection, its statement not sent
	cancelled chan struct{} // a cancel request for pid was delivered
	sentOne   sync.Once
	ended     chan struct{} // the ack's statement returned
}

type heldAckKey struct{}

func newHoldHeldAck(ctx context.Context) *holdHeldAck {
	return &holdHeldAck{ctx: ctx, holding: make(chan struct{}), cancelled: make(chan struct{}), ended: make(chan struct{})}
}

func (h *holdHeldAck) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "name: CompleteLockedJobs") {
		return ctx
	}
	held := false
	h.once.Do(func() {
		held = true
		h.pid.Store(conn.PgConn().PID())
		close(h.holding)
		select {
		case <-h.cancelled:
		case <-h.ctx.Done():
		}
		_, _ = conn.PgConn().Exec(h.ctx, "SELECT 1").ReadAll() // the signal taken (dropped, or cutting this)
	})
	if !held {
		return ctx
	}
	return context.WithValue(ctx, heldAckKey{}, true)
}

func (h *holdHeldAck) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(heldAckKey{}) != nil {
		close(h.ended)
	}
}

// dial wraps the pool's dialer to see cancel requests (pgconn's
// CancelRequest dials with it too): one for the held backend counts as
// delivered once pgconn closes it, after the server closed its end.
func (h *holdHeldAck) dial(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cancelWatch{Conn: c, h: h}, nil
	}
}

type cancelWatch struct {
	net.Conn
	h      *holdHeldAck
	forAck atomic.Bool
}

func (c *cancelWatch) Write(b []byte) (int, error) {
	if len(b) >= 12 && binary.BigEndian.Uint32(b[4:8]) == 80877102 && // CancelRequest
		binary.BigEndian.Uint32(b[8:12]) == c.h.pid.Load() && c.h.pid.Load() != 0 {
		c.forAck.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *cancelWatch) Close() error {
	err := c.Conn.Close()
	if c.forAck.Load() {
		c.h.sentOne.Do(func() { close(c.h.cancelled) })
	}
	return err
}

// TestOpenPoolHardShutdownGivesUpAHeldAckNotSentYet is
// TestOpenPoolHardShutdownGivesUpAHeldRowsAck (PostgreSQL only: OpenPool)
// with the hard stop's give-up reaching the ack's backend before the ack's
// statement does: the ack has taken its connection, the give-up's cancel
// request is delivered and dropped by the idle backend, and only then is
// the statement sent (forced by the application's query tracer, see
// holdHeldAck). The statement must still be given up: Shutdown returns
// with it ended and says the writes waiting for a lock stored nothing,
// and once the row is free nothing acks the job behind the closed store's
// back. Before, the give-up was one cancel request: the statement, run
// without the stop's context, then waited for the row with nothing left
// to cut it; Shutdown waited 5 s for it and said "operations still
// running", the application's pool.Close hung until the row was freed,
// and the ack then committed (review59a F3).
func TestOpenPoolHardShutdownGivesUpAHeldAckNotSentYet(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	foreign := e.sqlDB(t)
	for round := range 3 {
		hold := newHoldHeldAck(c)
		cfg, err := pgxpool.ParseConfig(e.dsn)
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = hold
		cfg.ConnConfig.DialFunc = hold.dial(cfg.ConnConfig.DialFunc)
		pool, err := pgxpool.NewWithConfig(c, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := store.OpenPool(c, pool)
		require.NoError(t, err)
		q := s.Queue(fmt.Sprintf("held-not-sent-%d", round))
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		var ftx atomic.Pointer[sql.Tx]
		rollback := func() {
			if tx := ftx.Swap(nil); tx != nil {
				require.NoError(t, tx.Rollback())
			}
		}
		t.Cleanup(func() {
			if tx := ftx.Load(); tx != nil {
				_ = tx.Rollback()
			}
		})
		w, err := q.NewWorker(store.WorkOpts{Concurrency: 1, Visibility: time.Minute, Timeout: time.Minute},
			func(ctx context.Context, j *store.Job) error {
				tx, err := foreign.BeginTx(c, nil)
				if err == nil {
					ftx.Store(tx)
					_, err = tx.ExecContext(c, heldRowSQL(e), j.ID)
				}
				return err
			})
		require.NoError(t, err)
		ran := make(chan error, 1)
		go func() { ran <- w.Run(c) }()
		select {
		case <-hold.holding:
		case <-c.Done():
			t.Fatalf("round %d: the held row's ack never began", round)
		}

		hard, cancel := context.WithCancel(c)
		cancel()
		err = s.Shutdown(hard)
		require.ErrorIs(t, err, context.Canceled)
		select {
		case <-hold.cancelled:
		default:
			t.Fatalf("round %d: Shutdown returned before it gave the ack up (%v)", round, err)
		}
		select {
		case <-hold.ended:
		default:
			t.Fatalf("round %d: the ack still waits for the row after Shutdown returned (%v)", round, err)
		}
		require.NotContains(t, err.Error(), "operations still running", "round %d", round)
		require.Contains(t, err.Error(), "writes waiting for a lock another connection holds", "round %d", round)
		require.Contains(t, err.Error(), "stored nothing", "round %d", round)
		select {
		case err := <-ran:
			require.ErrorIs(t, err, store.ErrClosed)
		case <-c.Done():
			t.Fatalf("round %d: Run did not return", round)
		}

		// The row freed, nothing acks the job behind the closed store's back.
		rollback()
		var state string
		require.NoError(t, foreign.QueryRowContext(c, `SELECT coalesce((SELECT state FROM alkstore.jobs WHERE id = $1), 'deleted')`, id).Scan(&state))
		require.Equal(t, "running", state, "round %d: the ack the stop gave up was stored", round)
		pool.Close() // nothing of the store's holds a connection
	}
}
