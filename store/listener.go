package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/internal/wake"
)

// Notification is one message received on a channel.
type Notification struct {
	Channel string
	Payload []byte // as sent: nil stays nil, empty stays empty (non-nil)
}

// Listener receives a channel's notifications from the moment it was
// created. Notifications are ephemeral: a listener buffers up to
// ListenBuffer of them for Recv, and once that many wait, each new one
// drops the oldest waiting (Dropped counts them), on both engines.
type Listener struct {
	channel string
	c       <-chan []byte
	dropped func() int64
	done    <-chan struct{} // the feed ended
	cause   func() error    // why it ended
	stop    func()
	closed  chan struct{} // Close was called
	once    sync.Once
	onClose func()
}

// ListenBuffer is how many notifications a Listener holds for Recv before
// each new one drops the oldest. Dropping the oldest keeps a listener that
// falls behind current: it catches up with the latest notifications, which
// describe the present, instead of working through stale ones and losing
// everything sent meanwhile.
const ListenBuffer = 256

// newPushListener listens through a hub message subscription (Postgres: the
// forwarder delivers each NOTIFY).
// onClose (may be nil) runs once, when Close is called.
func newPushListener(channel string, sub *wake.MsgSub, onClose func()) *Listener {
	return &Listener{channel: channel, c: sub.C(), dropped: sub.Dropped, done: sub.Done(), cause: sub.Err, stop: sub.Close,
		closed: make(chan struct{}), onClose: onClose}
}

// newPollListener reads src after every wake (SQLite: the notifications
// table) into a buffer of buf that drops its oldest when full, like the
// push listener's. wakes must already be subscribed; the listener owns it.
func newPollListener(ctx context.Context, channel string, src liteMessages, wakes *wake.Sub, buf int, onClose func()) (*Listener, error) {
	last, err := src.Latest(ctx)
	if err != nil {
		wakes.Close()
		return nil, err
	}
	out := make(chan []byte, max(buf, 1))
	dropped := new(atomic.Int64)
	stop, ended := make(chan struct{}), make(chan struct{})
	// done is the wake feed's end, not the reader's: Recv must see the store
	// closing at once, not only after the reader noticed.
	l := &Listener{channel: channel, c: out, dropped: dropped.Load, done: wakes.Done(), cause: wakes.Err,
		closed: make(chan struct{}), onClose: onClose}
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
			for {
				ids, payloads, err := src.Since(rctx, last)
				if err != nil {
					break // the rows are still there; the next wake retries
				}
				for i := range ids {
					wake.PushDropOldest(out, payloads[i], dropped)
					last = ids[i]
				}
				if len(ids) < notificationPage || isClosed(stop) {
					break
				}
			}
		}
	}()
	return l, nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
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

// Dropped is the number of notifications this listener discarded, oldest
// first, because ListenBuffer of them were already waiting for Recv.
func (l *Listener) Dropped() int64 { return l.dropped() }

// Close stops listening. Recv then returns ErrClosed. It always returns
// nil: the error result only makes a Listener an io.Closer.
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
