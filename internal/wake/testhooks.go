package wake

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// topicHooks is a per-topic table tests fill for their own topics. It is
// copied on write, so a lookup with nothing set (the usual case, every
// production write) costs one atomic load.
type topicHooks[V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]V]
}

// set puts v for topic, or removes topic when remove is true.
func (h *topicHooks[V]) set(topic string, v V, remove bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := map[string]V{}
	if m := h.m.Load(); m != nil {
		for k, old := range *m {
			if k != topic {
				next[k] = old
			}
		}
	}
	if !remove {
		next[topic] = v
	}
	if len(next) == 0 {
		h.m.Store(nil)
	} else {
		h.m.Store(&next)
	}
}

// get is what a test set for topic, if anything.
func (h *topicHooks[V]) get(topic string) (v V, ok bool) {
	if m := h.m.Load(); m != nil {
		v, ok = (*m)[topic]
	}
	return v, ok
}

// install sets v for topic until the returned func removes it.
func (h *topicHooks[V]) install(topic string, v V) (remove func()) {
	h.set(topic, v, false)
	return func() {
		var zero V
		h.set(topic, zero, true)
	}
}

var (
	gateWindows   topicHooks[time.Duration]
	trailingHooks topicHooks[func()]
	sendHooks     topicHooks[func()]
	heldCounters  topicHooks[*HeldCounts]
	gateCounters  topicHooks[*GateCounts] // by topic prefix
)

// SetGateWindow makes the Postgres wake gate use window d for topic (a
// wake topic such as "s:orders") in every store of this process, until the
// returned func restores the default. For tests only: a long window makes
// a test's writes to its own topic fall inside one window however slowly
// the machine runs them, so the gate's decisions are forced, not timed.
func SetGateWindow(topic string, d time.Duration) (restore func()) {
	return gateWindows.install(topic, d)
}

// GateWindow is the window a test set for topic, if any.
func GateWindow(topic string) (time.Duration, bool) { return gateWindows.get(topic) }

// SetTrailingHook makes the Postgres wake gate call fn when a trailing wake
// for topic fires (its timer ran out), before it decides whether to send
// it, until the returned func removes it. For tests only: fn may block to
// hold a fired trailing wake at that point while the test closes the store,
// which forces the interleaving a closing store must survive.
func SetTrailingHook(topic string, fn func()) (remove func()) {
	return trailingHooks.install(topic, fn)
}

// TrailingHook is the function a test set for topic's trailing wakes, if any.
func TrailingHook(topic string) func() {
	fn, _ := trailingHooks.get(topic)
	return fn
}

// HeldCounts counts, for one topic, what readers held back by the settled
// horizon did (store/held.go).
type HeldCounts struct {
	// Waits: waits that followed a held read (on the recheck backoff).
	Waits atomic.Int64
	// Releases: those waits the end of a transaction of the reader's
	// store cut short, so a re-read followed.
	Releases atomic.Int64
}

// CountHeld counts, until stop, what readers of topic (a stream's wake
// topic, "s:name") held back by the settled horizon do. For tests only: it
// shows which transaction ends wake held readers, by count, not by time.
func CountHeld(topic string) (counts *HeldCounts, stop func()) {
	n := &HeldCounts{}
	return n, heldCounters.install(topic, n)
}

// HeldWaits records that a held reader of topic begins a wait.
func HeldWaits(topic string) {
	if n, ok := heldCounters.get(topic); ok {
		n.Waits.Add(1)
	}
}

// HeldReleased records that a transaction's end cut short the wait of a
// held reader of topic.
func HeldReleased(topic string) {
	if n, ok := heldCounters.get(topic); ok {
		n.Releases.Add(1)
	}
}

// SetSendHook makes the Postgres wake gate call fn once a trailing wake for
// topic has been claimed to send, just before its NOTIFY goes out, until the
// returned func removes it. For tests only: fn may block to hold a send in
// progress while the test closes the store, which must wait for it (the
// trailing hook, SetTrailingHook, runs before the claim: a Close then sends
// the wake itself).
func SetSendHook(topic string, fn func()) (remove func()) {
	return sendHooks.install(topic, fn)
}

// SendHook is the function a test set for topic's trailing sends, if any.
func SendHook(topic string) func() {
	fn, _ := sendHooks.get(topic)
	return fn
}

// GateCounts counts what the Postgres wake gates of this process did with
// the entries of their per-topic tables for topics with one prefix.
type GateCounts struct {
	Added  atomic.Int64 // entries added (a write to a topic with none)
	Kept   atomic.Int64 // entries a sweep looked at and kept (window open or trailing wake owed)
	Pruned atomic.Int64 // entries a sweep removed
	// Covered: trailing wakes cancelled because a later write's NOTIFY,
	// committed, announced every write that owed them.
	Covered atomic.Int64
	// Postponed: trailing wakes moved to a window after the NOTIFY of a
	// later write that committed while writes after it began still owed
	// them.
	Postponed atomic.Int64
}

// CountGateTopics counts, until stop, what the wake gates do with the
// entries of topics that begin with prefix (e.g. "q:prune-"). For tests
// only: it shows the table shrinks back, by count, not by time.
func CountGateTopics(prefix string) (counts *GateCounts, stop func()) {
	n := &GateCounts{}
	return n, gateCounters.install(prefix, n)
}

// gateCounts calls fn with the counters whose prefix topic has.
func gateCounts(topic string, fn func(*GateCounts)) {
	if m := gateCounters.m.Load(); m != nil {
		for prefix, n := range *m {
			if strings.HasPrefix(topic, prefix) {
				fn(n)
			}
		}
	}
}

// GateAdded records that a gate added an entry for topic.
func GateAdded(topic string) { gateCounts(topic, func(n *GateCounts) { n.Added.Add(1) }) }

// GateSwept records that a gate's sweep looked at topic's entry and pruned
// it or kept it.
func GateSwept(topic string, pruned bool) {
	gateCounts(topic, func(n *GateCounts) {
		if pruned {
			n.Pruned.Add(1)
		} else {
			n.Kept.Add(1)
		}
	})
}

// TrailingCovered records that a gate cancelled topic's trailing wake: a
// write that carried a NOTIFY committed after every write that owed it.
func TrailingCovered(topic string) { gateCounts(topic, func(n *GateCounts) { n.Covered.Add(1) }) }

// TrailingPostponed records that a gate moved topic's trailing wake to a
// window after a committed write's NOTIFY went out (wakeGate.covered).
func TrailingPostponed(topic string) { gateCounts(topic, func(n *GateCounts) { n.Postponed.Add(1) }) }
