package store

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/internal/wake"
)

// Wakes and notifications on PostgreSQL.

// wakeWindow is how often, at most, writes to one topic send their own
// NOTIFY. Postgres serializes the commits of notifying transactions, so a
// NOTIFY per write would throttle concurrent writers; the first write in a
// window notifies inside its statement (commit-atomic), later ones carry none
// and a trailing wake follows each one's commit when the window closes. Other
// processes therefore hear of a busy topic's writes at most this late. An
// auto-commit publish made while a trailing wake is owed carries a NOTIFY
// after half the window, and its commit cancels the trailing wake it
// stands in for, or moves it to a window after its own NOTIFY when writes
// committed after it began (wakeGate.carry, covered); an auto-commit
// EnqueueMany or
// PublishMany carries one after half the window, owed or not
// (wakeGate.carryBatch). The
// store never sees an adopted transaction commit, so writes in one bypass
// the gate and always notify (pgOps.wake).
const wakeWindow = 5 * time.Millisecond

// gateSweep is how often the wake gate prunes its idle topics while it has
// any (see wakeGate.sweep).
const gateSweep = time.Second

// wakeGate decides which writes carry a NOTIFY and sends trailing wakes.
//
// A write that carried none is owed a wake after its own commit, which may
// come long after its statement (a Tx's write commits with the Tx): so the
// write's own commit asks for the trailing wake (owe), never the statement
// or another write's commit. A trailing wake scheduled when a write commits
// covers it, and every write that commits before it fires.
//
// Close must announce every write owed a wake before the pool closes
// (flush): it closes the gate under its lock, sends the trailing wakes still
// scheduled, including those whose timer already ran out but whose fire has
// not claimed them yet, and waits for the sends fire claimed before. After
// that no write is gated: each carries its own NOTIFY, and one owed a wake
// anyway (a commit the shutdown did not wait for) is sent at once.
//
// A topic's entry matters only while its window is open or a trailing wake
// is scheduled: one timer (sweep) prunes the others every gateSweep while
// there are any, so the table holds the topics written in about the last
// second, not every name ever written.
type wakeGate struct {
	send    func(topic string) // an auto-commit NOTIFY
	mu      sync.Mutex
	topics  map[string]*gateState
	closed  bool           // flush ran: nothing is gated or scheduled any more
	sending sync.WaitGroup // trailing wakes fire claimed and is sending
	// sweeper runs sweep while sweeping; peak is the most entries topics
	// held since it was last allocated (a Go map keeps its memory).
	sweeper  *time.Timer
	sweeping bool
	peak     int
	// seq orders owe and carry (under mu): a carrier's commit covers the
	// debts owed before it began (see covered).
	seq uint64
}

type gateState struct {
	last     time.Time // when a wake for the topic last went out
	trailing bool      // a trailing wake is scheduled and has not gone out
	timer    *time.Timer
	due      time.Time // when timer fires, while trailing
	owedSeq  uint64    // the gate's seq at the latest owe
	// carrierSeq is the seq carry gave the latest write it gave a wake,
	// carrierAt when (last, until a write that is no carrier moves it:
	// wake); see covered.
	carrierSeq uint64
	carrierAt  time.Time
}

// window is wakeWindow, unless a test set another for topic
// (wake.SetGateWindow).
func (g *wakeGate) window(topic string) time.Duration {
	if d, ok := wake.GateWindow(topic); ok {
		return d
	}
	return wakeWindow
}

// wake returns the NOTIFY payload a write to topic should carry: the wake,
// or "" when one went out within the window. A write given "" must be
// passed to owe once it committed (pgOps.sent).
func (g *wakeGate) wake(topic string) string {
	payload, _ := g.wakeRefundable(topic)
	return payload
}

// wakeGrant is a wake the gate granted (wakeRefundable): when it was
// granted, and when the topic's last wake had gone out before.
type wakeGrant struct{ at, before time.Time }

