package store

import "context"

// pageCut bounds in bytes a page read outside a transaction: a group
// member's read (GroupOpts.PageBytes) passes one through its ctx
// (withPageCut). The engines keep the page's events while their payloads,
// keys and headers add up to at most max (its first event whatever its
// size) and drop the statement's rows after the first that does not fit:
// they come again in the next read, after the page's last event. cut says
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
