package tests

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestReceiverPagesAreBoundedInBytes: a receiver's read of the stream
// holds at most SubscribeOpts.PageBytes of events (an event larger than
// that alone), whatever PageSize lets it take: events of 1, 1, 4, 1 and 1
// MiB with PageBytes 3 MiB come in pages of 1+1 (the 4 MiB event would
// take the page to 6), 4 (alone: a page's first event is taken whatever
// its size) and 1+1, in order, none skipped, none twice. The pages are
// told apart by the receiver's reads: a statement hook stops the reader
// after each read until the test has taken every event the reader sent
// before it (a page's events are all sent before the next read), so the
// events taken at each stop are one page. Before (PageBytes ignored),
// both engines: one page of all 5 events, 8 MiB.
func TestReceiverPagesAreBoundedInBytes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		const mib, bound = 1 << 20, 3 << 20
		reads := make(chan chan struct{}) // a read that ended, waiting for the test to let it return
		free := make(chan struct{})       // closed: reads no longer wait
		hook := func(name string) {
			if name != "ReadEvents" && name != "ReadEventsOutsideTx" {
				return
			}
			goOn := make(chan struct{})
			select {
			case reads <- goOn:
				select {
				case <-goOn:
				case <-free:
				}
			case <-free:
			}
		}
		s := e.openHooked(t, hook)
		st := s.Stream("big")
		sizes := []int{1, 1, 4, 1, 1}
		msgs := make([]store.Message, len(sizes))
		for i, n := range sizes {
			msgs[i] = store.Message{Payload: bytes.Repeat([]byte{byte('a' + i)}, n*mib)}
		}
		offs, err := st.PublishMany(c, msgs)
		require.NoError(t, err)
		// SafetyPoll: a page short of both bounds ends a drain, and the
		// reader reads again (and stops in the hook) at the next poll.
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{PageBytes: bound, SafetyPoll: 10 * time.Millisecond})
		require.NoError(t, err)
		defer r.Close()
		defer close(free) // before Close: a reader stopped in the hook goes on
		var pages [][]int // the sizes in MiB of each page's events
		got := 0
		for got < len(msgs) {
			var goOn chan struct{}
			select {
			case goOn = <-reads:
			case <-c.Done():
				t.Fatalf("%s: no read after %d events (pages %v)", e.name, got, pages)
			}
			var page []int
			for {
				ev, ok, err := r.TryRecv(c)
				require.NoError(t, err)
				if !ok {
					break
				}
				require.Less(t, got, len(msgs), "%s: an event more than published", e.name)
				require.Equal(t, offs[got], ev.Offset, "%s: event %d: in order, none skipped, none twice", e.name, got)
				require.Equal(t, msgs[got].Payload, ev.Payload, "%s: event %d", e.name, got)
				page = append(page, len(ev.Payload)/mib)
				got++
			}
			if page != nil {
				pages = append(pages, page)
			}
			close(goOn)
		}
		t.Logf("%s: MiB of each page's events: %v", e.name, pages)
		for _, p := range pages {
			sum := 0
			for _, n := range p {
				sum += n * mib
			}
			if len(p) > 1 {
				assert.LessOrEqual(t, sum, bound, "%s: a page of %d bytes (pages %v)", e.name, sum, pages)
			}
		}
		assert.Equal(t, [][]int{{1, 1}, {4}, {1, 1}}, pages, "%s: pages of 1+1, 4 and 1+1 MiB", e.name)
	})
}
