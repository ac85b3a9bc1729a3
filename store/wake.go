package store

import "sync"

// wakeHub wakes in-process waiters (queue workers, later stream receivers)
// as soon as a local write commits. A wake carries no data: the durable rows
// are the truth, and a woken waiter re-reads them. Cross-process wakes plug
// in beside it (see the receiver package).
type wakeHub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// subscribe returns a channel that receives a (coalesced) signal after
// every wake of topic, and a function that unsubscribes.
func (h *wakeHub) subscribe(topic string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[string]map[chan struct{}]struct{}{}
	}
	if h.subs[topic] == nil {
		h.subs[topic] = map[chan struct{}]struct{}{}
	}
	h.subs[topic][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs[topic], ch)
		if len(h.subs[topic]) == 0 {
			delete(h.subs, topic)
		}
		h.mu.Unlock()
	}
}

// wake signals every subscriber of topic without blocking.
func (h *wakeHub) wake(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[topic] {
		select {
		case ch <- struct{}{}:
		default: // a signal is already pending; one is enough
		}
	}
}

func queueTopic(queue string) string { return "queue:" + queue }
