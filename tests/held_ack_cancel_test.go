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

// holdUntilCancelled holds the first statement named name
// (its sqlc name, in the statement's text) in the application's query
// tracer, which pgx calls before it sends the statement, until a cancel
// request for that statement's backend was delivered: the server dropped
// it, the backend being idle (reading its next command). A SELECT 1 on the
// same backend first makes sure the backend took the cancel's signal
// before the statement arrives. It stands in for the statement's goroutine
// descheduled between taking its connection and sending the statement,
// while the store gives the statement up.
type holdUntilCancelled struct {
	ctx       context.Context
	name      string
	once      sync.Once
	pid       atomic.Uint32 // the statement's backend, once held
	holding   chan struct{} // the statement's connection is taken, the statement not sent
	cancelled chan struct{} // a cancel request for pid was delivered
	sentOne   sync.Once
	ended     chan struct{} // the statement returned
	endErr    error         // its error, once ended
}

type heldStatementKey struct{}

func newHoldUntilCancelled(ctx context.Context, name string) *holdUntilCancelled {
	return &holdUntilCancelled{ctx: ctx, name: name,
		holding: make(chan struct{}), cancelled: make(chan struct{}), ended: make(chan struct{})}
}

func (h *holdUntilCancelled) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "name: "+h.name+" ") {
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
	return context.WithValue(ctx, heldStatementKey{}, true)
}

func (h *holdUntilCancelled) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(heldStatementKey{}) != nil {
		h.endErr = d.Err
		close(h.ended)
	}
}

// dial wraps the pool's dialer to see cancel requests (pgconn's
// CancelRequest dials with it too): one for the held backend counts as
// delivered once pgconn closes it, after the server closed its end.
func (h *holdUntilCancelled) dial(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cancelWatch{Conn: c, h: h}, nil
	}
}

// pool is an application's pool on e's database whose statement name is
// held (see holdUntilCancelled).
func (h *holdUntilCancelled) pool(t *testing.T, e *engineEnv) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = h
	cfg.ConnConfig.DialFunc = h.dial(cfg.ConnConfig.DialFunc)
	pool, err := pgxpool.NewWithConfig(h.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

type cancelWatch struct {
	net.Conn
	h       *holdUntilCancelled
	forHeld atomic.Bool
}

func (c *cancelWatch) Write(b []byte) (int, error) {
	if len(b) >= 12 && binary.BigEndian.Uint32(b[4:8]) == 80877102 && // CancelRequest
		binary.BigEndian.Uint32(b[8:12]) == c.h.pid.Load() && c.h.pid.Load() != 0 {
		c.forHeld.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *cancelWatch) Close() error {
	err := c.Conn.Close()
	if c.forHeld.Load() {
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
// holdUntilCancelled). The statement must still be given up: Shutdown returns
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
		hold := newHoldUntilCancelled(c, "CompleteLockedJobs")
		pool := hold.pool(t, e)
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
				return holdJobRow(c, e, foreign, &ftx, j.ID)
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

// TestAHeldRowsHeartbeatGivenUpBeforeItIsSentIsCancelled is the same race
// for a heartbeat waiting for a row another transaction holds
// (HeartbeatLockedJob, on a connection of its own, given up by a cancel
// request once its job's handler returned): the handler returns after the
// heartbeat took its connection and before its statement reached the
// server (forced as above; OpenPool, so PostgreSQL only). The server must
// still cancel the statement (SQLSTATE 57014). Before, the one cancel
// request was dropped, the statement waited for the row until the
// heartbeat cut it off on the client side 5 s later (rollbackTimeout:
// "context canceled"), holding its connection, the store's room for a
// lock wait and the worker's stop meanwhile.
func TestAHeldRowsHeartbeatGivenUpBeforeItIsSentIsCancelled(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	foreign := e.sqlDB(t)
	for round := range 3 {
		hold := newHoldUntilCancelled(c, "HeartbeatLockedJob")
		s, err := store.OpenPool(c, hold.pool(t, e))
		require.NoError(t, err)
		q := s.Queue(fmt.Sprintf("held-beat-not-sent-%d", round))
		_, err = q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		ftx, err := foreign.BeginTx(c, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ftx.Rollback() })
		wc, stop := context.WithCancel(c)
		worked := make(chan error, 1)
		go func() {
			worked <- q.Work(wc, store.WorkOpts{Concurrency: 1, Visibility: 3 * time.Second, Timeout: time.Minute},
				func(ctx context.Context, j *store.Job) error {
					if _, err := ftx.ExecContext(c, heldRowSQL(e), j.ID); err != nil {
						return err
					}
					select { // a beat waits for the row: give it up by returning
					case <-hold.holding:
					case <-c.Done():
					}
					return nil
				})
		}()
		select {
		case <-hold.ended:
		case <-c.Done():
			t.Fatalf("round %d: the held row's heartbeat never returned", round)
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, hold.endErr, &pgErr, "round %d: the heartbeat was not cancelled at the server", round)
		require.Equal(t, "57014", pgErr.Code, "round %d", round)

		require.NoError(t, ftx.Rollback())
		stop()
		require.NoError(t, <-worked)
		require.NoError(t, s.Close())
	}
}
