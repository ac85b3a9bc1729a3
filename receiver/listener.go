package receiver

import (
	"context"
	"sync"
	"time"
)

// Notification is one message received on a channel.
type Notification struct {
	Channel string
	Payload []byte // as sent: nil stays nil, empty stays empty (non-nil)
}

// MessageSource is where a polling listener reads notifications (SQLite's
// notifications table), as the store provides it.
type MessageSource interface {
	// Latest is the id of the newest stored notification (0 for none): a
	// listener starts after it, so history is never replayed.
	Latest(ctx context.Context) (int64, error)
	// Since returns the channel's notifications with an id above after.
	Since(ctx context.Context, after int64) (ids []int64, payloads [][]byte, err error)
}

// Listener receives a channel's notifications from the moment it was
// created. Notifications are ephemeral: a listener that falls far behind
// loses the oldest it has not read.
type Listener struct {
	channel string
	c       <-chan []byte
	done    <-chan struct{} // the feed ended
	cause   func() error    // why it ended
	stop    func()
	closed  chan struct{} // Close was called
	once    sync.Once
	onClose func()
}

// NewPushListener listens through a hub message subscription (Postgres: the
// forwarder delivers each NOTIFY).
// onClose (may be nil) runs once, when Close is called.
func NewPushListener(channel string, sub *MsgSub, onClose func()) *Listener {
	return &Listener{channel: channel, c: sub.c, done: sub.done, cause: sub.hub.closeErr, stop: sub.Close,
		closed: make(chan struct{}), onClose: onClose}
}

// NewPollListener reads src after every wake (SQLite: the notifications
// table). wakes must already be subscribed; the listener owns it.
func NewPollListener(ctx context.Context, channel string, src MessageSource, wakes *Sub, buf int, onClose func()) (*Listener, error) {
	last, err := src.Latest(ctx)
	if err != nil {
		wakes.Close()
		return nil, err
	}
	out := make(chan []byte, max(buf, 1))
	stop, ended := make(chan struct{}), make(chan struct{})
	l := &Listener{channel: channel, c: out, done: ended, cause: wakes.Err, closed: make(chan struct{}), onClose: onClose}
	l.stop = func() { close(stop); <-ended }
	go func() {
		defer close(ended)
		defer wakes.Close()
		rctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for {
			select {
			case <-wakes.C():
			case <-time.After(time.Second): // a listener never trusts wakes alone
			case <-wakes.Done():
				return
			case <-stop:
				return
			}
			ids, payloads, err := src.Since(rctx, last)
			if err != nil {
				continue // the rows are still there; the next wake retries
			}
			for i := range ids {
				select {
				case out <- payloads[i]:
				case <-stop:
					return
				}
				last = ids[i]
			}
		}
	}()
	return l, nil
}

// Recv waits for the next notification. After Close (or the store closing)
// it returns an error matching ErrClosed.
func (l *Listener) Recv(ctx context.Context) (Notification, error) {
	select {
	case p := <-l.c:
		return Notification{Channel: l.channel, Payload: p}, nil
	default:
	}
	select {
	case p := <-l.c:
		return Notification{Channel: l.channel, Payload: p}, nil
	case <-l.closed:
		return Notification{}, ErrClosed
	case <-l.done:
		if err := l.cause(); err != nil {
			return Notification{}, err
		}
		return Notification{}, ErrClosed
	case <-ctx.Done():
		return Notification{}, ctx.Err()
	}
}

// Close stops listening. Recv then returns ErrClosed.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.stop()
		if l.onClose != nil {
			l.onClose()
		}
	})
	return nil
}
