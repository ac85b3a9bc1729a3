package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// HorizonStats says how far stream delivery trails the newest committed
// event. On PostgreSQL a reader gets only the events at or below the
// settled horizon (docs/design/stream-horizon.md): an event above it
// waits, committed, until every write transaction that was running when it
// committed has ended, on the whole server (another database's included).
// On SQLite every committed event is settled at once: Lag and Waiting are
// always 0 and Holder nil.
type HorizonStats struct {
	Settled int64 // the settled horizon: readers get every event at or below it
	Head    int64 // the newest committed event's offset, of any stream
	// Lag is Head - Settled: the offsets delivery holds back, a bound on
	// the committed events waiting (offsets drawn by transactions still
	// open, or rolled back, are among them).
	Lag int64
	// Waiting is how long the oldest committed event above the horizon
	// has waited since it was published; 0 when none waits.
	Waiting time.Duration
	// Holder is, while events wait (Lag > 0) on PostgreSQL, the oldest
	// running write transaction on the server: what holds the horizon
	// back. nil when none runs (the horizon is about to move) and on
	// SQLite.
	Holder *WriteTransaction
}

// WriteTransaction is a running write transaction as pg_stat_activity
// reports it. A role without pg_read_all_stats sees only PID and Database
// of another role's session: State is then "" and Age and QueryStart zero.
type WriteTransaction struct {
	PID        int
	Database   string        // "" for a background process
	State      string        // "active", "idle in transaction", ...
	Age        time.Duration // since the transaction began
	QueryStart time.Time     // when its current or last statement began
}

// Horizon is Stats.Horizon alone, for a dashboard that reads it often: one
// index probe per stream for the head, the horizon's own statement, and
// two more only while events wait.
func (s *Store) Horizon(ctx context.Context) (HorizonStats, error) {
	return run(handle{s: s}, "horizon", autoRead, func(o target) (HorizonStats, error) {
		counts, err := o.streamCounts(ctx, 1) // head offsets are exact whatever the count limit
		if err != nil {
			return HorizonStats{}, err
		}
		var head int64
		for _, c := range counts {
			head = max(head, c.HeadOffset)
		}
		return horizonStats(ctx, o, head, s.now())
	})
}

// horizonStats fills Stats.Horizon: head is the newest committed offset.
func horizonStats(ctx context.Context, o target, head int64, now time.Time) (HorizonStats, error) {
	hz := HorizonStats{Head: head, Settled: head}
	if head == 0 {
		return hz, nil // no event: nothing to hold back
	}
	settled, err := o.settledHorizon(ctx)
	if err != nil || settled >= head {
		return hz, err
	}
	hz.Settled, hz.Lag = settled, head-settled
	if since, err := o.firstEventAbove(ctx, settled); err != nil {
		return hz, err
	} else if since != nil {
		hz.Waiting = max(now.Sub(*since), 0)
	}
	hz.Holder, err = o.oldestWriteTransaction(ctx)
	return hz, err
}

// DefaultHorizonStallWarning is how long the settled horizon may stand
// still while committed events wait above it before the store logs a
// warning (see WithHorizonStallWarning).
const DefaultHorizonStallWarning = time.Minute

// WithHorizonStallWarning sets how long the settled horizon may stand still
// while committed events wait above it before the store logs one warning
// naming the oldest write transaction on the server (PostgreSQL; see
// HorizonStats). When the horizon moves again it logs one line saying so.
// The store notices from its own stream reads (receivers read at least
// every SafetyPoll), not from a timer of its own. Default
// DefaultHorizonStallWarning; 0 or less turns the warning off.
func WithHorizonStallWarning(d time.Duration) Option {
	return func(c *config) { c.stallWarning = d }
}

// stallWatch notices a settled horizon that stands still while committed
// events wait above it, from the reads' own snapshots.
type stallWatch struct {
	after time.Duration // 0: off
	log   *slog.Logger
	// holder names the transaction in the warning; nil when it cannot be
	// read.
	holder func(ctx context.Context) (*WriteTransaction, error)

	mu      sync.Mutex
	settled int64     // the newest horizon seen
	since   time.Time // when it last moved, or events began to wait
	waiting bool      // whether the last read saw events wait
	warned  bool
}

// observe folds in one read's horizon and the newest offset its snapshot
// saw; it logs the warning when the horizon has stood still for after
// while events waited, and the recovery when it moves after a warning.
func (w *stallWatch) observe(ctx context.Context, settled, head int64) {
	reportHeld(ctx, settled, head) // for a receiver's read: see heldReport
	if w == nil || w.after <= 0 {
		return
	}
	now := time.Now()
	w.mu.Lock()
	if w.since.IsZero() {
		w.since = now
	}
	moved := settled > w.settled
	if moved {
		w.settled = settled
	}
	waiting := settled < head
	wasWaiting := w.waiting
	w.waiting = waiting
	if moved || !waiting || !wasWaiting { // the stall starts with the first read that sees events wait
		stalled := now.Sub(w.since)
		w.since = now
		if w.warned && moved {
			w.warned = false
			w.mu.Unlock()
			w.log.Info("alkstore: stream delivery resumed: the settled horizon moved",
				"settled", settled, "stalled_for", stalled.Round(time.Millisecond))
			return
		}
	}
	stalled := now.Sub(w.since)
	warn := waiting && !w.warned && stalled >= w.after
	if warn {
		w.warned = true
	}
	w.mu.Unlock()
	if !warn {
		return
	}
	args := []any{"settled", settled, "head", head, "stalled_for", stalled.Round(time.Millisecond)}
	if tx, err := w.holder(ctx); err != nil {
		args = append(args, "holder_error", err.Error())
	} else if tx != nil {
		args = append(args, "pid", tx.PID, "database", tx.Database, "state", tx.State,
			"xact_age", tx.Age.Round(time.Millisecond), "query_start", tx.QueryStart)
	}
	w.log.Warn("alkstore: stream delivery is held back: committed events wait above the settled horizon "+
		"until the oldest write transaction on the server ends (see HorizonStats)", args...)
}
