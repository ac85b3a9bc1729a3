package store

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/internal/wake"
)

// Wakes and notifications on PostgreSQL.

// wakeWindow is how often, at most, writes to one topic send their own
// NOTIFY. Postgres serializes the commits of notifying transactions, so a
// NOTIFY per write would throttle concurrent writers; the first write in a
// window notifies inside its statement (commit-atomic), later ones carry none
// and a trailing wake follows their commit when the window closes. Other
// processes therefore hear of a busy topic's writes at most this late. The
// store never sees an adopted transaction commit, so writes in one bypass
// the gate and always notify (pgOps.wake).
const wakeWindow = 5 * time.Millisecond

// wakeGate decides which writes carry a NOTIFY and sends trailing wakes.
type wakeGate struct {
	send   func(topic string) // an auto-commit NOTIFY
	mu     sync.Mutex
	topics map[string]*gateState
}

type gateState struct {
	last     time.Time // when a wake for the topic last went out
	skipped  bool      // a write since then carried none
	trailing bool      // a trailing wake is scheduled
	timer    *time.Timer
}

// wake returns the NOTIFY payload a write to topic should carry: the wake,
// or "" when one went out within the window.
func (g *wakeGate) wake(topic string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.topics == nil {
		g.topics = map[string]*gateState{}
	}
	st := g.topics[topic]
	if st == nil {
		st = &gateState{}
		g.topics[topic] = st
	}
	now := time.Now()
	if now.Sub(st.last) >= wakeWindow {
		st.last = now
		return wake.EncodeWake(topic)
	}
	st.skipped = true
	return ""
}

// committed runs after a write to topic committed: if writes went without a
// wake, one follows when the window closes (after this commit, so whoever
// wakes sees the rows).
func (g *wakeGate) committed(topic string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.topics[topic]
	if st == nil || !st.skipped || st.trailing {
		return
	}
	st.trailing = true
	st.timer = time.AfterFunc(max(wakeWindow-time.Since(st.last), 0), func() { g.fire(topic, st) })
}

// fire sends a scheduled trailing wake, unless flush already did.
func (g *wakeGate) fire(topic string, st *gateState) {
	g.mu.Lock()
	if !st.trailing {
		g.mu.Unlock()
		return
	}
	st.trailing, st.skipped, st.last = false, false, time.Now()
	g.mu.Unlock()
	g.send(topic)
}

// flush sends every scheduled trailing wake now: the store is closing, and
// committed writes must not go unannounced.
func (g *wakeGate) flush() {
	g.mu.Lock()
	var due []string
	for topic, st := range g.topics {
		if st.trailing && st.timer.Stop() {
			st.trailing = false
			due = append(due, topic)
		}
	}
	g.mu.Unlock()
	for _, topic := range due {
		g.send(topic)
	}
}

func (e *pgEngine) committed(topic string) { e.gate.committed(topic) }

// startFeed runs the forwarder on a connection taken out of the pool for
// good (hijacked), so it never counts against the pool's work.
func (e *pgEngine) startFeed(hub *wake.Hub, log *slog.Logger) (func(), <-chan struct{}) {
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conn := c.Hijack()
		e.own.remove(conn) // no longer the pool's: it closes without BeforeClose
		return conn, nil
	}
	listen := func(ctx context.Context, conn *pgx.Conn) error { return pgdb.New(conn).ListenWakes(ctx) }
	f := wake.StartForwarder(hub, connect, listen, log, e.own.sentStreamWake)
	return f.Close, f.Ready()
}

// ownConns holds the backend pids of the connections of a pool the store
// opened (Open with a DSN), so that the forwarder can leave out the stream
// wakes this store's own writes sent. Every such write woke this store's
// subscribers in process once it committed (non-Tx: when its statement
// returned; Tx: after the commit), so the NOTIFY that follows would only
// make each of them read a second time for the same events. Other
// processes' wakes, and other stores' in this process, come from other
// backends and are forwarded. Only stream topics are left out: their
// writes all wake in process after committing (publish, keyed and typed
// publishes alike). A pool the caller passed in (OpenPool) may serve
// transactions the store adopts and never sees commit, whose NOTIFY is
// then the only wake; so it has no set (nil), and everything is forwarded.
type ownConns struct {
	mu   sync.Mutex
	pids map[uint32]struct{}
}

// hook makes cfg's pool record its connections' pids in the set.
func (o *ownConns) hook(cfg *pgxpool.Config) {
	after, before := cfg.AfterConnect, cfg.BeforeClose
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, conn); err != nil {
				return err
			}
		}
		o.add(conn)
		return nil
	}
	cfg.BeforeClose = func(conn *pgx.Conn) {
		o.remove(conn)
		if before != nil {
			before(conn)
		}
	}
}

func (o *ownConns) add(conn *pgx.Conn) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pids == nil {
		o.pids = map[uint32]struct{}{}
	}
	o.pids[conn.PgConn().PID()] = struct{}{}
}

func (o *ownConns) remove(conn *pgx.Conn) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.pids, conn.PgConn().PID())
}

// sentStreamWake reports whether payload is a stream's wake that one of
// the pool's connections sent: the forwarder leaves it out.
func (o *ownConns) sentStreamWake(pid uint32, payload string) bool {
	if o == nil || !strings.HasPrefix(payload, streamWakePrefix) {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, own := o.pids[pid]
	return own
}

// streamWakePrefix begins every stream's wake on the wire.
var streamWakePrefix = wake.EncodeWake(streamTopic(""))

// listen subscribes to the channel's messages, then waits until the
// forwarder's LISTEN is in place, so the listener hears everything sent
// after Listen returns.
func (e *pgEngine) listen(ctx context.Context, s *Store, channel string, onClose func()) (*Listener, error) {
	sub := s.hub.SubscribeMessages(channel, ListenBuffer)
	if err := s.feedReady(ctx); err != nil {
		sub.Close()
		return nil, err
	}
	return newPushListener(channel, sub, onClose), nil
}

func (o pgOps) notify(ctx context.Context, channel string, payload []byte, _ time.Time) error {
	msg, err := notifyMessage(channel, payload) // size checked before any I/O
	if err != nil {
		return err
	}
	return o.q.Notify(ctx, msg)
}

func (o pgOps) pruneNotifications(context.Context, time.Time, int) (int64, error) {
	return 0, nil // NOTIFY stores nothing
}
