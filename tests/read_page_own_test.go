package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestReadPagesAreTheCallersOwn: a page a read returns is the caller's
// alone. On PostgreSQL a read collects its events in a scratch slice the
// store reuses for later reads and returns a copy; a page that shared the
// scratch would change under its caller when a later read (of any stream,
// on any goroutine) filled it again. Every read form, each page checked
// after all the later reads, and appending to a page must not reach
// another.
func TestReadPagesAreTheCallersOwn(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		a, b := s.Stream("own-a"), s.Stream("own-b")
		for i := range 6 {
			_, err := a.Publish(c, fmt.Appendf(nil, "a%d", i))
			require.NoError(t, err)
			_, err = b.Publish(c, fmt.Appendf(nil, "b%d", i))
			require.NoError(t, err)
		}
		payloads := func(evs []store.Event) []string {
			var out []string
			for _, ev := range evs {
				out = append(out, ev.Stream+":"+string(ev.Payload))
			}
			return out
		}
		var pages [][]store.Event
		var want [][]string
		keep := func(evs []store.Event, err error) []store.Event {
			t.Helper()
			require.NoError(t, err)
			pages, want = append(pages, evs), append(want, payloads(evs))
			return evs
		}
		first := keep(a.ReadSince(c, 0, 3))
		keep(a.ReadSince(c, first[len(first)-1].Offset, 3))
		keep(b.ReadSince(c, 0, 6))
		keep(a.ReadFromConsumer(c, "reader", 4))
		tx, err := s.Begin(c)
		require.NoError(t, err)
		keep(b.ReadSinceTx(c, tx, 0, 2))
		keep(a.ReadFromConsumerTx(c, tx, "reader", 5))
		require.NoError(t, tx.Rollback(c))
		keep(b.ReadSince(c, 0, 6))

		require.Equal(t, []string{"own-a:a0", "own-a:a1", "own-a:a2"}, want[0])
		for i, p := range pages {
			require.Equal(t, want[i], payloads(p), "page %d changed after later reads", i)
		}
		// Appending to a page (within its capacity, if it has room) writes
		// into no other page.
		_ = append(pages[0][:1], store.Event{Stream: "x", Payload: []byte("x")}, store.Event{Stream: "x", Payload: []byte("x")})
		for i, p := range pages[1:] {
			require.Equal(t, want[i+1], payloads(p), "page %d changed by an append to page 0", i+1)
		}
	})
}
