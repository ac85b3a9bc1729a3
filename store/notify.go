package store

import (
	"context"
	"fmt"

	"github.com/alkstore/alkstore/internal/wake"
)

// Notify sends payload to the current listeners of channel. Notifications
// are ephemeral: a listener only receives those sent after it started. On
// Postgres they travel by NOTIFY, whose limit (8000 bytes with alkstore's
// small envelope; binary payloads travel in base64) makes a larger payload
// fail with ErrPayloadTooLarge before any I/O, on both engines.
func (s *Store) Notify(ctx context.Context, channel string, payload []byte) error {
	return s.notify(ctx, autoWrite(ctx), channel, payload)
}

// NotifyTx sends the notification only if tx commits; a rollback sends
// nothing. On PostgreSQL, notifications of one transaction with the same
// channel and payload are delivered once (NOTIFY folds them); SQLite
// delivers each: give each a distinct payload when their count matters.
func (s *Store) NotifyTx(ctx context.Context, tx Tx, channel string, payload []byte) error {
	return s.notify(ctx, tx.via(ctx), channel, payload)
}

func (s *Store) notify(ctx context.Context, v via, channel string, payload []byte) error {
	return run0(newHandle(s, channel), "notify", v, func(o target) error {
		// NOTIFY's limit on both engines, so that code written on one runs
		// on the other.
		if _, err := notifyMessage(channel, payload); err != nil {
			return err
		}
		if err := o.notify(ctx, channel, payload, s.now()); err != nil {
			return err
		}
		o.afterCommit(s.wake(channelTopic(channel)))
		return nil
	})
}

// Listen starts receiving channel's notifications from now on (no history
// is replayed). Close the listener when done; closing the store closes it.
func (s *Store) Listen(ctx context.Context, channel string) (*Listener, error) {
	return run(newHandle(s, channel), "listen", autoRead, func(o target) (*Listener, error) {
		key := new(int)
		l, err := s.eng.listen(ctx, s, channel, func() { s.bg.remove(key) })
		if err != nil {
			return nil, err
		}
		if !s.bg.add(key, l.Close) {
			_ = l.Close()
			return nil, ErrClosed
		}
		return l, nil
	})
}

// notifyMessage is the notification as Postgres's NOTIFY carries it, or
// ErrPayloadTooLarge when it does not fit NOTIFY's limit.
func notifyMessage(channel string, payload []byte) (string, error) {
	msg := wake.EncodeNotification(channel, payload)
	if len(msg) > wake.MaxPayload {
		return "", fmt.Errorf("%w: %d bytes with its envelope, Postgres allows %d", ErrPayloadTooLarge, len(msg), wake.MaxPayload)
	}
	return msg, nil
}
