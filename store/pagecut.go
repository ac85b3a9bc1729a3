package store

import (
	"cmp"
	"context"
)

// pageCut bounds in bytes a page read outside a transaction: a pager's
// read (a group member's, GroupOpts.PageBytes, or a receiver's,
// SubscribeOpts.PageBytes) passes one through its ctx (withPageCut). The
// engines keep the page's events while their payloads, keys and headers
// add up to at most max (its first event whatever its size) and stop at
// the first row that does not fit (SQLite steps no further and never
// copies it; PostgreSQL discards the rows after it unscanned): those rows
// come again in the next read, after the page's last event. cut says
// whether the read dropped any. A read without one (every other read)
// keeps its whole page, as before.
type pageCut struct {
	max, used, kept int
	cut             bool
}

type pageCutKey struct{}

func withPageCut(ctx context.Context, c *pageCut) context.Context {
	return context.WithValue(ctx, pageCutKey{}, c)
}

// pageCutOf is ctx's page cut; nil when it has none.
func pageCutOf(ctx context.Context) *pageCut {
	c, _ := ctx.Value(pageCutKey{}).(*pageCut)
	return c
}

// fits counts an event of n bytes into the page, or says it does not fit
// (nor does any after it: the page ends before it). A nil cut takes every
// event.
func (c *pageCut) fits(n int) bool {
	if c == nil {
		return true
	}
	if c.cut || c.kept > 0 && c.used+n > c.max {
		c.cut = true
		return false
	}
	c.used += n
	c.kept++
	return true
}

// ended reports whether the read cut its page (nil: never).
func (c *pageCut) ended() bool { return c != nil && c.cut }

// keyLen is the length of a key; 0 for none.
func keyLen(k *string) int {
	if k == nil {
		return 0
	}
	return len(*k)
}

// pager reads a consumer's pages of a stream, each at most size events
// and bytes bytes (a pageCut): a group member's (GroupOpts.PageSize and
// PageBytes) and a receiver's (SubscribeOpts'). One goroutine reads with
// it at a time.
type pager struct {
	size, bytes int
	// limit is how many events the next read asks for: size, or fewer
	// after a cut. After a cut the next read asks for one event more than
	// the page kept, so that the rows read past a cut (and dropped) stay
	// few while events are large; pages full and not cut double it back to
	// size.
	limit int
	cut   pageCut
}

// read reads the page of st after offset after (ReadSince, with ctx's
// heldReport if any). more says the page ended at one of its bounds, so
// events may follow it at once: a page short of both ends what the
// settled horizon lets be read now.
func (p *pager) read(ctx context.Context, st *Stream, after int64) (evs []Event, more bool, err error) {
	limit := cmp.Or(p.limit, p.size)
	p.cut = pageCut{max: p.bytes}
	evs, err = st.ReadSince(withPageCut(ctx, &p.cut), after, limit)
	switch {
	case err != nil:
		return nil, false, err
	case p.cut.cut:
		p.limit = len(evs) + 1
	case len(evs) == limit:
		p.limit = min(2*limit, p.size)
	}
	return evs, p.cut.cut || len(evs) == limit, nil
}
