package store

import (
	"context"
	"sync"
	"time"

	"github.com/alkstore/alkstore/internal/wake"
)

// Notification is one message received on a channel.
type Notification struct {
	Channel string
	Payload []byte // as sent: nil stays nil, empty stays empty (non-nil)
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

// newPushListener listens through a hub message subscription (Postgres: the
// forwarder delivers each NOTIFY).
// onClose (may be nil) runs once, when Close is called.
func newPushListener(channel string, sub *wake.MsgSub, onClose func()) *Listener {
	return &Listener{channel: channel, c: sub.C(), done: sub.Done(), cause: sub.Err, stop: sub.Close,
		closed: make(chan struct{}), onClose: onClose}
}

// newPollListener reads src after every wake (SQLite: the notifications
// table). wakes must already be subscribed; the listener owns it.
func newPollListener(ctx context.Context, channel string, src liteMessages, wakes *wake.Sub, buf int, onClose func()) (*Listener, error) {
	last, err := src.Latest(ctx)
	if err != nil {
		wakes.Close()
		return nil, err
	}
	out := make(chan []byte, max(buf, 1))
	stop, ended := make(chan struct{}), make(chan struct{})
	// done is the wake feed's end, not the reader's: Recv must see the store
	// closing at once, not only after the reader noticed.
	l := &Listener{channel: channel, c: out, done: wakes.Done(), cause: wakes.Err, closed: make(chan struct{}), onClose: onClose}
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
// it returns an error matching ErrClosed, even while notifications are still
// buffered.
func (l *Listener) Recv(ctx context.Context) (Notification, error) {
	if err := l.ended(); err != nil {
		return Notification{}, err
	}
	select {
	case p := <-l.c:
		if err := l.ended(); err != nil { // a close that raced with this receive wins
			return Notification{}, err
		}
		return Notification{Channel: l.channel, Payload: p}, nil
	case <-l.closed:
	case <-l.done:
	case <-ctx.Done():
		return Notification{}, ctx.Err()
	}
	return Notification{}, l.ended()
}

// ended is why the listener has closed (Close first, then the feed's end),
// or nil while it is open.
func (l *Listener) ended() error {
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	select {
	case <-l.done:
		return closedBy(l.cause())
	default:
	}
	return nil
}

// Buffered is the number of notifications received and waiting for Recv.
func (l *Listener) Buffered() int { return len(l.c) }

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