// wakeRefundable is wake for a write whose statement may send nothing
// (ResetOffset's NOTIFY goes out only with the row it stores): refund
// gives the gate back the wake such a write did not send. granted is the
// zero wakeGrant when the payload is "" or the gate is closed.
func (g *wakeGate) wakeRefundable(topic string) (payload string, granted wakeGrant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return wake.EncodeWake(topic), wakeGrant{}
	}
	st := g.entry(topic)
	now := time.Now()
	if now.Sub(st.last) >= g.window(topic) {
		granted = wakeGrant{at: now, before: st.last}
		st.last = now
		return wake.EncodeWake(topic), granted
	}
	return "", wakeGrant{}
}

// refund gives back a wake granted to a write that did not send it (a
// refused ResetOffset): the topic's window is as it was before, so its
// next write notifies at once. Kept, the window marked a NOTIFY that never
// went out, and the next write (a reset that is stored, or the refused
// one's own retry with an imported event's offset) carried none and was
// announced by a trailing wake up to a window late (review59d F2). A wake
// granted since, or a trailing wake that went out (they moved last), is
// left alone.
func (g *wakeGate) refund(topic string, granted wakeGrant) {
	if granted.at.IsZero() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.topics[topic]; st != nil && st.last.Equal(granted.at) {
		st.last = granted.before
	}
}

// carry is wake for an auto-commit write whose caller reports its commit
// (covered): while a trailing wake is scheduled, the write carries a NOTIFY
// once half the window has passed, not the whole, so that its commit,
// which announces every write that committed before the write began, can
// stand in for the trailing wake before the window closes. A trailing
// wake is an auto-commit NOTIFY of its own, which takes a transaction id
// (PostgreSQL gives every notifying transaction one): while it commits it
// holds the settled horizon of every stream's readers on the server
// (stop 40: about 1% of in-process publish -> Recv events waited 2.4-6.1
// ms behind one). A busy topic's writes then notify in their statements
// about twice a window, where they notified once and a trailing wake
// followed; other processes hear of a write as late as before at most.
// seq is what the write passes to covered; 0 when it carries no wake.
func (g *wakeGate) carry(topic string) (payload string, seq uint64) {
	return g.carryAfter(topic, false)
}

// carryBatch is carry for an auto-commit batch (EnqueueMany, PublishMany,
// keyed or not): it carries a
// NOTIFY once half the window has passed, a trailing wake scheduled or
// not. A batch's statement runs for milliseconds: one that began inside
// the window commits after it closed, and its trailing wake then went out
// at once, a NOTIFY transaction of its own (a round trip on another
// connection, a transaction id, a commit), where a NOTIFY in the
// statement costs its commit about 17k server instructions. Back-to-back
// 1,000-job batches of 2.5-5 ms sent one trailing wake every other batch,
// and so did 1,000-event PublishMany batches of 3.5-5 ms; now each
// carries its own. The bound stays about two NOTIFYs a topic a window, as
// carry's.
func (g *wakeGate) carryBatch(topic string) (payload string, seq uint64) {
	return g.carryAfter(topic, true)
}

// carryAfter is carry, and carryBatch when batch is set.
func (g *wakeGate) carryAfter(topic string, batch bool) (payload string, seq uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return wake.EncodeWake(topic), 0
	}
	st := g.entry(topic)
	now := time.Now()
	since, window := now.Sub(st.last), g.window(topic)
	if since >= window || (st.trailing || batch) && since >= window/2 {
		st.last = now
		g.seq++
		st.carrierSeq, st.carrierAt = g.seq, now
		return wake.EncodeWake(topic), g.seq
	}
	return "", 0
}

