package wake

import (
	"context"
	"fmt"
	"time"
)

// Watcher notices commits by other processes to a SQLite file: it polls the
// file's data version on a connection of its own (cheap: no table is read)
// and wakes every subscriber when it changes. If polling fails the watcher
// dies and closes the hub, which ends every receiver: they cannot know what
// they miss any more.
type Watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Polling is how often a Watcher polls.
type Polling struct {
	// Fastest is the interval while the file changes; it doubles up to
	// Slowest once the file has been quiet for QuietAfter (each poll takes
	// file locks and wakes the process, so an idle store should not pay a
	// thousand a second).
	Fastest, Slowest, QuietAfter time.Duration
	// Nudge, when not nil, signals that the file may be changing (a write
	// to its WAL, seen by inotify): the watcher polls at once and then
	// backs off from Fastest, doubling at once when QuietAfter is zero (at
	// 1 ms: 2, 6, 14 ms after the nudge). With it, Slowest is only the
	// safety net for a write the nudges missed.
	Nudge <-chan struct{}
}

// StartWatcher polls version until Close, as p says.
func StartWatcher(hub *Hub, version func(ctx context.Context) (int64, error), p Polling) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cancel: cancel, done: make(chan struct{})}
	// The baseline is read before StartWatcher returns: a subscriber attaches
	// to the hub first and reads second, so any commit after its attach must
	// count as a change. A baseline read later, in the goroutine, could
	// swallow commits the subscriber's first read already missed.
	last, err := version(ctx)
	go func() {
		defer close(w.done)
		interval, lastChange := p.Fastest, time.Now()
		t := time.NewTimer(interval)
		defer t.Stop()
		for err == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-p.Nudge:
				// The write that nudged may not have committed yet (its WAL
				// frames come before the commit's index update): poll now and
				// soon again.
				if !t.Stop() {
					select {
					case <-t.C:
					default:
					}
				}
				interval, lastChange = p.Fastest, time.Now()
			}
			var v int64
			if v, err = version(ctx); err == nil && v != last {
				last, lastChange, interval = v, time.Now(), p.Fastest
				hub.WakeAll()
			} else if time.Since(lastChange) >= p.QuietAfter {
				interval = min(interval*2, p.Slowest)
			}
			t.Reset(interval)
		}
		if ctx.Err() == nil {
			hub.Close(fmt.Errorf("alkstore: the SQLite change watcher stopped: %w", err))
		}
	}()
	return w
}

// Close stops the watcher.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}
