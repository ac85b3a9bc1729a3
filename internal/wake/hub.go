// Package wake is the store's wake machinery, out of its users' sight: a
// Hub fans wakes and notification messages out to in-process subscribers,
// and the Postgres Forwarder and the SQLite Watcher feed it from other
// processes. The store's EventReceiver and Listener read from it.
package wake

import (
	"sync"
	"sync/atomic"
)

// Hub fans wakes out to subscribers by topic. A wake carries no data (the
// durable rows are the truth); a subscriber's channel holds at most one
// pending wake, so wakes coalesce. Messages (notification payloads) are
// delivered one by one to bounded per-subscriber buffers, which drop their
// oldest message when a new one finds them full.
type Hub struct {
	mu     sync.Mutex
	wakes  map[string]map[*Sub]struct{}
	msgs   map[string]map[*MsgSub]struct{}
	closed bool
	cause  error // why the hub closed; nil for a plain Close
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

// Err is why the hub closed once Done is: a feed's error, or nil when the
// store closed it.
func (s *Sub) Err() error { return s.hub.closeCause() }

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
	dropped atomic.Int64
}

// C receives the channel's messages, in the order they arrived.
func (s *MsgSub) C() <-chan []byte { return s.c }

// Dropped counts the messages discarded because the buffer was full.
func (s *MsgSub) Dropped() int64 { return s.dropped.Load() }

// Done is closed when the hub closes: no more messages will come.
func (s *MsgSub) Done() <-chan struct{} { return s.done }

// Err is why the hub closed once Done is (see Sub.Err).
func (s *MsgSub) Err() error { return s.hub.closeCause() }

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
// buf; when the subscriber falls that far behind, each new message drops the
// oldest buffered one (notifications are ephemeral), and Dropped counts them.
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

// AnyTopic is the topic whose subscribers every wake signals, whatever
// its topic (a console watching the whole store).
const AnyTopic = "*"

// Wake signals every subscriber of topic, and of AnyTopic, without
// blocking.
func (h *Hub) Wake(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.wakes[topic] {
		signal(s.c)
	}
	for s := range h.wakes[AnyTopic] {
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

// Deliver hands a message to every subscriber of channel without blocking;
// a full buffer drops its oldest message to make room.
func (h *Hub) Deliver(channel string, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.msgs[channel] {
		PushDropOldest(s.c, payload, &s.dropped)
	}
}

// PushDropOldest puts v into c without blocking: when c is full it first
// takes out the oldest value and counts it in dropped. The caller must be
// c's only sender, so the room made stays free for v.
func PushDropOldest[T any](c chan T, v T, dropped *atomic.Int64) {
	for {
		select {
		case c <- v:
			return
		default:
		}
		select {
		case <-c:
			dropped.Add(1)
		default: // a receiver made room meanwhile
		}
	}
}

// HasMessageSubscribers reports whether anyone listens on channel.
func (h *Hub) HasMessageSubscribers(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs[channel]) > 0
}

// Close ends every subscription; cause (may be nil) is what their Err
// reports. Closing twice keeps the first cause.
func (h *Hub) Close(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed, h.cause = true, cause
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

func (h *Hub) closeCause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
