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

// StartWatcher polls version until Close: every fastest while the file
// changes, backing off to every slowest once it has been quiet for a while
// (each poll takes file locks, so an idle store should not pay a thousand a
// second).
func StartWatcher(hub *Hub, version func(ctx context.Context) (int64, error), fastest, slowest time.Duration) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cancel: cancel, done: make(chan struct{})}
	// The baseline is read before StartWatcher returns: a subscriber attaches
	// to the hub first and reads second, so any commit after its attach must
	// count as a change. A baseline read later, in the goroutine, could
	// swallow commits the subscriber's first read already missed.
	last, err := version(ctx)
	go func() {
		defer close(w.done)
		interval, lastChange := fastest, time.Now()
		t := time.NewTimer(interval)
		defer t.Stop()
		for err == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var v int64
			if v, err = version(ctx); err == nil && v != last {
				last, lastChange, interval = v, time.Now(), fastest
				hub.WakeAll()
			} else if time.Since(lastChange) > quietAfter {
				interval = min(interval*2, slowest)
			}
			t.Reset(interval)
		}
		if ctx.Err() == nil {
			hub.Close(fmt.Errorf("alkstore: the SQLite change watcher stopped: %w", err))
		}
	}()
	return w
}

// quietAfter is how long without a change before the watcher slows down.
const quietAfter = 100 * time.Millisecond

// Close stops the watcher.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}