// covered runs once an auto-commit write that carry gave a wake (its seq)
// committed: its NOTIFY went out with that commit, after every write that
// was owed a wake before the write began (owe ran after their commits), so
// other processes woken by it read those writes. A trailing wake owed by
// no later write is not needed any more: it is cancelled (a fire that
// already took its timer finds it gone).
//
// A debt owed after the write began keeps the trailing wake, but it was
// owed after the write's wake went out (carrierAt), so the trailing wake
// may wait until a window after that, as for any write after a wake (not
// after last: a write that is no carrier moves it once the window closed,
// as a late timer's has, and its NOTIFY may go out much later or never,
// with a Tx's commit or not at all): with
// several writers a write is nearly always committing while a carrier
// runs, and the trailing wake went out at the end of nearly every window
// (0.4-0.8 in 100 publishes with 8 publishers, each an auto-commit NOTIFY
// transaction of its own), where the next carrier, half a window on, now
// covers it. Only the latest carrier moves it (a later one began after
// it: its own commit decides), and only a timer that has not fired.
func (g *wakeGate) covered(topic string, seq uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.topics[topic]
	if g.closed || st == nil || !st.trailing {
		return
	}
	if st.owedSeq < seq {
		st.timer.Stop()
		st.trailing = false
		wake.TrailingCovered(topic)
		return
	}
	if due := st.carrierAt.Add(g.window(topic)); st.carrierSeq == seq && due.After(st.due) && st.timer.Stop() {
		st.timer.Reset(time.Until(due))
		st.due = due
		wake.TrailingPostponed(topic)
	}
}

// entry returns topic's entry, adding it (and starting the sweep) if
// there is none. Called with mu held.
func (g *wakeGate) entry(topic string) *gateState {
	if g.topics == nil {
		g.topics = map[string]*gateState{}
	}
	st := g.topics[topic]
	if st == nil {
		st = &gateState{}
		g.topics[topic] = st
		g.peak = max(g.peak, len(g.topics))
		if !g.sweeping {
			g.sweeping = true
			if g.sweeper == nil {
				g.sweeper = time.AfterFunc(gateSweep, g.sweep)
			} else {
				g.sweeper.Reset(gateSweep)
			}
		}
		wake.GateAdded(topic)
	}
	return st
}

// owe runs after a write to topic that carried no wake committed: a
// trailing wake follows when the window closes, after this moment, so
// whoever wakes sees the write's rows. One already scheduled (it goes out
// later still) covers it. The debt is not in the table while the write is
// in flight, so a sweep may have pruned the topic meanwhile (a Tx or a
// lock wait that outlasted the window): the entry comes back with its
// window over, and the wake goes out at once.
func (g *wakeGate) owe(topic string) {
	g.mu.Lock()
	if g.closed { // flush ran, no timer may outlive it: at once, best effort
		g.mu.Unlock()
		g.send(topic)
		return
	}
	defer g.mu.Unlock()
	st := g.entry(topic)
	g.seq++
	st.owedSeq = g.seq
	if st.trailing {
		return
	}
	st.trailing = true
	st.due = st.last.Add(g.window(topic))
	st.timer = time.AfterFunc(max(time.Until(st.due), 0), func() { g.fire(topic, st) })
}

// fire sends a scheduled trailing wake, unless flush already did (or
// took it over: the gate closed). A send it claims is one flush waits for.
func (g *wakeGate) fire(topic string, st *gateState) {
	if hook := wake.TrailingHook(topic); hook != nil {
		hook()
	}
	g.mu.Lock()
	if g.closed || !st.trailing {
		g.mu.Unlock()
		return
	}
	st.trailing, st.last = false, time.Now()
	g.sending.Add(1)
	g.mu.Unlock()
	defer g.sending.Done()
	if hook := wake.SendHook(topic); hook != nil {
		hook()
	}
	g.send(topic)
}

// sweep prunes the topics whose entry no longer decides anything: no
// trailing wake scheduled (so no fire or flush needs it) and the window
// over (so the next write notifies, as it would with no entry). It runs
// every gateSweep while the table has entries and stops when it is empty;
// the table is allocated anew when it fell to a quarter of its peak.
func (g *wakeGate) sweep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || !g.sweeping {
		return
	}
	now := time.Now()
	for topic, st := range g.topics {
		idle := !st.trailing && now.Sub(st.last) >= g.window(topic)
		if idle {
			delete(g.topics, topic)
		}
		wake.GateSwept(topic, idle)
	}
	switch n := len(g.topics); {
	case n == 0:
		g.topics, g.peak, g.sweeping = nil, 0, false
		return
	case n <= g.peak/4: // maps.Clone would keep the capacity
		m := make(map[string]*gateState, n)
		for topic, st := range g.topics {
			m[topic] = st
		}
		g.topics, g.peak = m, n
	}
	g.sweeper.Reset(gateSweep)
}

