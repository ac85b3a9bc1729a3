package wake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Forwarder is a store's one LISTEN connection on Postgres. It multiplexes
// every wake and notification (they share one channel, see wire.go) into
// the hub, and when its connection dies it reconnects forever with capped
// backoff, LISTENs again and wakes every subscriber, so each re-reads the
// durable state it may have missed while the connection was down.
type Forwarder struct {
	hub     *Hub
	connect func(ctx context.Context) (*pgx.Conn, error) // a dedicated connection
	listen  func(ctx context.Context, conn *pgx.Conn) error
	// ignore, when set, tells a NOTIFY heard on conn that the hub has no
	// need of (the store's own writes: see pgEngine.heardOwnWrite).
	ignore     func(conn *pgx.Conn, n *pgconn.Notification) bool
	log        *slog.Logger
	cancel     context.CancelFunc
	done       chan struct{}
	ready      chan struct{} // closed after the first LISTEN succeeded
	readyOnce  sync.Once
	reconnects atomic.Int64
}

// Backoff bounds between reconnect attempts. The cap bounds recovery: once
// the database accepts connections again, the forwarder is back within
// maxBackoff (plus one connect), and its reconnect wake makes every
// subscriber re-read at once instead of at its safety poll. A failed
// attempt is one refused connection, so a few a second cost nothing.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// connectTimeout bounds one attempt to connect and LISTEN, so a connection
// that hangs (a lost network rather than a refusing server) is retried too.
const connectTimeout = 5 * time.Second

// StartForwarder connects in the background and forwards until Close,
// every NOTIFY but those ignore (if not nil) reports.
func StartForwarder(hub *Hub, connect func(context.Context) (*pgx.Conn, error),
	listen func(context.Context, *pgx.Conn) error, ignore func(*pgx.Conn, *pgconn.Notification) bool, log *slog.Logger) *Forwarder {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Forwarder{hub: hub, connect: connect, listen: listen, ignore: ignore, log: log, cancel: cancel,
		done: make(chan struct{}), ready: make(chan struct{})}
	go f.run(ctx)
	return f
}

// Ready is closed once the first LISTEN is in place: from then on every
// NOTIFY reaches the hub (or, across a reconnect, its durable effect does).
func (f *Forwarder) Ready() <-chan struct{} { return f.ready }

// Reconnects counts the connections made after the first.
func (f *Forwarder) Reconnects() int64 { return f.reconnects.Load() }

func (f *Forwarder) run(ctx context.Context) {
	defer close(f.done)
	backoff := minBackoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, maxBackoff)
		}
		forwarded, err := f.session(ctx, attempt > 0)
		if ctx.Err() != nil {
			return
		}
		if forwarded {
			backoff = minBackoff // it worked for a while: retry soon
		}
		f.log.Warn("alkstore: listen connection lost; reconnecting", "error", err, "backoff", backoff)
	}
}

// session runs one connection's life: connect, LISTEN, wake everyone, then
// forward notifications until the connection fails. forwarded says whether
// it got as far as listening.
func (f *Forwarder) session(ctx context.Context, reconnect bool) (forwarded bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := f.connect(cctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := f.listen(cctx, conn); err != nil {
		return false, err
	}
	if reconnect {
		f.reconnects.Add(1)
	}
	f.readyOnce.Do(func() { close(f.ready) })
	// Anything committed while nobody listened is in the tables: wake every
	// subscriber to re-read.
	f.hub.WakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if f.ignore == nil || !f.ignore(conn, n) {
			dispatch(f.hub, n.Payload)
		}
	}
}

// Close stops forwarding and closes the connection.
func (f *Forwarder) Close() {
	f.cancel()
	<-f.done
}
