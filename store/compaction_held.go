package store

import (
	"log/slog"
	"sync"
	"time"
)

// A compaction window that finds versions another transaction holds keeps
// the stream's cursor below it (PostgreSQL; see CompactSuperseded): a
// janitor frozen mid-window, or a connection that died unnoticed with its
// transaction open, holds them until the lock goes. Meanwhile nothing of
// the stream is compacted and none of its tombstones expire (a tombstone
// goes once the cursor has walked past it), and a pass's count is 0 like
// that of a stream with nothing to do. So the store warns, naming the
// stream, once its cursor has stayed for held versions over
// CompactionHeldPasses consecutive passes of this store spanning
// CompactionHeldAfter, again every CompactionHeldRepeat while it lasts,
// and logs one line when the cursor moves again.
const (
	CompactionHeldPasses = 3
	CompactionHeldAfter  = time.Minute
	CompactionHeldRepeat = 10 * time.Minute
)

// heldCompactions is, by stream, how long this store's compaction passes
// have found the stream's cursor held.
type heldCompactions struct {
	mu      sync.Mutex
	streams map[string]*heldCompaction
}

type heldCompaction struct {
	since    time.Time // the first pass of the run that kept the cursor
	passes   int       // consecutive passes that kept it
	cursor   int64     // where it stays
	warnedAt time.Time // the last warning; zero: none yet
}

// observe folds in one pass over stream: held says the pass kept the
// cursor (at cursor) for held versions and moved it nowhere.
func (h *heldCompactions) observe(log *slog.Logger, stream string, now time.Time, held bool, cursor int64) {
	h.mu.Lock()
	c := h.streams[stream]
	if !held {
		if c != nil {
			delete(h.streams, stream)
		}
		h.mu.Unlock()
		if c != nil && !c.warnedAt.IsZero() {
			log.Info("alkstore: compaction of the stream resumed: the versions it skipped are no longer held",
				"stream", stream, "cursor", cursor, "held_for", now.Sub(c.since).Round(time.Second), "passes", c.passes)
		}
		return
	}
	if c == nil || c.cursor != cursor {
		if h.streams == nil {
			h.streams = map[string]*heldCompaction{}
		}
		c = &heldCompaction{since: now, cursor: cursor}
		h.streams[stream] = c
	}
	c.passes++
	warn := c.passes >= CompactionHeldPasses && now.Sub(c.since) >= CompactionHeldAfter &&
		(c.warnedAt.IsZero() || now.Sub(c.warnedAt) >= CompactionHeldRepeat)
	if warn {
		c.warnedAt = now
	}
	passes, since := c.passes, c.since
	h.mu.Unlock()
	if warn {
		log.Warn("alkstore: compaction of the stream is held back: another transaction holds versions of its next window "+
			"(a janitor stopped mid-window, or a connection whose transaction stayed open), so its cursor stays and "+
			"none of its superseded versions or tombstones past the cursor go until that transaction ends",
			"stream", stream, "cursor", cursor, "held_for", now.Sub(since).Round(time.Second), "passes", passes)
	}
}
