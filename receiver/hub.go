// Package receiver turns wake signals into push delivery: a Hub fans wakes
// and notification messages out to in-process subscribers, the Postgres
// Forwarder and the SQLite Watcher feed it from other processes, and
// EventReceiver and Listener are what callers read from. It depends on
// small interfaces (Source, MessageSource) rather than on the store.
package receiver

import (
	"errors"
	"sync"
)

// ErrClosed is returned once a receiver, listener or feed has closed. The
// store's ErrClosed is this same value.
var ErrClosed = errors.New("store closed")

// Hub fans wakes out to subscribers by topic. A wake carries no data (the
// durable rows are the truth); a subscriber's channel holds at most one
// pending wake, so wakes coalesce. Messages (notification payloads) are
// delivered one by one to bounded per-subscriber buffers.
type Hub struct {
	mu     sync.Mutex
	wakes  map[string]map[*Sub]struct{}
	msgs   map[string]map[*MsgSub]struct{}
	closed bool
	err    error // why the hub closed
}

// Sub is a wake subscription.
type Sub struct {
	hub   *Hub
	topic string
	c     chan struct{}
	done  chan struct{}
}

// C receives a signal after one or more wakes of the topic (or of all topics,
// for a reconnect wake).
func (s *Sub) C() <-chan struct{} { return s.c }

// Done is closed when the hub closes: no more wakes will come.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Err says why the hub closed: ErrClosed, possibly wrapping a feed's error.
func (s *Sub) Err() error { return s.hub.closeErr() }

// Close unsubscribes.
func (s *Sub) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	delete(s.hub.wakes[s.topic], s)
}

// MsgSub is a message subscription (a notification listener's feed).
type MsgSub struct {
	hub     *Hub
	channel string
	c       chan []byte
	done    chan struct{}
	dropped int
}

// Close unsubscribes.
func (s *MsgSub) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	delete(s.hub.msgs[s.channel], s)
}

// Subscribe attaches to a topic's wakes.
func (h *Hub) Subscribe(topic string) *Sub {
	s := &Sub{hub: h, topic: topic, c: make(chan struct{}, 1), done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.done)
		return s
	}
	if h.wakes == nil {
		h.wakes = map[string]map[*Sub]struct{}{}
	}
	if h.wakes[topic] == nil {
		h.wakes[topic] = map[*Sub]struct{}{}
	}
	h.wakes[topic][s] = struct{}{}
	return s
}

// SubscribeMessages attaches to a channel's messages with a buffer of size
// buf; when the subscriber falls that far behind, newer messages are dropped
// (notifications are ephemeral) and counted.
func (h *Hub) SubscribeMessages(channel string, buf int) *MsgSub {
	s := &MsgSub{hub: h, channel: channel, c: make(chan []byte, max(buf, 1)), done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.done)
		return s
	}
	if h.msgs == nil {
		h.msgs = map[string]map[*MsgSub]struct{}{}
	}
	if h.msgs[channel] == nil {
		h.msgs[channel] = map[*MsgSub]struct{}{}
	}
	h.msgs[channel][s] = struct{}{}
	return s
}

// Wake signals every subscriber of topic without blocking.
func (h *Hub) Wake(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.wakes[topic] {
		signal(s.c)
	}
}

// WakeAll signals every subscriber of every topic: a feed reconnected or
// another process wrote, and anything may have changed.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.wakes {
		for s := range subs {
			signal(s.c)
		}
	}
}

// Deliver hands a message to every subscriber of channel without blocking.
func (h *Hub) Deliver(channel string, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.msgs[channel] {
		select {
		case s.c <- payload:
		default:
			s.dropped++
		}
	}
}

// HasMessageSubscribers reports whether anyone listens on channel.
func (h *Hub) HasMessageSubscribers(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs[channel]) > 0
}

// Close ends every subscription; cause (may be nil) is reported through
// Err wrapped in ErrClosed. Closing twice keeps the first cause.
func (h *Hub) Close(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	h.err = ErrClosed
	if cause != nil {
		h.err = errors.Join(ErrClosed, cause)
	}
	for _, subs := range h.wakes {
		for s := range subs {
			close(s.done)
		}
	}
	for _, subs := range h.msgs {
		for s := range subs {
			close(s.done)
		}
	}
	h.wakes, h.msgs = nil, nil
}

func (h *Hub) closeErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
