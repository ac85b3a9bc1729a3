package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/receiver"
)

// Wakes and notifications on PostgreSQL.

// startFeed runs the forwarder on a connection taken out of the pool for
// good (hijacked), so it never counts against the pool's work.
func (e *pgEngine) startFeed(hub *receiver.Hub, log *slog.Logger) (func(), <-chan struct{}) {
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return c.Hijack(), nil
	}
	listen := func(ctx context.Context, conn *pgx.Conn) error { return pgdb.New(conn).ListenWakes(ctx) }
	f := receiver.StartForwarder(hub, connect, listen, log)
	return f.Close, f.Ready()
}

// listen subscribes to the channel's messages, then waits until the
// forwarder's LISTEN is in place, so the listener hears everything sent
// after Listen returns.
func (e *pgEngine) listen(ctx context.Context, s *Store, channel string, onClose func()) (*receiver.Listener, error) {
	sub := s.hub.SubscribeMessages(channel, 256)
	if err := s.feedReady(ctx); err != nil {
		sub.Close()
		return nil, err
	}
	return receiver.NewPushListener(channel, sub, onClose), nil
}

func (o pgOps) notify(ctx context.Context, channel string, payload []byte, _ time.Time) error {
	msg, err := receiver.EncodeNotification(channel, payload) // size checked before any I/O
	if err != nil {
		return err
	}
	return o.q.Notify(ctx, msg)
}

func (o pgOps) pruneNotifications(context.Context, time.Time, int) (int64, error) {
	return 0, nil // NOTIFY stores nothing
}
