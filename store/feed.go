package store

import (
	"context"
	"sync"

	"github.com/alkstore/alkstore/internal/wake"
)

// Wake topics: every durable write wakes its mechanism's topic once it
// commits, in process at once and across processes through the feed.
func streamTopic(name string) string  { return "s:" + name }
func queueTopic(name string) string   { return "q:" + name }
func channelTopic(name string) string { return "n:" + name }

// offsetTopic is what a consumer's offset reset wakes: no loop waits on it,
// but Store.Changes (AnyTopic) hears of it from other processes too.
func offsetTopic(stream string) string { return "o:" + stream }

// claimTopic is woken when a running job of the queue loses its claim on
// purpose (Queue.Cancel): workers check their handlers' claims.
func claimTopic(queue string) string { return "c:" + queue }

// Changes returns a channel that receives a signal soon after any write of
// this store, or (through the wake feed) of another process, commits: a
// job enqueued or settled, an event published, a schedule or queue changed,
// a consumer's offset reset. A consumer's SaveOffset (its progress) and a
// Notify are not changes of the store's state and signal only on SQLite,
// where any write to the database file does. Signals coalesce (the channel holds one) and carry no data: read what
// you show again. Wakes are best-effort across processes, so a reader
// should also refresh now and then. The channel is closed when ctx is done
// or the store closes. A console pushes its live updates from it.
func (s *Store) Changes(ctx context.Context) (<-chan struct{}, error) {
	if err := s.check(); err != nil {
		return nil, opErr("changes", "", err)
	}
	sub := s.subscribe(wake.AnyTopic)
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Done():
				return
			case <-sub.C():
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

// feed is the store's cross-process wake feed, started on first use: the
// Postgres forwarder (one LISTEN connection) or the SQLite watcher.
type feed struct {
	once  sync.Once
	stop  func()
	ready <-chan struct{}
}

// subscribe attaches to topic's wakes, starting the feed if needed.
func (s *Store) subscribe(topic string) *wake.Sub {
	s.startFeed()
	return s.hub.Subscribe(topic)
}

func (s *Store) startFeed() {
	s.feed.once.Do(func() {
		s.feed.stop, s.feed.ready = s.eng.startFeed(s.hub, s.log)
	})
}

// feedReady waits until the feed delivers every later notification.
func (s *Store) feedReady(ctx context.Context) error {
	s.startFeed()
	select {
	case <-s.feed.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.life.closing: // a shutdown need not wait for a feed that may never connect
		return ErrClosed
	}
}

// wake is the afterCommit action for a write to topic: in-process waiters
// wake at once. Other processes hear of it through the engine: on
// PostgreSQL the write's NOTIFY, or a trailing one after its commit (see
// wakeGate); on SQLite their watchers see every commit.
func (s *Store) wake(topic string) func() {
	return func() { s.hub.Wake(topic) }
}

// background tracks receivers and listeners so Close can end them.
type background struct {
	mu      sync.Mutex
	closers map[any]func() error
	closed  bool
}

// add tracks a receiver or listener; false when the store already closed
// them all (the caller must close it and report ErrClosed).
func (b *background) add(key any, closeFn func() error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.closers == nil {
		b.closers = map[any]func() error{}
	}
	b.closers[key] = closeFn
	return true
}

func (b *background) remove(key any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.closers, key)
}

// closeAll ends everything still tracked and waits for each.
func (b *background) closeAll() {
	b.mu.Lock()
	fns := make([]func() error, 0, len(b.closers))
	for _, fn := range b.closers {
		fns = append(fns, fn)
	}
	b.closers, b.closed = nil, true
	b.mu.Unlock()
	for _, fn := range fns {
		_ = fn()
	}
}