// flush sends every trailing wake still owed, then waits for those fire
// is sending: the store is closing, the pool closes next, and committed
// writes must not go unannounced. A trailing wake whose timer ran out but
// whose fire has not taken the lock yet is sent here (fire then finds the
// gate closed), not left to a fire that would send on a closed pool.
func (g *wakeGate) flush() {
	g.mu.Lock()
	g.closed = true
	if g.sweeper != nil {
		g.sweeper.Stop()
	}
	var due []string
	for topic, st := range g.topics {
		if st.trailing {
			st.timer.Stop()
			st.trailing = false
			due = append(due, topic)
		}
	}
	g.mu.Unlock()
	for _, topic := range due {
		g.send(topic)
	}
	g.sending.Wait()
}

// owedWakes are the topics a transaction wrote to without a wake: each is
// owed one after the transaction commits (pgTx.commit).
type owedWakes struct {
	mu     sync.Mutex
	topics []string
}

func (w *owedWakes) add(topic string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.topics, topic) {
		w.topics = append(w.topics, topic)
	}
}

// paid hands every owed topic to the gate once the transaction committed.
func (w *owedWakes) paid(g *wakeGate) {
	w.mu.Lock()
	topics := w.topics
	w.topics = nil
	w.mu.Unlock()
	for _, topic := range topics {
		g.owe(topic)
	}
}

// startFeed runs the forwarder on a connection taken out of the pool for
// good (hijacked), so it never counts against the pool's work.
func (e *pgEngine) startFeed(hub *wake.Hub, log *slog.Logger) (func(), <-chan struct{}) {
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conn := c.Hijack()
		if e.conns != nil {
			e.conns.forget(conn) // the pool's no more, and it never writes
		}
		return conn, nil
	}
	// The connection is the store's for good, from OpenPool's pool too:
	// with idle_session_timeout set on the database or role the server
	// ended it over and over while it waited (SQLSTATE 57P05), and a
	// notification sent while it reconnected was lost (attack53b F9).
	listen := func(ctx context.Context, conn *pgx.Conn) error {
		q := pgdb.New(conn)
		if err := q.SessionDefaults(ctx); err != nil {
			return err
		}
		return q.ListenWakes(ctx)
	}
	var ignore func(*pgx.Conn, *pgconn.Notification) bool
	if e.conns != nil {
		ignore = e.heardOwnWrite
	}
	f := wake.StartForwarder(hub, connect, listen, ignore, log)
	return f.Close, f.Ready()
}

// ownWritePrefix begins the NOTIFY payload of a wake of any stream.
var ownWritePrefix = wake.EncodeWake(streamTopic(""))

// heardOwnWrite tells the feed which NOTIFYs it heard this process needs
// no wake for: a stream's wake sent on a connection of the store's own
// pool. Each write there woke the stream's receivers in this process
// directly once it committed (wakeAtCommit), or, when its outcome is
// unknown (a lost reply, a failed COMMIT), woke them anyway (wakeAfter,
// Tx.Commit); a trailing wake only stands in for such writes. Heard back,
// it cost every receiver of the stream a read that found nothing (about
// one publish in ten notifies: see wakeGate), which the next publish's
// read could have to wait for. Only the pool
// Open made is the store's alone: on an application's pool (OpenPool) a
// transaction adopted with AdoptPgx wakes this process only through the
// feed. Other processes' NOTIFYs come from backends outside the pool; a
// backend's pid is compared on the listener's server only.
func (e *pgEngine) heardOwnWrite(listener *pgx.Conn, n *pgconn.Notification) bool {
	return strings.HasPrefix(n.Payload, ownWritePrefix) && e.conns.has(n.PID, listener)
}

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
