package wake

import (
	"sync"
	"sync/atomic"
	"time"
)

// gateWindows holds the wake-gate windows tests set for their own topics;
// nil (the usual case) costs a write one atomic load.
var (
	gateWindowsMu sync.Mutex
	gateWindows   atomic.Pointer[map[string]time.Duration]
)

// SetGateWindow makes the Postgres wake gate use window d for topic (a
// wake topic such as "s:orders") in every store of this process, until the
// returned func restores the default. For tests only: a long window makes
// a test's writes to its own topic fall inside one window however slowly
// the machine runs them, so the gate's decisions are forced, not timed.
func SetGateWindow(topic string, d time.Duration) (restore func()) {
	gateWindowsMu.Lock()
	defer gateWindowsMu.Unlock()
	next := map[string]time.Duration{topic: d}
	if m := gateWindows.Load(); m != nil {
		for k, v := range *m {
			if k != topic {
				next[k] = v
			}
		}
	}
	gateWindows.Store(&next)
	return func() {
		gateWindowsMu.Lock()
		defer gateWindowsMu.Unlock()
		m := gateWindows.Load()
		if m == nil {
			return
		}
		rest := map[string]time.Duration{}
		for k, v := range *m {
			if k != topic {
				rest[k] = v
			}
		}
		if len(rest) == 0 {
			gateWindows.Store(nil)
		} else {
			gateWindows.Store(&rest)
		}
	}
}

// GateWindow is the window a test set for topic, if any.
func GateWindow(topic string) (time.Duration, bool) {
	m := gateWindows.Load()
	if m == nil {
		return 0, false
	}
	d, ok := (*m)[topic]
	return d, ok
}

// trailingHooks holds the functions tests run in the wake gate's trailing
// wake for their own topics; nil (the usual case) costs one atomic load.
var (
	trailingHooksMu sync.Mutex
	trailingHooks   atomic.Pointer[map[string]func()]
)

// SetTrailingHook makes the Postgres wake gate call fn when a trailing wake
// for topic fires (its timer ran out), before it decides whether to send
// it, until the returned func removes it. For tests only: fn may block to
// hold a fired trailing wake at that point while the test closes the store,
// which forces the interleaving a closing store must survive.
func SetTrailingHook(topic string, fn func()) (remove func()) {
	set := func(fn func()) {
		trailingHooksMu.Lock()
		defer trailingHooksMu.Unlock()
		next := map[string]func(){}
		if m := trailingHooks.Load(); m != nil {
			for k, v := range *m {
				if k != topic {
					next[k] = v
				}
			}
		}
		if fn != nil {
			next[topic] = fn
		}
		if len(next) == 0 {
			trailingHooks.Store(nil)
		} else {
			trailingHooks.Store(&next)
		}
	}
	set(fn)
	return func() { set(nil) }
}

// TrailingHook is the function a test set for topic's trailing wakes, if any.
func TrailingHook(topic string) func() {
	m := trailingHooks.Load()
	if m == nil {
		return nil
	}
	return (*m)[topic]
}

// heldCounters holds the counters tests set for their own topics' held
// readers; nil (the usual case) costs one atomic load.
var (
	heldCountersMu sync.Mutex
	heldCounters   atomic.Pointer[map[string]*HeldCounts]
)

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
	set := func(c *HeldCounts) {
		heldCountersMu.Lock()
		defer heldCountersMu.Unlock()
		next := map[string]*HeldCounts{}
		if m := heldCounters.Load(); m != nil {
			for k, v := range *m {
				if k != topic {
					next[k] = v
				}
			}
		}
		if c != nil {
			next[topic] = c
		}
		if len(next) == 0 {
			heldCounters.Store(nil)
		} else {
			heldCounters.Store(&next)
		}
	}
	set(n)
	return n, func() { set(nil) }
}

func heldCounts(topic string) *HeldCounts {
	if m := heldCounters.Load(); m != nil {
		return (*m)[topic]
	}
	return nil
}

// HeldWaits records that a held reader of topic begins a wait.
func HeldWaits(topic string) {
	if n := heldCounts(topic); n != nil {
		n.Waits.Add(1)
	}
}

// HeldReleased records that a transaction's end cut short the wait of a
// held reader of topic.
func HeldReleased(topic string) {
	if n := heldCounts(topic); n != nil {
		n.Releases.Add(1)
	}
}
